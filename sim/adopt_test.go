package sim

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestAdoptCompletionQueue creates a CQ over a ring and doorbell record the
// caller owns and checks that the model writes its CQEs there, that it
// refuses bad geometry, and that Close gives the CQN back.
func TestAdoptCompletionQueue(t *testing.T) {
	f := New(Options{})
	defer f.Close()
	dev, err := f.OpenDevice("")
	require.NoError(t, err)
	defer dev.Close()

	ring, err := ctx.AllocBuffer(8*prm.CQE64Size, ctx.BufferOptions{})
	require.NoError(t, err)
	defer ring.Close()
	db, err := ctx.AllocBuffer(64, ctx.BufferOptions{})
	require.NoError(t, err)
	defer db.Close()
	rb := unsafe.Slice((*byte)(ring.Pointer()), 8*prm.CQE64Size)
	for i := 0; i < 8; i++ {
		rb[i*prm.CQE64Size+prm.CQEOpOwn] = prm.CQEInvalidOpOwn | prm.CQEOwnerMask
	}

	cfg := AdoptedCQConfig{Ring: ring.Pointer(), Count: 8, CQESize: prm.CQE64Size, DBRec: db.Pointer()}
	for name, bad := range map[string]func(c *AdoptedCQConfig){
		"count not a power of two": func(c *AdoptedCQConfig) { c.Count = 6 },
		"count above the limit":    func(c *AdoptedCQConfig) { c.Count = maxCQE * 2 },
		"CQE size":                 func(c *AdoptedCQConfig) { c.CQESize = 32 },
		"misaligned record":        func(c *AdoptedCQConfig) { c.DBRec = unsafe.Add(db.Pointer(), 4) },
		"nil ring":                 func(c *AdoptedCQConfig) { c.Ring = nil },
		"completion vector":        func(c *AdoptedCQConfig) { c.CompVector = compVectors },
	} {
		c := cfg
		bad(&c)
		_, err := AdoptCompletionQueue(dev, c)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
	}

	c, err := AdoptCompletionQueue(dev, cfg)
	require.NoError(t, err)
	d := c.Descriptor()
	require.Equal(t, ring.Pointer(), d.Buf)
	require.Equal(t, db.Pointer(), d.DBRec)
	info, ok := f.CompletionQueue(d.CQN)
	require.True(t, ok)
	require.Equal(t, uint32(8), info.Count)
	require.Equal(t, ring.Pointer(), info.Ring)

	var img [prm.CQE64Size]byte
	img[prm.CQEOpOwn] = prm.OpOwn(prm.CQEReqErr, prm.CQEFormatNone, false, 0)
	require.NoError(t, f.InjectCQE(d.CQN, img))
	require.Equal(t, prm.CQEReqErr, prm.OpOwnOpcode(rb[prm.CQEOpOwn]), "the CQE landed in the caller's ring")
	require.Equal(t, uint8(0), rb[prm.CQEOpOwn]&prm.CQEOwnerMask, "owner bit of lap 0")

	require.NoError(t, c.Close())
	_, ok = f.CompletionQueue(d.CQN)
	require.False(t, ok, "closed CQ is gone")
}
