package reliability

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// cqe builds a 64-byte CQE image: opcode, QPN, wqe_counter, and for an
// error CQE its syndrome.
func cqe(op prm.CQEOpcode, qpn uint32, counter uint16, synd prm.Syndrome) [prm.CQE64Size]byte {
	var b [prm.CQE64Size]byte
	binary.BigEndian.PutUint32(b[prm.CQESopDropQPN:], uint32(prm.OpRdmaWrite)<<prm.CQESendOpShift|qpn)
	binary.BigEndian.PutUint16(b[prm.CQEWQECounter:], counter)
	b[prm.ErrCQESyndrome] = uint8(synd)
	b[prm.CQEOpOwn] = uint8(op) << prm.CQEOpcodeShift
	return b
}

// poll returns every completion p has now, copied.
func poll(p *transport.Poller) []transport.Completion {
	var out []transport.Completion
	for p.Poll(16, func(c *transport.Completion) { out = append(out, *c) }) > 0 {
	}
	return out
}

// TestCompletionAnomalies hands the poller completions a healthy device
// would not write: each is reported (a status, an error that errors.Is
// recognizes, the poller's Err and counters), none is ignored, none
// retires work requests it does not name, and nothing panics.
func TestCompletionAnomalies(t *testing.T) {
	x := newFabric(t, sim.Options{})
	p := newRCPair(t, x, rc.Config{SendDepth: 16, MaxSendSGE: 4})
	q, poller, cqn := p.qp[0], p.p[0], p.cq[0].CQN()
	post := func(wrid uint64, signaled bool, sges int) uint32 {
		pi := q.SendQueue().ProducerIndex()
		flags := wqebuilder.Flags(0)
		if signaled {
			flags = wqebuilder.Signaled
		}
		st, err := q.Post(wrid, flags)
		require.NoError(t, err)
		ds := st.RdmaWrite(p.r[1].addr(0), p.r[1].rkey())
		for i := range sges {
			ds = ds.SGE(p.r[0].addr(i), 1, p.r[0].lkey())
		}
		require.NoError(t, ds.Finish())
		return pi
	}

	t.Run("unknown QPN", func(t *testing.T) {
		require.NoError(t, x.f.InjectCQE(cqn, cqe(prm.CQEReq, 0xabcdef, 0, 0)))
		got := poll(poller)
		require.Len(t, got, 1)
		require.Equal(t, transport.MatchUnknownQPN, got[0].Match)
		require.Nil(t, got[0].Queue)
		require.ErrorIs(t, got[0].Err(), monocq.ErrUnknownQPN)
		require.ErrorIs(t, poller.Err(), monocq.ErrUnknownQPN)
		require.Contains(t, poller.Err().Error(), "0xabcdef")
		require.Equal(t, uint64(1), poller.Counters().UnknownQPN)
	})

	t.Run("counter inside a WQE, duplicate CQE", func(t *testing.T) {
		// Two WQEs of two WQEBBs each (ctrl, raddr, four SGEs): counters 0
		// and 2 start them, 1 and 3 fall inside.
		first := post(1, false, 4)
		second := post(2, true, 4)
		require.Equal(t, first+2, second)
		require.NoError(t, x.f.InjectCQE(cqn, cqe(prm.CQEReq, q.QPN(), uint16(first+1), 0)))
		require.NoError(t, x.f.InjectCQE(cqn, cqe(prm.CQEReq, q.QPN(), uint16(second+1), 0)))
		got := poll(poller)
		require.Len(t, got, 2)
		for _, c := range got {
			require.Equal(t, transport.MatchUnmatched, c.Match)
			require.Zero(t, c.WRID)
			require.ErrorIs(t, c.Err(), transport.ErrUnmatched)
		}
		require.Equal(t, uint32(4), q.SendQueue().Outstanding(), "nothing was retired")
		require.Equal(t, uint64(2), q.Unmatched())
		// The real completion retires both; a copy of it matches nothing.
		q.RingDoorbell()
		require.NoError(t, x.f.RunUntilIdle())
		got = poll(poller)
		require.Len(t, got, 1)
		require.Equal(t, uint64(2), got[0].WRID)
		require.NoError(t, got[0].Err())
		require.Zero(t, q.SendQueue().Outstanding())
		require.NoError(t, x.f.InjectCQE(cqn, cqe(prm.CQEReq, q.QPN(), uint16(second), 0)))
		got = poll(poller)
		require.Len(t, got, 1)
		require.Equal(t, transport.MatchUnmatched, got[0].Match)
	})

	t.Run("unexpected opcode", func(t *testing.T) {
		// A receive completion on a QP without a receive queue, and a
		// RESIZE CQE.
		require.NoError(t, x.f.InjectCQE(cqn, cqe(prm.CQERespSend, q.QPN(), 0, 0)))
		require.NoError(t, x.f.InjectCQE(cqn, cqe(prm.CQEResizeCQ, q.QPN(), 0, 0)))
		got := poll(poller)
		require.Len(t, got, 2)
		require.Equal(t, transport.MatchUnexpected, got[0].Match)
		require.Equal(t, transport.MatchUnexpected, got[1].Match)
		require.Error(t, got[1].Err())
		require.Equal(t, transport.StateReady, q.State())
	})

	t.Run("unknown syndrome", func(t *testing.T) {
		pi := post(3, true, 1)
		require.NoError(t, x.f.InjectCQE(cqn, cqe(prm.CQEReqErr, q.QPN(), uint16(pi), 0x99)))
		got := poll(poller)
		require.Len(t, got, 1)
		c := got[0]
		require.Equal(t, transport.MatchError, c.Match)
		require.Equal(t, uint64(3), c.WRID, "it names a WQE in flight: that WQE is retired, with the error")
		err := c.Err()
		require.ErrorIs(t, err, monocq.ErrUnknownSyndrome)
		require.ErrorIs(t, err, monocq.ErrCompletion)
		require.Contains(t, err.Error(), "0x99")
		require.Equal(t, transport.StateError, q.State(), "an error completion fails the QP")
		_, err = q.Post(4, wqebuilder.Signaled)
		require.ErrorIs(t, err, transport.ErrQPError)
	})

	require.Empty(t, x.f.Violations())
}

