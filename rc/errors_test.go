package rc_test

import (
	"fmt"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// byWRID indexes completions by work request id and fails on a duplicate.
func byWRID(t *testing.T, cs []transport.Completion) map[uint64]transport.Completion {
	t.Helper()
	m := map[uint64]transport.Completion{}
	for _, c := range cs {
		_, dup := m[c.WRID]
		require.False(t, dup, "work request %d completed twice: %+v", c.WRID, cs)
		m[c.WRID] = c
	}
	return m
}

func requireSyndrome(t *testing.T, c transport.Completion, op prm.CQEOpcode, s prm.Syndrome) {
	t.Helper()
	require.Equal(t, transport.MatchError, c.Match, "%+v", c)
	require.Equal(t, op, c.Opcode, "%+v", c)
	require.Equal(t, s, c.Syndrome, "syndrome %v", c.Syndrome)
	err := c.Err()
	require.Error(t, err)
	require.ErrorIs(t, err, monocq.ErrCompletion)
	var ce *monocq.CompletionError
	require.ErrorAs(t, err, &ce)
	require.Contains(t, err.Error(), s.String())
	// The sentinel of the status matches too.
	want := monocq.StatusOf(s).Sentinel()
	require.ErrorIs(t, err, want)
	require.ErrorIs(t, err, monocq.ErrCompletion)
	for _, other := range []error{monocq.ErrRemoteAccess, monocq.ErrFlushed, monocq.ErrLocalProtection} {
		if other != want {
			require.NotErrorIs(t, err, other)
		}
	}
	var cerr *monocq.CompletionError
	require.ErrorAs(t, err, &cerr)
	require.Equal(t, s, cerr.Syndrome)
	require.Equal(t, c.WRID, cerr.WRID)
	require.True(t, cerr.HasWRID)
	require.Equal(t, c.QPN, cerr.QPN)
	require.Equal(t, op == prm.CQEReqErr, cerr.Requester())
	// One wording for a failed work request, whichever way it is reported.
	require.Equal(t, cerr.Error(), err.Error())
	require.True(t, strings.HasPrefix(err.Error(), "monocq: "), err.Error())
}

// errorThenFlush posts bad (a failing WQE) between good unsignaled and
// signaled WQEs and checks: the WQEs before it complete normally (the
// unsignaled ones silently), bad completes with syndrome want, every WQE
// after it is flushed exactly once, the QP refuses further posts, and the
// peer's receive queue is flushed too when the responder failed.
func errorThenFlush(t *testing.T, x *pair, want prm.Syndrome, recvs int, bad func(s wqebuilder.OpStage) error) {
	t.Helper()
	e := x.e
	for i := range recvs {
		require.NoError(t, x.qp[1].PostRecv(uint64(100+i), e.Addr(1, 4096*i), 4096, e.LKey(1)))
	}
	post := func(wrid uint64, flags wqebuilder.Flags) {
		s, err := x.qp[0].Post(wrid, flags)
		require.NoError(t, err)
		require.NoError(t, s.RdmaWrite(e.Addr(1, dstOff), e.RKey(1)).Inline([]byte("ok")).Finish())
	}
	post(1, 0)
	post(2, wqebuilder.Signaled)
	post(3, 0)
	s, err := x.qp[0].Post(4, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, bad(s))
	for w := uint64(5); w < 12; w++ {
		flags := wqebuilder.Flags(0)
		if w%2 == 0 {
			flags = wqebuilder.Signaled
		}
		post(w, flags)
	}
	x.qp[0].RingDoorbell()
	got := byWRID(t, e.Drain(x.p[0]))
	require.Equal(t, transport.MatchOK, got[2].Match, "before the error: %+v", got[2])
	require.NotContains(t, got, uint64(1))
	require.NotContains(t, got, uint64(3), "retired by the failed WQE's completion, unsignaled")
	requireSyndrome(t, got[4], prm.CQEReqErr, want)
	for w := uint64(5); w < 12; w++ {
		requireSyndrome(t, got[w], prm.CQEReqErr, prm.SyndromeWRFlush)
		c := got[w]
		require.True(t, c.IsFlush())
	}
	require.Len(t, got, 9)
	require.Equal(t, transport.StateError, x.qp[0].State())
	require.Zero(t, x.qp[0].SendQueue().Outstanding(), "every WQE retired")
	_, err = x.qp[0].Post(99, wqebuilder.Signaled)
	require.ErrorIs(t, err, transport.ErrQPError)
	require.Equal(t, 0, len(e.Drain(x.p[0])), "nothing completes twice")
}

func TestRemoteAccessErrors(t *testing.T) {
	ro := func(e *transporttest.Env) *ctx.MemoryRegion {
		mr, err := e.PD[1].RegisterMemory(e.Mem(1, 3<<20, 4096), ctx.AccessLocalWrite|ctx.AccessRemoteRead)
		require.NoError(t, err)
		return mr
	}
	for _, c := range []struct {
		name string
		bad  func(e *transporttest.Env, s wqebuilder.OpStage) error
	}{
		{"wrong rkey", func(e *transporttest.Env, s wqebuilder.OpStage) error {
			return s.RdmaWrite(e.Addr(1, 0), e.RKey(1)^0x5500).Inline([]byte{1}).Finish()
		}},
		{"write past the region", func(e *transporttest.Env, s wqebuilder.OpStage) error {
			return s.RdmaWrite(e.Addr(1, transporttest.BufSize-1), e.RKey(1)).Inline([]byte{1, 2}).Finish()
		}},
		{"write to a read-only region", func(e *transporttest.Env, s wqebuilder.OpStage) error {
			m := ro(e)
			return s.RdmaWrite(uint64(m.Addr()), m.RKey()).Inline([]byte{1}).Finish()
		}},
		{"atomic on a read-only region", func(e *transporttest.Env, s wqebuilder.OpStage) error {
			m := ro(e)
			return s.AtomicFA(uint64(m.Addr()), m.RKey(), 1).Result(e.Addr(0, 0), e.LKey(0)).Finish()
		}},
		{"read with the requester's own rkey", func(e *transporttest.Env, s wqebuilder.OpStage) error {
			return s.RdmaRead(e.Addr(0, 0), e.RKey(0)).SGE(e.Addr(0, 64), 8, e.LKey(0)).Finish()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := newPair(t, rc.Config{SendDepth: 32, RecvDepth: 8, MaxInline: 64})
			before := append([]byte(nil), x.e.Mem(1, 3<<20, 4096)...)
			errorThenFlush(t, x, prm.SyndromeRemoteAccess, 3, func(s wqebuilder.OpStage) error { return c.bad(x.e, s) })
			require.Equal(t, before, x.e.Mem(1, 3<<20, 4096), "the target region is unchanged")
			// The responder went to error too: its receives flush, each once.
			rcv := byWRID(t, x.e.Drain(x.p[1]))
			require.Len(t, rcv, 3)
			for w := uint64(100); w < 103; w++ {
				requireSyndrome(t, rcv[w], prm.CQERespErr, prm.SyndromeWRFlush)
			}
			require.Equal(t, transport.StateError, x.qp[1].State())
		})
	}
}

func TestLocalProtectionErrors(t *testing.T) {
	for _, c := range []struct {
		name string
		bad  func(e *transporttest.Env, s wqebuilder.OpStage) error
	}{
		{"wrong lkey", func(e *transporttest.Env, s wqebuilder.OpStage) error {
			return s.Send().SGE(e.Addr(0, 0), 16, e.LKey(0)^0x3300).Finish()
		}},
		{"lkey of another PD", func(e *transporttest.Env, s wqebuilder.OpStage) error {
			return s.RdmaWrite(e.Addr(1, 0), e.RKey(1)).SGE(e.Addr(1, 0), 16, e.LKey(1)).Finish()
		}},
		{"SGE past the region", func(e *transporttest.Env, s wqebuilder.OpStage) error {
			return s.RdmaWrite(e.Addr(1, 0), e.RKey(1)).SGE(e.Addr(0, transporttest.BufSize-8), 16, e.LKey(0)).Finish()
		}},
		{"read into a region without local write", func(e *transporttest.Env, s wqebuilder.OpStage) error {
			m, err := e.PD[0].RegisterMemory(e.Mem(0, 3<<20, 4096), ctx.AccessRemoteRead)
			if err != nil {
				return err
			}
			return s.RdmaRead(e.Addr(1, 0), e.RKey(1)).SGE(uint64(m.Addr()), 8, m.LKey()).Finish()
		}},
		{"atomic result with a wrong lkey", func(e *transporttest.Env, s wqebuilder.OpStage) error {
			return s.AtomicCS(e.Addr(1, 0), e.RKey(1), 0, 1).Result(e.Addr(0, 0), 0x12345600).Finish()
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := newPair(t, rc.Config{SendDepth: 32, RecvDepth: 8, MaxInline: 64})
			errorThenFlush(t, x, prm.SyndromeLocalProt, 3, func(s wqebuilder.OpStage) error { return c.bad(x.e, s) })
			// Only the requester failed: the responder is fine.
			require.Empty(t, x.e.Drain(x.p[1]))
			require.Equal(t, transport.StateReady, x.qp[1].State())
		})
	}
}

func TestLengthAndRemoteErrors(t *testing.T) {
	t.Run("receive buffer too small", func(t *testing.T) {
		x := newPair(t, rc.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64})
		e := x.e
		require.NoError(t, x.qp[1].PostRecv(1, e.Addr(1, 0), 8, e.LKey(1)))
		require.NoError(t, x.qp[1].PostRecv(2, e.Addr(1, 64), 64, e.LKey(1)))
		s, err := x.qp[0].Post(10, wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline(make([]byte, 9)).FinishBlueFlame())
		requireSyndrome(t, e.One(x.p[0]), prm.CQEReqErr, prm.SyndromeRemoteInvalReq)
		rcv := byWRID(t, e.Drain(x.p[1]))
		requireSyndrome(t, rcv[1], prm.CQERespErr, prm.SyndromeLocalLength)
		requireSyndrome(t, rcv[2], prm.CQERespErr, prm.SyndromeWRFlush)
		require.Equal(t, transport.StateError, x.qp[1].State())
		_, err = x.qp[1].Post(1, 0)
		require.ErrorIs(t, err, transport.ErrQPError)
		require.ErrorIs(t, x.qp[1].PostRecv(3, 0, 0, 0), transport.ErrQPError)
	})
	t.Run("receive buffer with a bad lkey", func(t *testing.T) {
		x := newPair(t, rc.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64})
		e := x.e
		require.NoError(t, x.qp[1].PostRecv(1, e.Addr(1, 0), 64, 0x4242))
		s, err := x.qp[0].Post(10, wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte("x")).FinishBlueFlame())
		requireSyndrome(t, e.One(x.p[0]), prm.CQEReqErr, prm.SyndromeRemoteOp)
		requireSyndrome(t, e.One(x.p[1]), prm.CQERespErr, prm.SyndromeLocalProt)
	})
	t.Run("misaligned atomic", func(t *testing.T) {
		x := newPair(t, rc.Config{SendDepth: 32, RecvDepth: 8, MaxInline: 64})
		errorThenFlush(t, x, prm.SyndromeRemoteInvalReq, 3, func(s wqebuilder.OpStage) error {
			return s.AtomicFA(x.e.Addr(1, 4), x.e.RKey(1), 1).Result(x.e.Addr(0, 0), x.e.LKey(0)).Finish()
		})
	})
}

