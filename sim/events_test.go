package sim

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// TestArmSequenceThroughNotifier runs the event path of the data plane
// (monocq arms, ctx.CompletionQueue.ReadEvent consumes, the poller
// acknowledges) through more than four rounds, so the 2-bit arm sequence
// number wraps; the model checks each arm's number against the events
// read, and strict mode fails the test on any mismatch.
func TestArmSequenceThroughNotifier(t *testing.T) {
	e := newEnv(t, Options{})
	cq, err := e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8, EventChannel: true})
	require.NoError(t, err)
	d := provider.CQDescriptor(cq)
	poll, err := monocq.New(monocq.Config{Buf: d.Buf, CQECnt: d.CQECnt, CQESize: d.CQESize, DBRec: d.DBRec, UAR: d.UAR, CQN: d.CQN})
	require.NoError(t, err)
	n, err := completion.NewNotifier(cq, poll)
	require.NoError(t, err)
	defer n.Close()
	qp, err := e.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 8}})
	require.NoError(t, err)
	q := &testQP{e: e, qp: qp, d: provider.QPDescriptor(qp), scq: &testCQ{cq: cq, d: d}}
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	e.connectRC(q, b, 7, 1)

	const rounds = 11
	for round := range rounds {
		// Nothing ready: Wait arms and sleeps. The model runs its engine
		// step from here once the arm is visible, then completes a NOP.
		done := make(chan error, 1)
		go func() { done <- n.WaitTimeout(5 * time.Second) }()
		require.Eventually(t, func() bool {
			e.run()
			return len(e.f.Violations()) > 0 || armed(e, cq.CQN())
		}, 5*time.Second, 100*time.Microsecond, "round %d: the CQ was never armed", round)
		require.Empty(t, e.f.Violations(), "round %d", round)
		q.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
		e.run()
		require.NoError(t, <-done, "round %d", round)
		// One event per round, read by this Wait, or by the next one
		// when the NOP's CQE landed between the arm and the Wait's poll
		// after it (which then returns at once, its event unread).
		require.GreaterOrEqual(t, n.Events(), uint64(round), "round %d: an event was lost", round)
		require.LessOrEqual(t, n.Events(), uint64(round+1), "round %d: more events than rounds", round)
		got := poll.Poll(8, func(c *monocq.CQE) {
			require.Equal(t, prm.CQEReq, c.Opcode())
		})
		require.Equal(t, 1, got, "round %d", round)
	}
	require.GreaterOrEqual(t, n.Events(), uint64(rounds-1))
	require.Empty(t, e.f.Violations())
}

// armed reports whether the model holds an arm for the CQ.
func armed(e *env, cqn uint32) bool {
	e.f.mu.Lock()
	defer e.f.mu.Unlock()
	c := e.f.cqs[cqn]
	return c != nil && c.armed
}

// eventSendCQ makes a CQ of e with a completion channel, its poller, and
// an RC QP that completes its sends there, connected to a QP of e's
// second PD.
func eventSendCQ(t *testing.T, e *env) (*ctx.CompletionQueue, *monocq.CQ, *testQP) {
	t.Helper()
	cq, err := e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8, EventChannel: true})
	require.NoError(t, err)
	d := provider.CQDescriptor(cq)
	poll, err := monocq.New(monocq.Config{Buf: d.Buf, CQECnt: d.CQECnt, CQESize: d.CQESize, DBRec: d.DBRec, UAR: d.UAR, CQN: d.CQN})
	require.NoError(t, err)
	qp, err := e.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 8}})
	require.NoError(t, err)
	q := &testQP{e: e, qp: qp, d: provider.QPDescriptor(qp), scq: &testCQ{cq: cq, d: d}}
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	e.connectRC(q, b, 7, 1)
	return cq, poll, q
}

// TestStaleArmSequence: arming again after an event without acknowledging
// it to the poller (the arm carries the old sequence number) is reported.
func TestStaleArmSequence(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	cq, poll, q := eventSendCQ(t, e)

	require.NoError(t, poll.Arm(false))
	e.run()
	q.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	e.run()
	ok, err := provider.ReadCQEvent(cq)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = provider.ReadCQEvent(cq)
	require.NoError(t, err)
	require.False(t, ok, "one event, consumed once")
	require.Equal(t, 1, poll.Poll(8, func(*monocq.CQE) {}))
	require.Empty(t, e.f.Violations())

	require.NoError(t, poll.Arm(false)) // AcknowledgeEvent forgotten
	e.run()
	v := e.f.Violations()
	require.Len(t, v, 1)
	require.Equal(t, ViolationCQDoorbell, v[0].Kind)
	require.Contains(t, v[0].Detail, "arm sequence number 0, want 1")

	poll.AcknowledgeEvent()
	require.NoError(t, poll.Arm(false))
	e.run()
	require.Len(t, e.f.Violations(), 1, "the acknowledged arm is right")
}

