package sim

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

func portState(t *testing.T, c *ctx.Context, port uint8) ctx.PortState {
	t.Helper()
	pa, err := c.QueryPort(port)
	require.NoError(t, err)
	return pa.State
}

// TestPortFlapRetryExceeded: a port that stays down longer than the
// requester's retries last fails its RC work with RETRY_EXC_ERR; PORT_ERR
// and PORT_ACTIVE reach the devices of that HCA only, in order.
func TestPortFlapRetryExceeded(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.rcPair(qpOpts{})
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), dataSeg(8, e.mr.LKey(), e.addr(0)))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op, "the link works before the flap")

	require.NoError(t, e.f.SetPortState("sim1", 1, false))
	require.NoError(t, e.f.SetPortState("sim1", 1, false), "setting the same state again")
	require.Equal(t, ctx.PortStateDown, portState(t, e.c2, 1))
	require.Equal(t, ctx.PortStateActive, portState(t, e.c, 1))
	evs := readEvents(t, e.c2)
	require.Len(t, evs, 1, "one PORT_ERR, none for the repeated state")
	require.Equal(t, ctx.EventPortError, evs[0].Type)
	require.Equal(t, uint8(1), evs[0].Port)
	require.Empty(t, readEvents(t, e.c), "sim0's port did not change")
	require.Equal(t, ctx.QPStateRTS, qpState(t, a), "an idle QP notices nothing")

	retries := e.f.Stats().Retries
	start := e.f.Now()
	i := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), dataSeg(8, e.mr.LKey(), e.addr(0)))
	j := a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dataSeg(8, e.mr.LKey(), e.addr(0)))
	e.run()
	cqes := a.scq.drain()
	require.Len(t, cqes, 2)
	requireErr(t, cqes[0], prm.CQEReqErr, prm.SyndromeTransportRetryExc, i)
	requireErr(t, cqes[1], prm.CQEReqErr, prm.SyndromeWRFlush, j)
	require.Equal(t, ctx.QPStateError, qpState(t, a))
	require.Equal(t, retries+7, e.f.Stats().Retries, "retry_cnt 7: seven resends after the first try, eight tries unanswered")
	require.GreaterOrEqual(t, e.f.Now()-start, 8*ctx.AckTimeoutDuration(14), "each try waited the ACK timeout")

	require.NoError(t, e.f.SetPortState("sim1", 1, true))
	require.Equal(t, ctx.PortStateActive, portState(t, e.c2, 1))
	evs = readEvents(t, e.c2)
	require.Len(t, evs, 1)
	require.Equal(t, ctx.EventPortActive, evs[0].Type)
	require.Equal(t, uint8(1), evs[0].Port)
	require.Equal(t, ctx.QPStateError, qpState(t, a), "a QP in error stays there")
	require.Equal(t, ctx.QPStateRTS, qpState(t, b), "the peer that sent nothing is still RTS")
}

// TestPortFlapShortRecovers: a port that comes back before the retries are
// spent costs a retry, and the request completes.
func TestPortFlapShortRecovers(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	copy(e.mem(0, 8), "flapflap")
	require.NoError(t, e.f.SetPortState("sim0", 1, false))
	require.Equal(t, ctx.PortStateDown, portState(t, e.c, 1))
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(64), e.mr2.RKey()), dataSeg(8, e.mr.LKey(), e.addr(0)))
	_, err := e.f.Step()
	require.NoError(t, err)
	_, ok := a.scq.poll()
	require.False(t, ok, "the request waits for an answer")
	require.NotEqual(t, "flapflap", string(e.mem2(64, 8)))
	require.NoError(t, e.f.SetPortState("sim0", 1, true))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	require.Equal(t, "flapflap", string(e.mem2(64, 8)))
	evs := readEvents(t, e.c)
	require.Len(t, evs, 2)
	require.Equal(t, []ctx.AsyncEventType{ctx.EventPortError, ctx.EventPortActive}, []ctx.AsyncEventType{evs[0].Type, evs[1].Type})
}

