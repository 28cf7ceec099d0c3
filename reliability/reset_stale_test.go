package reliability

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestResetDiscardsUnpolledCompletions resets a connected pair while the
// completions of its last exchange still lie unpolled in both CQs (found
// by FuzzLifecycle). RESET discards the outstanding work requests without
// a completion and restarts the rings at index 0, so those old CQEs name
// WQE indexes that the work requests posted after the reset reuse: left
// in the ring, the send CQE retired the new SEND before the model had
// executed it, and the receive CQE completed the new receive with the old
// message's byte count while its buffer was never written. As rdma-core's
// mlx5_modify_qp cleans the QP's CQEs out of its CQs on the way to RESET,
// Reset removes them from the Pollers the QP was added to, and the
// software HCA drops the CQEs it still holds for the QP.
func TestResetDiscardsUnpolledCompletions(t *testing.T) {
	x := newFabric(t, sim.Options{})
	p := newRCPair(t, x, rc.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64})
	r0, r1 := p.r[0], p.r[1]
	// An exchange whose completions are written and not polled.
	require.NoError(t, p.qp[1].PostRecv(1, r1.addr(0), 256, r1.lkey()))
	st, err := p.qp[0].Post(1, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, st.Send().SGE(r0.addr(0), 100, r0.lkey()).FinishBlueFlame())
	require.NoError(t, x.f.RunUntilIdle())
	copy(r1.shadow, r1.mem)

	for i := range 2 {
		require.NoError(t, p.qp[i].Reset())
	}
	// The receive buffer of the new receive, filled with a pattern that
	// only a SEND may change.
	for i := range 256 {
		r1.mem[1024+i] = slotPattern
	}
	copy(r1.shadow[1024:1024+256], r1.mem[1024:1024+256])
	require.NoError(t, p.qp[1].PostRecv(2, r1.addr(1024), 256, r1.lkey()))
	require.NoError(t, p.qp[0].Connect(p.qp[1].Endpoint()))
	require.NoError(t, p.qp[1].Connect(p.qp[0].Endpoint()))
	st, err = p.qp[0].Post(2, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, st.Send().SGE(r0.addr(512), 7, r0.lkey()).FinishBlueFlame())

	// Before the model runs, no completion may be handed over: the old
	// ones went with the reset, the new SEND has not executed.
	for i := range 2 {
		p.p[i].Poll(16, func(c *transport.Completion) {
			t.Errorf("CQ %d: completion WRID %d opcode %v bytes %d before the model ran (match %v)",
				i, c.WRID, c.Opcode, c.ByteCount, c.Match)
		})
	}
	require.NoError(t, r1.check(), "the new receive's buffer changed before the SEND executed")

	// Then exactly the new SEND and its receive, with its 7 bytes.
	got := p.drain(t)
	require.Len(t, got, 2, "%+v", got)
	for _, c := range got {
		require.Equal(t, transport.MatchOK, c.Match, "%v", c.Err())
		require.Equal(t, uint64(2), c.WRID)
		if c.Opcode != prm.CQEReq {
			require.Equal(t, uint32(7), c.ByteCount)
		}
	}
	require.Equal(t, r0.mem[512:519], r1.mem[1024:1031])
	require.Zero(t, p.qp[0].Unmatched()+p.qp[1].Unmatched())
	require.NoError(t, p.p[0].Err())
	require.NoError(t, p.p[1].Err())
}