// TestSolicitedArmFiresOnError: a CQ armed for solicited completions only
// still raises its event for an error completion (IBA: the next solicited
// or unsuccessful completion), while a successful unsolicited one does not.
func TestSolicitedArmFiresOnError(t *testing.T) {
	e := newEnv(t, Options{})
	cq, err := e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8, EventChannel: true})
	require.NoError(t, err)
	d := provider.CQDescriptor(cq)
	qp, err := e.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 8}})
	require.NoError(t, err)
	q := &testQP{e: e, qp: qp, d: provider.QPDescriptor(qp), scq: &testCQ{cq: cq, d: d}}
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	e.connectRC(q, b, 7, 1)

	word := uint32(prm.CQArmSolicited) | q.scq.ci&prm.CQConsumerIndexMask // sequence number 0
	prm.Store32(unsafe.Add(d.DBRec, prm.DoorbellRecordSendB), word)
	prm.Store64(unsafe.Add(d.UAR, prm.CQDoorbellOffset), uint64(word)<<32|uint64(d.CQN))
	e.run()
	require.True(t, armed(e, cq.CQN()))

	q.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	e.run()
	require.Equal(t, prm.CQEReq, q.scq.one(t).op)
	ok, err := provider.ReadCQEvent(cq)
	require.NoError(t, err)
	require.False(t, ok, "an unsolicited success does not fire a solicited-only arm")
	require.True(t, armed(e, cq.CQN()))

	// An SGE with an lkey the HCA does not know: LOCAL_PROT_ERR.
	i := q.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), dataSeg(8, 0x4242, e.addr(0)))
	e.run()
	requireErr(t, q.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalProt, i)
	ok, err = provider.ReadCQEvent(cq)
	require.NoError(t, err)
	require.True(t, ok, "an error completion fires a solicited-only arm")
	require.False(t, armed(e, cq.CQN()))
}

// TestArmBehindReportsOnlyUnreported: an arm whose consumer index is
// behind the producer raises its event at once only for a CQE no event
// has reported. Arming after an event and before polling its CQE (as
// perftest's latency tests with -e do) waits for the next CQE; a CQE
// written while the CQ was not armed raises the event at the arm.
func TestArmBehindReportsOnlyUnreported(t *testing.T) {
	e := newEnv(t, Options{})
	cq, poll, q := eventSendCQ(t, e)
	event := func() bool {
		ok, err := provider.ReadCQEvent(cq)
		require.NoError(t, err)
		if ok {
			poll.AcknowledgeEvent()
		}
		return ok
	}
	nop := func() {
		q.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
		e.run()
	}

	require.NoError(t, poll.Arm(false))
	e.run()
	nop()
	require.True(t, event(), "armed: the CQE raises the event")

	// Armed again before the reported CQE is polled: no event at the arm.
	require.NoError(t, poll.Arm(false))
	e.run()
	require.True(t, armed(e, cq.CQN()), "the arm is held")
	require.False(t, event(), "the CQE that raised the last event raised another")
	require.Equal(t, 1, poll.Poll(8, func(*monocq.CQE) {}))
	nop()
	require.True(t, event(), "the next CQE raises the held arm's event")

	// Not armed: a CQE written now is reported by the next arm at once.
	nop()
	require.False(t, event(), "an event without an arm")
	require.NoError(t, poll.Arm(false)) // consumer index before both
	e.run()
	require.True(t, event(), "a CQE no event reported, behind the arm")
	require.False(t, armed(e, cq.CQN()))
	require.Equal(t, 2, poll.Poll(8, func(*monocq.CQE) {}))

	// Armed with nothing behind it: no event until a CQE.
	require.NoError(t, poll.Arm(false))
	e.run()
	require.False(t, event())
	nop()
	require.True(t, event())
	require.Empty(t, e.f.Violations())
}

// TestZeroFabric: a Fabric not made by New opens no device and refuses the
// device and port events with ctx.ErrInvalidArgument; they panicked.
func TestZeroFabric(t *testing.T) {
	var f Fabric
	require.NotPanics(t, func() {
		_, err := f.Open("")
		require.ErrorIs(t, err, ctx.ErrInvalidArgument)
		require.ErrorIs(t, f.SetPortState("", 1, false), ctx.ErrInvalidArgument)
		require.ErrorIs(t, f.FailDevice(""), ctx.ErrInvalidArgument)
		require.ErrorIs(t, f.RecoverDevice(""), ctx.ErrInvalidArgument)
		require.NoError(t, f.Close())
	})
}