func TestRNRRetryExceeded(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 32, RecvDepth: 8, MaxInline: 64, RNRRetry: 3, MinRNRTimer: 1})
	errorThenFlush(t, x, prm.SyndromeRNRRetryExc, 0, func(s wqebuilder.OpStage) error {
		return s.Send().Inline([]byte("no receive posted")).Finish()
	})
	require.Equal(t, uint64(3), x.e.Fabric.Stats().RNRNaks)
	require.Equal(t, transport.StateReady, x.qp[1].State(), "RNR does not hurt the responder")
}

func TestRNRRetryExceededDirect(t *testing.T) {
	for _, retries := range []int{-1, 2} {
		x := newPair(t, rc.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64, RNRRetry: retries, MinRNRTimer: 1})
		s, err := x.qp[0].Post(5, wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte("hello")).FinishBlueFlame())
		requireSyndrome(t, x.e.One(x.p[0]), prm.CQEReqErr, prm.SyndromeRNRRetryExc)
		st := x.e.Fabric.Stats()
		require.Equal(t, uint64(max(retries, 0)), st.RNRNaks)
	}
	// With retries left, a receive posted in time lets the SEND through.
	x := newPair(t, rc.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64, RNRRetry: 7, MinRNRTimer: 1})
	s, err := x.qp[0].Post(5, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.Send().Inline([]byte("hello")).FinishBlueFlame())
	for range 3 {
		_, err := x.e.Fabric.Step()
		require.NoError(t, err)
	}
	require.NoError(t, x.qp[1].PostRecv(1, x.e.Addr(1, 0), 64, x.e.LKey(1)))
	require.Equal(t, transport.MatchOK, x.e.One(x.p[0]).Match)
	require.Equal(t, "hello", string(x.e.Mem(1, 0, 5)))
}

