package rc_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestSharedReceiveQueue has two RC QPs receive through one SRQ, each on
// its own CQ, polled in random order so that the SRQ's slots come back out
// of order, many times round its free list.
func TestSharedReceiveQueue(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	srq, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 7, MaxSGE: 2})
	require.NoError(t, err)
	require.GreaterOrEqual(t, srq.MaxSGE(), uint32(2), "the provider may grant more")
	var senders, receivers [2]*rc.QP
	var sp, rp [2]*transport.Poller
	for i := range 2 {
		var scq, rcq *ctx.CompletionQueue
		scq, sp[i] = newPoller(e, 0, 64)
		rcq, rp[i] = newPoller(e, 1, 64)
		senders[i], err = rc.New(e.PD[0], scq, rc.Config{SendDepth: 16, MaxInline: 64})
		require.NoError(t, err)
		receivers[i], err = rc.New(e.PD[1], rcq, rc.Config{SendDepth: 1, SRQ: srq})
		require.NoError(t, err)
		require.NoError(t, sp[i].Add(senders[i]))
		require.NoError(t, rp[i].Add(receivers[i]))
		require.NoError(t, senders[i].Connect(receivers[i].Endpoint()))
		require.NoError(t, receivers[i].Connect(senders[i].Endpoint()))
	}
	r := rand.New(rand.NewPCG(7, 8))
	slotOf := map[uint64]int{} // wrid → buffer slot
	next := uint64(0)
	post := func() {
		for srq.Free() > 0 {
			next++
			slot := int(next % 64)
			slotOf[next] = slot
			require.NoError(t, srq.BeginRecv(next).SGE(e.Addr(1, 128*slot), 40, e.LKey(1)).SGE(e.Addr(1, 128*slot+64), 24, e.LKey(1)).Finish())
		}
		srq.RingRecvDoorbell()
	}
	post()
	received := 0
	for round := range 300 {
		// Up to three messages, each to a random receiver.
		var msgs []string
		var to []int
		for k := range 1 + r.IntN(3) {
			i := r.IntN(2)
			msg := fmt.Sprintf("%-64s", fmt.Sprintf("round %d message %d to %d", round, k, i))[:30+r.IntN(20)]
			s, err := senders[i].Post(uint64(round), wqebuilder.Signaled)
			require.NoError(t, err)
			require.NoError(t, s.Send().Inline([]byte(msg)).FinishBlueFlame())
			msgs, to = append(msgs, msg), append(to, i)
		}
		e.Run()
		for _, p := range sp {
			for p.Poll(8, func(c *transport.Completion) { require.Equal(t, transport.MatchOK, c.Match, "%v", c.Err()) }) > 0 {
			}
		}
		// Poll the receivers in random order: the SRQ slots return out of
		// the order they were taken.
		got := map[int][]transport.Completion{}
		order := r.Perm(2)
		for _, i := range order {
			rp[i].Poll(8, func(c *transport.Completion) { got[i] = append(got[i], *c) })
		}
		for k, msg := range msgs {
			i := to[k]
			require.NotEmpty(t, got[i], "round %d", round)
			c := got[i][0]
			got[i] = got[i][1:]
			require.Equal(t, transport.MatchOK, c.Match, "%v", c.Err())
			require.Equal(t, receivers[i].QPN(), c.QPN)
			require.Equal(t, uint32(len(msg)), c.ByteCount)
			slot := slotOf[c.WRID]
			delete(slotOf, c.WRID)
			b := append(append([]byte(nil), e.Mem(1, 128*slot, 40)...), e.Mem(1, 128*slot+64, 24)...)
			require.Equal(t, msg, string(b[:len(msg)]), "round %d", round)
			received++
		}
		post()
	}
	require.Equal(t, len(slotOf), int(srq.Outstanding()), "every WQE not received is still posted")
	require.Greater(t, received, 100)
	require.GreaterOrEqual(t, next, uint64(received))
	require.Equal(t, uint64(0), receivers[0].Unmatched()+receivers[1].Unmatched())
}

