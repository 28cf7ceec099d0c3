package sim

import (
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestInjectUDFaultsRefusesBadProbabilities: a probability outside [0, 1],
// NaN, or a sum past 1 is refused with ctx.ErrInvalidArgument and leaves
// the settings as they were.
func TestInjectUDFaultsRefusesBadProbabilities(t *testing.T) {
	e := newEnv(t, Options{})
	for _, u := range []UDFaults{
		{Drop: -0.1},
		{Duplicate: 1.5},
		{Reorder: math.NaN()},
		{Drop: 0.6, Duplicate: 0.6},
		{Drop: math.Inf(1)},
	} {
		require.ErrorIs(t, e.f.InjectUDFaults(u), ctx.ErrInvalidArgument, "%+v", u)
	}
	require.NoError(t, e.f.InjectUDFaults(UDFaults{Drop: 0.25, Duplicate: 0.25, Reorder: 0.5}))
	require.NoError(t, e.f.InjectUDFaults(UDFaults{}))
	a := e.udQP(e.pd, 1, qpOpts{})
	b := e.udQP(e.pd2, 1, qpOpts{})
	b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
	require.Error(t, e.f.InjectUDFaults(UDFaults{Drop: 2}))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(1, b.qp.QPN(), 2), inlineSeg([]byte("x")))
	e.run()
	require.Equal(t, prm.CQERespSend, b.rcq.one(t).op, "a refused setting injects nothing")
}

// TestDelayCompletionsRefusesNegative: a negative delay is refused with
// ctx.ErrInvalidArgument.
func TestDelayCompletionsRefusesNegative(t *testing.T) {
	e := newEnv(t, Options{})
	c := e.newCQ(e.c, 16, 64)
	require.ErrorIs(t, e.f.DelayCompletions(c.cq.CQN(), -time.Millisecond), ctx.ErrInvalidArgument)
	require.NoError(t, e.f.DelayCompletions(c.cq.CQN(), 0))
}

// heldDatagram returns a fresh env whose UD QP a has sent one datagram to
// b (a receive posted) that the fault injector holds back (reordered).
func heldDatagram(t *testing.T) (e *env, a, b *testQP) {
	t.Helper()
	e = newEnv(t, Options{})
	a = e.udQP(e.pd, 1, qpOpts{})
	b = e.udQP(e.pd2, 1, qpOpts{})
	b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
	require.NoError(t, e.f.InjectUDFaults(UDFaults{Reorder: 1}))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(1, b.qp.QPN(), 2), inlineSeg([]byte("held")))
	for i := 0; i < 4; i++ {
		_, err := e.f.Step()
		require.NoError(t, err)
	}
	require.Equal(t, uint64(1), e.f.Stats().UDReordered)
	return e, a, b
}

// TestUDHeldPacketDroppedOnDestroyCounts: a datagram the fault injector
// held back for a QP that is reset or destroyed before it is delivered is
// counted in UDDropped, so that received + dropped = sent + duplicated.
func TestUDHeldPacketDroppedOnDestroyCounts(t *testing.T) {
	for _, destroy := range []bool{false, true} {
		e, a, b := heldDatagram(t)
		require.Zero(t, e.f.Stats().UDDropped)
		if destroy {
			require.NoError(t, b.qp.Close())
		} else {
			require.NoError(t, b.qp.Modify(ctx.QPAttr{State: ctx.QPStateReset}))
		}
		e.run()
		require.Equal(t, prm.CQEReq, a.scq.one(t).op)
		require.Equal(t, uint64(1), e.f.Stats().UDDropped, "destroy %v: the held datagram is dropped", destroy)
	}
}

// TestUDHeldPacketLostWhenPortGoesDown: a datagram the fault injector held
// back is lost when the destination's port goes down before it arrives,
// as no packet reaches a port that is down.
func TestUDHeldPacketLostWhenPortGoesDown(t *testing.T) {
	e, a, b := heldDatagram(t)
	require.NoError(t, e.f.SetPortState("sim1", 1, false))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	require.Empty(t, b.rcq.drain(), "nothing reaches a port that is down")
	require.Equal(t, uint64(1), e.f.Stats().UDDropped)
}

// TestStatsRingNoSpaceAfterClose: Close leaves the shared fabric but keeps
// the count of the messages its rings had no room for.
func TestStatsRingNoSpaceAfterClose(t *testing.T) {
	e1, _ := sharedPair(t)
	e1.f.mu.Lock()
	require.NotNil(t, e1.f.shm)
	e1.f.shm.noSpace = 3
	e1.f.mu.Unlock()
	require.Equal(t, uint64(3), e1.f.Stats().RingNoSpace)
	require.NoError(t, e1.f.Close())
	require.Equal(t, uint64(3), e1.f.Stats().RingNoSpace, "after Close")
}