func TestTransportRetryExceeded(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 32, RecvDepth: 8, MaxInline: 64, Timeout: 1, RetryCount: 2})
	require.NoError(t, x.qp[1].Close())
	errorThenFlushNoPeer(t, x, prm.SyndromeTransportRetryExc)
}

// errorThenFlushNoPeer is errorThenFlush for a peer that is gone: the first
// WQE fails, the rest flush.
func errorThenFlushNoPeer(t *testing.T, x *pair, want prm.Syndrome) {
	t.Helper()
	e := x.e
	for w := uint64(1); w <= 6; w++ {
		flags := wqebuilder.Signaled
		if w == 3 {
			flags = 0
		}
		s, err := x.qp[0].Post(w, flags)
		require.NoError(t, err)
		require.NoError(t, s.RdmaWrite(e.Addr(1, 0), e.RKey(1)).Inline([]byte("x")).Finish())
	}
	x.qp[0].RingDoorbell()
	got := byWRID(t, e.Drain(x.p[0]))
	requireSyndrome(t, got[1], prm.CQEReqErr, want)
	for w := uint64(2); w <= 6; w++ {
		requireSyndrome(t, got[w], prm.CQEReqErr, prm.SyndromeWRFlush)
	}
	require.Len(t, got, 6, "unsignaled WQEs are flushed with a completion too, as rdma-core reports them")
}

