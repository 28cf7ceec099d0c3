package sim

import (
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// TestAdoptedCQResizeArmed resizes an armed CQ of 128-byte CQEs: the
// resize CQE (in the second half of the old ring's next entry) raises no
// event, the arm holds across the switch and the first CQE in the new
// ring raises it; an arm behind CQEs an event reported finds nothing new
// in the resize CQE. A CQ of another kind, a ring of the wrong shape and
// a closed CQ are refused.
func TestAdoptedCQResizeArmed(t *testing.T) {
	f := New(Options{})
	defer f.Close()
	dev, err := f.openDevice("")
	require.NoError(t, err)
	defer dev.Close()
	ringOf := func(n int) (*ctx.Buffer, []byte) {
		b, err := ctx.AllocBuffer(n*prm.CQE128Size, ctx.BufferOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		s := unsafe.Slice((*byte)(b.Pointer()), n*prm.CQE128Size)
		for i := 0; i < n; i++ {
			s[i*prm.CQE128Size+prm.CQE128Size-prm.CQE64Size+prm.CQEOpOwn] = prm.CQEInvalidOpOwn | prm.CQEOwnerMask
		}
		return b, s
	}
	opOwn := func(s []byte, i int) byte { return s[i*prm.CQE128Size+prm.CQE128Size-prm.CQE64Size+prm.CQEOpOwn] }
	old, oldS := ringOf(4)
	db, err := ctx.AllocBuffer(64, ctx.BufferOptions{})
	require.NoError(t, err)
	defer db.Close()
	var events atomic.Int32
	c, err := adoptCompletionQueue(dev, simadopt.CQConfig{Ring: old.Pointer(), Count: 4, CQESize: prm.CQE128Size,
		DBRec: db.Pointer(), Event: func() { events.Add(1) }})
	require.NoError(t, err)
	defer c.Close()
	cqn := c.Descriptor().CQN
	armWord := unsafe.Add(db.Pointer(), prm.DoorbellRecordSendB)
	arm := func(sn, ci uint32) { prm.Store32(armWord, sn<<prm.CQArmSNShift|ci) }
	var img [prm.CQE64Size]byte
	img[prm.CQEOpOwn] = prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, 0)

	// One CQE reported by an event, then armed again behind it.
	arm(0, 0)
	require.NoError(t, f.InjectCQE(cqn, img))
	require.Equal(t, int32(1), events.Load())
	new8, newS := ringOf(8)
	require.NoError(t, simadopt.ResizeCompletionQueue(c, simadopt.CQResize{Ring: new8.Pointer(), Count: 8}))
	require.Equal(t, prm.OpOwn(prm.CQEResizeCQ, prm.CQEFormatNone, false, 0), opOwn(oldS, 1), "the resize CQE at index 1")
	arm(1, 0)
	f.mu.Lock()
	f.takeArm(f.cqs[cqn])
	f.mu.Unlock()
	require.Equal(t, int32(1), events.Load(), "behind only a reported CQE and the resize CQE: no event")
	require.NoError(t, f.InjectCQE(cqn, img))
	require.Equal(t, int32(2), events.Load(), "the arm holds across the resize")
	require.Equal(t, prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, 0), opOwn(newS, 2), "index 2 of the new ring")

	// Armed when resized: the resize CQE raises nothing, the next CQE does.
	prm.Store32(db.Pointer(), 3<<24) // consumer index 3, big-endian
	arm(2, 3)
	new16, newS16 := ringOf(16)
	require.NoError(t, simadopt.ResizeCompletionQueue(c, simadopt.CQResize{Ring: new16.Pointer(), Count: 16}))
	require.Equal(t, prm.OpOwn(prm.CQEResizeCQ, prm.CQEFormatNone, false, 0), opOwn(newS, 3))
	require.Equal(t, int32(2), events.Load(), "the resize CQE raises no event")
	require.NoError(t, f.InjectCQE(cqn, img))
	require.Equal(t, int32(3), events.Load())
	require.Equal(t, prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, 0), opOwn(newS16, 4))

	for name, r := range map[string]simadopt.CQResize{
		"nil ring":         {Count: 8},
		"not a power of 2": {Ring: new8.Pointer(), Count: 6},
		"one entry":        {Ring: new8.Pointer(), Count: 1},
		"misaligned":       {Ring: unsafe.Add(new8.Pointer(), 64), Count: 8},
	} {
		require.ErrorIs(t, simadopt.ResizeCompletionQueue(c, r), ctx.ErrInvalidArgument, name)
	}
	own, err := dev.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4})
	require.NoError(t, err)
	defer own.Close()
	require.ErrorIs(t, simadopt.ResizeCompletionQueue(own, simadopt.CQResize{Ring: new8.Pointer(), Count: 8}),
		ctx.ErrInvalidArgument, "a CQ over the model's own ring")
	require.NoError(t, c.Close())
	require.ErrorIs(t, simadopt.ResizeCompletionQueue(c, simadopt.CQResize{Ring: new8.Pointer(), Count: 8}), ctx.ErrClosed)
}
