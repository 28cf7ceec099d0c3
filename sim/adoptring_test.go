package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// TestAdoptQueuePairSmallRing adopts the ring libmlx5 sizes for one send
// work request (one WQEBB), which is smaller than the kit's sizing of the
// largest WQE for those capabilities: mlx5_ib takes it, and so does the
// model, bounding the WQEs by the ring.
func TestAdoptQueuePairSmallRing(t *testing.T) {
	adopt := adoptFixture(t, 1)
	q, err := adopt(ctx.QPTypeRC, ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 1, MaxInline: 12})
	require.NoError(t, err, "one WQEBB for one work request, as libmlx5 sizes it")
	require.Equal(t, uint32(1), q.maxWQEBBs, "no WQE larger than the ring")
	require.NoError(t, q.Close())
}

// TestAdoptQueuePairInlineBeyondDS adopts queue pairs whose inline size is
// what libmlx5 grants for a 1 KiB slot, beyond what the ds count lets a WQE
// carry (UD: 956 bytes, 940 expressible; RC with SENDs only: 1004, 972):
// mlx5_ib checks no inline size, and the model takes them at its limit.
// Inline sizes no slot holds are still refused.
func TestAdoptQueuePairInlineBeyondDS(t *testing.T) {
	const cnt = 16
	fixture := adoptFixture(t, cnt)
	adopt := func(typ ctx.QPType, inline uint32) (*qp, error) {
		return fixture(typ, ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 1, MaxInline: inline})
	}
	for typ, granted := range map[ctx.QPType]uint32{ctx.QPTypeUD: 956, ctx.QPTypeRC: 1004, ctx.QPTypeDCI: 956} {
		q, err := adopt(typ, granted)
		require.NoError(t, err, "%v with %d bytes inline, as libmlx5 grants", typ, granted)
		require.Equal(t, uint32(cnt), q.maxWQEBBs, "%v", typ)
		require.NoError(t, q.Close())
		_, err = adopt(typ, granted+16)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%v with %d bytes inline", typ, granted+16)
	}
}

// adoptFixture opens a device of a private Fabric with a protection domain
// and a CQ, and a send ring of sqWQEBBs basic blocks with a doorbell
// record, all closed at the end of the test; it returns a function that
// adopts a QP of type typ and caps over them.
func adoptFixture(t *testing.T, sqWQEBBs uint32) func(typ ctx.QPType, caps ctx.QueuePairCaps) (*qp, error) {
	t.Helper()
	f := New(Options{Strict: true})
	t.Cleanup(func() { f.Close() })
	d, err := f.openDevice("sim0")
	require.NoError(t, err)
	t.Cleanup(func() { d.Close() })
	p, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	c, err := d.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4})
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	ring, err := ctx.AllocBuffer(int(sqWQEBBs)*prm.WQEBBSize, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { ring.Close() })
	db, err := ctx.AllocBuffer(64, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { db.Close() })
	return func(typ ctx.QPType, caps ctx.QueuePairCaps) (*qp, error) {
		q, err := adoptQueuePair(p, simadopt.QPConfig{Type: typ, SendCQ: c, RecvCQ: c, Caps: caps,
			SQ: ring.Pointer(), SQCount: sqWQEBBs, DBRec: db.Pointer()})
		if err != nil {
			return nil, err
		}
		return q.(*qp), nil
	}
}