func TestFailFlushesEverythingOnce(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 64, RecvDepth: 16, MaxInline: 64})
	e := x.e
	for i := range 10 {
		require.NoError(t, x.qp[0].PostRecv(uint64(1000+i), e.Addr(0, 64*i), 64, e.LKey(0)))
	}
	// The peer has no receives: SENDs wait on RNR, and Fail flushes them.
	for w := uint64(1); w <= 20; w++ {
		flags := wqebuilder.Flags(0)
		if w%3 != 0 {
			flags = wqebuilder.Signaled
		}
		s, err := x.qp[0].Post(w, flags)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte("x")).Finish())
	}
	x.qp[0].RingDoorbell()
	_, err := e.Fabric.Step()
	require.NoError(t, err)
	require.NoError(t, x.qp[0].Fail())
	got := byWRID(t, e.Drain(x.p[0]))
	require.Len(t, got, 30, "20 sends and 10 receives, each once")
	for w, c := range got {
		require.True(t, c.IsFlush(), "wrid %d: %+v", w, c)
	}
	_, err = x.qp[0].Post(1, 0)
	require.ErrorIs(t, err, transport.ErrQPError)

	// A QP the device fails on its own (an injected fatal error).
	y := newPair(t, rc.Config{SendDepth: 8, RecvDepth: 4, MaxInline: 64})
	require.NoError(t, y.qp[1].PostRecv(7, y.e.Addr(1, 0), 64, y.e.LKey(1)))
	require.NoError(t, y.e.Fabric.FailQP(y.qp[1].QPN()))
	c := y.e.One(y.p[1])
	requireSyndrome(t, c, prm.CQERespErr, prm.SyndromeWRFlush)
	require.Equal(t, uint64(7), c.WRID)
	require.Equal(t, transport.StateError, y.qp[1].State())
}