// TestPortDownUDLost: a UD send from a port that is down completes (the
// wire is not acknowledged) and its datagram is lost.
func TestPortDownUDLost(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeUD})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeUD})
	for _, q := range []*testQP{a, b} {
		require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, QKey: 0x1234}))
		require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR}))
		require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS}))
	}
	b.postRecv(dataSeg(1024, e.mr2.LKey(), e.addr2(0)))
	require.NoError(t, e.f.SetPortState("sim0", 1, false))
	dropped := e.f.Stats().UDDropped
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, udAV(0x1234, b.qp.QPN(), lidOf(t, e.c2)), dataSeg(8, e.mr.LKey(), e.addr(0)))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	_, ok := b.rcq.poll()
	require.False(t, ok, "nothing arrived")
	require.Equal(t, dropped+1, e.f.Stats().UDDropped)
}

// TestSetPortStateRefusesBadInput: an unknown device or port is an error
// and raises nothing.
func TestSetPortStateRefusesBadInput(t *testing.T) {
	e := newEnv(t, Options{})
	err := e.f.SetPortState("sim0", 2, false)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "port 2 of 1")
	require.ErrorIs(t, e.f.SetPortState("sim9", 1, false), ctx.ErrNotFound)
	require.ErrorIs(t, e.f.FailDevice("sim9"), ctx.ErrNotFound)
	require.Empty(t, readEvents(t, e.c))
	require.Equal(t, ctx.PortStateActive, portState(t, e.c, 1))
}

// TestDeviceFatal: DEVICE_FATAL reaches the failed HCA's devices, every QP
// of it moves to error and flushes, later verbs fail with EIO, and closing
// still works.
func TestDeviceFatal(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.rcPair(qpOpts{})
	r := b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
	i := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), dataSeg(8, e.mr.LKey(), e.addr(0)))
	require.NoError(t, e.f.FailDevice("sim0"))
	require.NoError(t, e.f.FailDevice("sim0"), "failing again")
	e.run()
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeWRFlush, i)
	require.Equal(t, ctx.QPStateError, qpState(t, a))
	evs := readEvents(t, e.c)
	require.Len(t, evs, 1)
	require.Equal(t, ctx.EventDeviceFatal, evs[0].Type)
	require.Empty(t, readEvents(t, e.c2), "sim1 did not fail")
	require.Equal(t, ctx.QPStateRTS, qpState(t, b))
	_, ok := b.rcq.poll()
	require.False(t, ok, "the peer's receive %d is still posted", r)

	eio := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, syscall.EIO)
		var oe *ctx.OpError
		require.True(t, errors.As(err, &oe))
		require.Equal(t, syscall.EIO, oe.Errno())
		require.Contains(t, err.Error(), "fatal device error")
	}
	_, err := e.c.AllocProtectionDomain()
	eio(err)
	_, err = e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8})
	eio(err)
	_, err = e.c.QueryPort(1)
	eio(err)
	_, err = e.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: a.scq.cq, RecvCQ: a.rcq.cq,
		Caps: ctx.QueuePairCaps{SendDepth: 4, RecvDepth: 4}})
	eio(err)
	_, err = e.pd.RegisterBuffer(e.buf, allAccess)
	eio(err)
	eio(a.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS}))
	require.NoError(t, a.qp.Modify(ctx.QPAttr{State: ctx.QPStateReset}), "moving to RESET still works")
	eio(a.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
	require.NoError(t, a.qp.Close(), "destroying still works")
	require.NoError(t, a.scq.cq.Close())

	// The peer's traffic to the failed HCA is never answered.
	j := b.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dataSeg(8, e.mr2.LKey(), e.addr2(0)))
	e.run()
	c := b.scq.one(t)
	require.Equal(t, prm.SyndromeTransportRetryExc, c.synd, "counter %d", j)
}

// TestRecoverDevice: after RecoverDevice a newly opened device works, while
// the one open during the failure keeps failing.
func TestRecoverDevice(t *testing.T) {
	e := newEnv(t, Options{})
	require.NoError(t, e.f.FailDevice(""))
	require.NoError(t, e.f.RecoverDevice("sim0"))
	_, err := e.c.AllocProtectionDomain()
	require.ErrorIs(t, err, syscall.EIO, "a device open during the failure stays failed")
	c, err := e.f.Open("sim0")
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	require.Equal(t, ctx.PortStateActive, portState(t, c, 1))
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	require.NoError(t, pd.Close())
	require.Empty(t, readEvents(t, c), "opened after the failure: no event")
}