// TestCQOverrun lets completions pile up in a CQ nobody polls. The
// software HCA never overwrites a CQE software has not released: the CQ
// moves to error (an EventCQError async event, and CQError says why), the
// QPs that complete into it follow (EventQPFatal), and the poller reports
// ErrOverrun from the full ring it finds. No panic, nothing overwritten.
func TestCQOverrun(t *testing.T) {
	x := newFabric(t, sim.Options{})
	p := newRCPair(t, x, rc.Config{SendDepth: 64})
	small, err := x.c[0].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 3})
	require.NoError(t, err)
	poller, err := transport.NewPoller(small)
	require.NoError(t, err)
	poller.EnableCounters()
	q, err := rc.New(x.pd[0], small, rc.Config{SendDepth: 64})
	require.NoError(t, err)
	require.NoError(t, poller.Add(q))
	peer, err := rc.New(x.pd[1], p.cq[1], rc.Config{SendDepth: 4})
	require.NoError(t, err)
	require.NoError(t, q.Connect(peer.Endpoint()))
	require.NoError(t, peer.Connect(q.Endpoint()))
	n := int(provider.CQDescriptor(small).CQECnt) + 3
	for i := range n {
		st, err := q.Post(uint64(i), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, st.RdmaWrite(p.r[1].addr(8*i), p.r[1].rkey()).Inline([]byte("overrun!")).Finish())
	}
	q.RingDoorbell()
	require.NoError(t, x.f.RunUntilIdle())
	require.ErrorContains(t, x.f.CQError(small.CQN()), "overrun")
	require.Equal(t, uint64(1), x.f.Stats().CQOverruns)
	var events []ctx.AsyncEventType
	for {
		ev, ok, err := provider.ReadAsyncEvent(x.c[0])
		require.NoError(t, err)
		if !ok {
			break
		}
		events = append(events, ev.Type)
	}
	require.Contains(t, events, ctx.EventCQError)
	require.Contains(t, events, ctx.EventQPFatal)
	st, err := q.Handle().State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateError, st)

	got := poll(poller)
	require.Len(t, got, int(provider.CQDescriptor(small).CQECnt), "the ring holds what it held, nothing overwritten")
	for i, c := range got {
		require.Equal(t, uint64(i), c.WRID)
		require.NoError(t, c.Err())
	}
	require.True(t, errors.Is(poller.Err(), monocq.ErrOverrun), "poller error %v", poller.Err())
}