func TestMisuse(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq, p := newPoller(e, 0, 64)
	cq1, p1 := newPoller(e, 1, 64)
	qp, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4, RecvDepth: 2, MaxInline: 32})
	require.NoError(t, err)
	require.NoError(t, p.Add(qp))
	require.ErrorIs(t, p.Add(qp), monocq.ErrDuplicateQPN)

	// Not connected: refused, the stage is harmless, nothing moved.
	pi := qp.SendQueue().ProducerIndex()
	s, err := qp.Post(1, wqebuilder.Signaled)
	require.ErrorIs(t, err, transport.ErrNotConnected)
	var pe *wqebuilder.PostError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, qp.QPN(), pe.QPN)
	require.Contains(t, err.Error(), "not connected")
	require.Error(t, s.RdmaWrite(e.Addr(1, 0), e.RKey(1)).Inline([]byte("x")).Finish())
	require.Error(t, s.MaskedCS64(e.Addr(1, 0), e.RKey(1), 1, 2, 3, 4).Result(e.Addr(0, 0), e.LKey(0)).FinishBlueFlame())
	require.Equal(t, pi, qp.SendQueue().ProducerIndex())
	qp.RingDoorbell()
	// Receives may be posted before Connect, within their limits.
	st := qp.BeginRecv(4)
	for k := range qp.Limits().MaxRecvSGE + 1 {
		st = st.SGE(e.Addr(0, 64*int(k)), 8, e.LKey(0))
	}
	require.ErrorIs(t, st.FinishDoorbell(), wqebuilder.ErrTooManySGE)
	require.Zero(t, qp.RecvOutstanding())
	n := int(qp.Limits().RecvWQEs)
	require.GreaterOrEqual(t, n, 2)
	for k := range n {
		require.NoError(t, qp.PostRecv(uint64(k), e.Addr(0, 64*k), 64, e.LKey(0)))
	}
	require.Equal(t, uint32(n), qp.RecvOutstanding())
	require.ErrorIs(t, qp.PostRecv(3, e.Addr(0, 128), 64, e.LKey(0)), transport.ErrReceiveQueueFull)

	// Connect: wrong transport, bad endpoint, then right.
	peer, err := rc.New(e.PD[1], cq1, rc.Config{SendDepth: 4, RecvDepth: 4})
	require.NoError(t, err)
	require.NoError(t, p1.Add(peer))
	ep := peer.Endpoint()
	ud := ep
	ud.Transport = 2
	require.ErrorIs(t, qp.Connect(ud), transport.ErrTransport)
	bad := ep
	bad.QPN = 1 << 25
	require.Error(t, qp.Connect(bad))
	require.NoError(t, qp.Connect(ep))
	require.NoError(t, peer.Connect(qp.Endpoint()))
	require.ErrorIs(t, qp.Connect(ep), transport.ErrTransport, "already connected")
	require.Equal(t, ep, qp.Remote())

	// Limits: too much inline, too many SGEs, a full send queue.
	lim := qp.Limits()
	s, err = qp.Post(1, wqebuilder.Signaled)
	require.NoError(t, err)
	require.ErrorIs(t, s.Send().Inline(make([]byte, lim.MaxInline+1)).Finish(), wqebuilder.ErrInlineTooLong)
	s, err = qp.Post(1, wqebuilder.Signaled)
	require.NoError(t, err)
	ds := s.Send()
	for k := range lim.MaxSendSGE + 1 {
		ds = ds.SGE(e.Addr(0, 64*int(k)), 8, e.LKey(0))
	}
	require.ErrorIs(t, ds.Finish(), wqebuilder.ErrTooManySGE)
	posted := 0
	for {
		s, err := qp.Post(uint64(posted), 0)
		require.NoError(t, err)
		err = s.RdmaWrite(e.Addr(1, 0), e.RKey(1)).Inline([]byte("x")).Finish()
		if err != nil {
			require.ErrorIs(t, err, wqebuilder.ErrQueueFull)
			break
		}
		posted++
		require.Less(t, posted, 10000)
	}
	require.Positive(t, posted)
	// One signaled NOP... cannot be posted either; run the unsignaled
	// writes (they complete silently), then the queue is still full of
	// them until a signaled WQE retires them: post after a completion.
	qp.RingDoorbell()
	e.Run()
	require.Empty(t, e.Drain(p))

	// Close: posts and receives refused, double Close fine.
	require.NoError(t, qp.Close())
	require.NoError(t, qp.Close())
	_, err = qp.Post(1, 0)
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.ErrorIs(t, qp.PostRecv(1, 0, 0, 0), ctx.ErrClosed)
	require.Equal(t, transport.StateClosed, qp.State())
	require.ErrorIs(t, qp.Connect(ep), ctx.ErrClosed)

	// Closing the Context closes the QP under it: no crash, clear errors.
	require.NoError(t, e.Ctx[1].Close())
	_, err = peer.Post(1, wqebuilder.Signaled)
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.ErrorIs(t, peer.PostRecv(1, 0, 0, 0), ctx.ErrClosed)
	peer.RingDoorbell()
	peer.RingRecvDoorbell()
	require.Zero(t, p1.Poll(16, func(*transport.Completion) { t.Fatal("completion from a closed CQ") }))
	require.ErrorIs(t, p1.Err(), ctx.ErrClosed)
}