// TestScatterToCQE checks that a payload the device puts in the CQE ends
// up in the receive buffer, with 64- and 128-byte CQEs.
func TestScatterToCQE(t *testing.T) {
	for _, size := range []uint32{64, 128} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			e := transporttest.New(t, sim.Options{})
			var qp [2]*rc.QP
			var p [2]*transport.Poller
			for i := range 2 {
				cq, err := e.Ctx[i].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64, CQESize: size})
				require.NoError(t, err)
				p[i], err = transport.NewPoller(cq)
				require.NoError(t, err)
				qp[i], err = rc.New(e.PD[i], cq, rc.Config{SendDepth: 16, RecvDepth: 16, MaxRecvSGE: 2, MaxInline: 128, ScatterToCQE: true})
				require.NoError(t, err)
				require.NoError(t, p[i].Add(qp[i]))
			}
			require.NoError(t, qp[0].Connect(qp[1].Endpoint()))
			require.NoError(t, qp[1].Connect(qp[0].Endpoint()))
			limit := int(size / 2)
			for _, n := range []int{1, 7, 16, 31, 32, 33, 63, 64, 65, 100} {
				data := e.Fill(0, 0, n, uint64(n))
				e.Poison(1, 1000, 10)
				e.Poison(1, 2000, n)
				// Two buffers: the first 10 bytes, then the rest.
				require.NoError(t, qp[1].BeginRecv(uint64(n)).SGE(e.Addr(1, 1000), 10, e.LKey(1)).SGE(e.Addr(1, 2000), 200, e.LKey(1)).FinishDoorbell())
				s, err := qp[0].Post(1, wqebuilder.Signaled)
				require.NoError(t, err)
				require.NoError(t, s.SendImm(uint32(n)).Inline(data).FinishBlueFlame())
				require.Equal(t, transport.MatchOK, e.One(p[0]).Match)
				c := e.One(p[1])
				require.Equal(t, transport.MatchOK, c.Match)
				require.Equal(t, uint64(n), c.WRID)
				require.Equal(t, prm.CQERespSendImm, c.Opcode)
				require.Equal(t, uint32(n), c.ByteCount)
				e.Expect(1, 1000, data[:min(n, 10)], fmt.Sprintf("%d bytes (in the CQE: %v), first buffer", n, n <= limit))
				if n > 10 {
					e.Expect(1, 2000, data[10:], fmt.Sprintf("%d bytes, second buffer", n))
				}
			}
		})
	}
}

// TestResetKeepsSharedReceiveQueue resets a pair whose receiver takes its
// receives from an SRQ: after the reconnect, receives still complete from
// the SRQ, and a receive on the QP itself is still refused.
func TestResetKeepsSharedReceiveQueue(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	srq, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 8})
	require.NoError(t, err)
	scq, sp := newPoller(e, 0, 64)
	rcq, rp := newPoller(e, 1, 64)
	a, err := rc.New(e.PD[0], scq, rc.Config{SendDepth: 8, MaxInline: 64})
	require.NoError(t, err)
	b, err := rc.New(e.PD[1], rcq, rc.Config{SendDepth: 1, SRQ: srq})
	require.NoError(t, err)
	require.NoError(t, sp.Add(a))
	require.NoError(t, rp.Add(b))
	for round := range 3 {
		if round > 0 {
			require.NoError(t, a.Reset())
			require.NoError(t, b.Reset())
			require.Same(t, srq, b.SRQ(), "round %d", round)
		}
		require.NoError(t, a.Connect(b.Endpoint()))
		require.NoError(t, b.Connect(a.Endpoint()))
		wrid := uint64(100 + round)
		require.NoError(t, srq.PostRecv(wrid, e.Addr(1, 64*round), 64, e.LKey(1)))
		s, err := a.Post(uint64(round), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte("through the SRQ")).FinishBlueFlame())
		require.Equal(t, transport.MatchOK, e.One(sp).Match, "round %d", round)
		c := e.One(rp)
		require.Equal(t, transport.MatchOK, c.Match, "round %d: %v", round, c.Err())
		require.Equal(t, wrid, c.WRID, "round %d", round)
		require.Equal(t, "through the SRQ", string(e.Mem(1, 64*round, 15)))
		require.Zero(t, srq.Outstanding(), "round %d", round)
		require.ErrorIs(t, b.PostRecv(1, e.Addr(1, 0), 64, e.LKey(1)), transport.ErrNoReceiveQueue, "round %d", round)
	}
}
