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
	f := New(Options{Strict: true})
	defer f.Close()
	d, err := f.openDevice("sim0")
	require.NoError(t, err)
	defer d.Close()
	p, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	defer p.Close()
	c, err := d.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4})
	require.NoError(t, err)
	defer c.Close()
	ring, err := ctx.AllocBuffer(prm.WQEBBSize, ctx.BufferOptions{})
	require.NoError(t, err)
	defer ring.Close()
	db, err := ctx.AllocBuffer(64, ctx.BufferOptions{})
	require.NoError(t, err)
	defer db.Close()
	q, err := adoptQueuePair(p, simadopt.QPConfig{Type: ctx.QPTypeRC, SendCQ: c, RecvCQ: c,
		Caps: ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 1, MaxInline: 12},
		SQ:   ring.Pointer(), SQCount: 1, DBRec: db.Pointer()})
	require.NoError(t, err, "one WQEBB for one work request, as libmlx5 sizes it")
	require.Equal(t, uint32(1), q.(*qp).maxWQEBBs, "no WQE larger than the ring")
	require.NoError(t, q.Close())
}