func TestConfigRefused(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 16)
	dev, err := e.Ctx[0].Query()
	require.NoError(t, err)
	srq, err := transport.NewSharedReceiveQueue(e.PD[0], ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		pd   *ctx.ProtectionDomain
		cq   *ctx.CompletionQueue
		cfg  rc.Config
		want string
	}{
		{"nil PD", nil, cq, rc.Config{SendDepth: 1}, "nil protection domain"},
		{"nil CQ", e.PD[0], nil, rc.Config{SendDepth: 1}, "nil send completion queue"},
		{"send depth 0", e.PD[0], cq, rc.Config{}, "send depth 0"},
		// The device's limits are checked before anything is created (the
		// provider would refuse them in words of its own).
		// The send queue's limits are those of the RC type.
		{"send depth too large", e.PD[0], cq, rc.Config{SendDepth: dev.SendLimitsRC.MaxDepth + 1}, fmt.Sprintf("send depth %d above the RC limit of %d", dev.SendLimitsRC.MaxDepth+1, dev.SendLimitsRC.MaxDepth)},
		{"receive depth too large", e.PD[0], cq, rc.Config{SendDepth: 1, RecvDepth: dev.MaxQPWR + 1}, fmt.Sprintf("receive depth %d above the device's", dev.MaxQPWR+1)},
		{"too many SGEs", e.PD[0], cq, rc.Config{SendDepth: 1, MaxSendSGE: dev.SendLimitsRC.MaxSGE + 1}, fmt.Sprintf("max send SGE %d above the RC limit of %d", dev.SendLimitsRC.MaxSGE+1, dev.SendLimitsRC.MaxSGE)},
		{"too many receive SGEs", e.PD[0], cq, rc.Config{SendDepth: 1, RecvDepth: 1, MaxRecvSGE: dev.MaxSGE + 1}, fmt.Sprintf("max receive SGE %d above the device's", dev.MaxSGE+1)},
		{"inline too large", e.PD[0], cq, rc.Config{SendDepth: 1, MaxInline: dev.SendLimitsRC.MaxInline + 1}, fmt.Sprintf("max inline %d above the RC limit of %d", dev.SendLimitsRC.MaxInline+1, dev.SendLimitsRC.MaxInline)},
		{"receive depth with SRQ", e.PD[0], cq, rc.Config{SendDepth: 1, RecvDepth: 1, SRQ: srq}, "with an SRQ"},
		{"PSN too wide", e.PD[0], cq, rc.Config{SendDepth: 1, PSN: 1 << 24}, "PSN"},
		{"retry count too large", e.PD[0], cq, rc.Config{SendDepth: 1, RetryCount: 8}, "retry count"},
		{"too many reads", e.PD[0], cq, rc.Config{SendDepth: 1, MaxRdAtomic: int(dev.MaxQPInitRdAtomic) + 1}, "reads/atomics"},
		{"bad access", e.PD[0], cq, rc.Config{SendDepth: 1, RemoteAccess: 1 << 9}, "remote access"},
		{"port without a GID at the index", e.PD[0], cq, rc.Config{SendDepth: 1, Port: 2}, "port"},
	} {
		qp, err := rc.New(c.pd, c.cq, c.cfg)
		require.Error(t, err, c.name)
		require.Nil(t, qp)
		require.Contains(t, err.Error(), c.want, c.name)
		require.Contains(t, err.Error(), "rc: new QP", c.name)
	}
	qp, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 1, SRQ: srq})
	require.NoError(t, err)
	require.ErrorIs(t, qp.PostRecv(1, 0, 0, 0), transport.ErrNoReceiveQueue)
	require.NoError(t, srq.Close())
	_, err = rc.New(e.PD[0], cq, rc.Config{SendDepth: 1, SRQ: srq})
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.Equal(t, transport.StateClosed, qp.State(), "closing the SRQ closed the QP attached to it")
}

// TestResetAndReconnect recovers a pair after an error: both sides Reset,
// post receives again and Connect; traffic flows, and the Pollers still
// route their completions.
func TestResetAndReconnect(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 16, RecvDepth: 8, MaxInline: 64})
	e := x.e
	require.NoError(t, x.qp[1].PostRecv(1, e.Addr(1, 0), 64, e.LKey(1)))
	s, err := x.qp[0].Post(1, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.RdmaWrite(e.Addr(1, 0), 0xdead00).Inline([]byte("x")).FinishBlueFlame())
	requireSyndrome(t, e.One(x.p[0]), prm.CQEReqErr, prm.SyndromeRemoteAccess)
	requireSyndrome(t, e.One(x.p[1]), prm.CQERespErr, prm.SyndromeWRFlush)
	for round := range 3 {
		for i := range 2 {
			require.NoError(t, x.qp[i].Reset())
			require.Equal(t, transport.StateInit, x.qp[i].State())
			// RESET zeroed the doorbell record: both producer indices
			// start again at 0, and so must the queue's builder.
			db := provider.QPDescriptor(x.qp[i].Handle()).DBRec
			require.Zero(t, prm.Load32(db), "receive doorbell record after RESET")
			require.Zero(t, prm.Load32(unsafe.Add(db, prm.DoorbellRecordSendB)), "send doorbell record after RESET")
			_, err := x.qp[i].Post(1, 0)
			require.ErrorIs(t, err, transport.ErrNotConnected)
		}
		require.NoError(t, x.qp[1].PostRecv(7, e.Addr(1, 128), 64, e.LKey(1)))
		require.NoError(t, x.qp[0].Connect(x.qp[1].Endpoint()))
		require.NoError(t, x.qp[1].Connect(x.qp[0].Endpoint()))
		for k := range 20 {
			s, err := x.qp[0].Post(uint64(k), wqebuilder.Signaled)
			require.NoError(t, err)
			require.NoError(t, s.RdmaWrite(e.Addr(1, 0), e.RKey(1)).Inline([]byte(fmt.Sprintf("round %d/%02d", round, k))).FinishBlueFlame())
			c := e.One(x.p[0])
			require.Equal(t, transport.MatchOK, c.Match, "%v", c.Err())
			require.Equal(t, uint64(k), c.WRID)
			// One WQEBB each, from index 0 after every reset (the round
			// before went up to 20).
			require.Equal(t, uint16(k), c.WQECounter, "round %d", round)
		}
		require.Equal(t, fmt.Sprintf("round %d/19", round), string(e.Mem(1, 0, 10)))
		s, err := x.qp[0].Post(99, wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte("hi")).FinishBlueFlame())
		require.Equal(t, transport.MatchOK, e.One(x.p[0]).Match)
		c := e.One(x.p[1])
		require.Equal(t, uint64(7), c.WRID)
		require.Equal(t, "hi", string(e.Mem(1, 128, 2)))
	}
	require.NoError(t, x.qp[0].Close())
	require.ErrorIs(t, x.qp[0].Reset(), ctx.ErrClosed)
}

// TestPostOnZeroQP: Post on a QP not made by New is refused with a
// *wqebuilder.PostError wrapping ctx.ErrInvalidArgument, and the stage it
// returns fails at Finish the same way.
func TestPostOnZeroQP(t *testing.T) {
	var q rc.QP
	require.NotPanics(t, func() {
		s, err := q.Post(1, wqebuilder.Signaled)
		var pe *wqebuilder.PostError
		require.ErrorAs(t, err, &pe)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument)
		require.ErrorIs(t, s.Send().Inline([]byte("x")).FinishBlueFlame(), ctx.ErrInvalidArgument)
	})
}
