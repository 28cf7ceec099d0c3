package transport_test

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// peer is one side of a ping-pong in its own goroutine: send posts a
// message of 8 bytes (the round number) to the other side, wait returns
// the next received round.
type peer struct {
	send func(round uint64) error
	poll func(fn func(*transport.Completion)) int
	recv func(wrid uint64) error // re-post the receive of buffer wrid
	mem  []byte                  // the receive buffers, 64 bytes each
	skip int                     // bytes in front of the payload (UD GRH)
}

// pingPong runs rounds round trips between a and b, each side in its own
// goroutine, on an engine-mode software HCA.
func pingPong(t *testing.T, rounds int, a, b *peer) {
	var wg sync.WaitGroup
	var errs [2]error
	run := func(p *peer, starts bool) error {
		deadline := time.Now().Add(60 * time.Second)
		// The messages count up across both sides: the initiator sends 1,
		// the responder answers 2, and so on.
		next := uint64(1)
		if starts {
			if err := p.send(1); err != nil {
				return err
			}
			next = 2
		}
		for got := 0; got < rounds; {
			var recvd []uint64
			var bad error
			n := p.poll(func(c *transport.Completion) {
				switch {
				case c.Match != transport.MatchOK:
					bad = c.Err()
				case !c.IsSend():
					recvd = append(recvd, c.WRID)
				}
			})
			if bad != nil {
				return bad
			}
			if n == 0 {
				// Two spinning pollers would keep the engine goroutine
				// off a 2-core machine until the scheduler preempts them.
				runtime.Gosched()
			}
			for _, wrid := range recvd {
				if v := binary.BigEndian.Uint64(p.mem[64*wrid+uint64(p.skip):]); v != next {
					return fmt.Errorf("round %d: got %d", next, v)
				}
				if err := p.recv(wrid); err != nil {
					return err
				}
				got++
				if !starts || got < rounds {
					if err := p.send(next + 1); err != nil {
						return err
					}
				}
				next += 2
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("timed out after %d rounds", got)
			}
		}
		return nil
	}
	wg.Add(2)
	go func() { defer wg.Done(); errs[0] = run(a, true) }()
	go func() { defer wg.Done(); errs[1] = run(b, false) }()
	wg.Wait()
	require.NoError(t, errs[0], "initiator")
	require.NoError(t, errs[1], "responder")
}

func engineEnv(t *testing.T) *transporttest.Env {
	return transporttest.New(t, sim.Options{Mode: sim.Engine, IdleSleep: 50 * time.Microsecond})
}

func msg(round uint64) []byte { return binary.BigEndian.AppendUint64(nil, round) }

// TestEngineConcurrency runs ping-pongs over RC, DC and UD with each side
// in its own goroutine and the software HCA's engine in a third, under the
// race detector: a queue pair, its poller and its receive queue belong to
// one goroutine, and nothing is shared behind the caller's back.
func TestEngineConcurrency(t *testing.T) {
	rounds := 20000
	if testing.Short() {
		rounds = 2000
	}
	t.Run("RC", func(t *testing.T) {
		e := engineEnv(t)
		var qps [2]*rc.QP
		var ps [2]*transport.Poller
		for i := range 2 {
			cq := e.CQ(i, 64)
			var err error
			qps[i], err = rc.New(e.PD[i], cq, rc.Config{SendDepth: 32, RecvDepth: 8, MaxInline: 32})
			require.NoError(t, err)
			ps[i], err = transport.NewPoller(cq)
			require.NoError(t, err)
			require.NoError(t, ps[i].Add(qps[i]))
		}
		require.NoError(t, qps[0].Connect(qps[1].Endpoint()))
		require.NoError(t, qps[1].Connect(qps[0].Endpoint()))
		var peers [2]*peer
		for i := range 2 {
			qp, p := qps[i], ps[i]
			recv := func(wrid uint64) error { return qp.PostRecv(wrid, e.Addr(i, 64*int(wrid)), 64, e.LKey(i)) }
			for w := range 4 {
				require.NoError(t, recv(uint64(w)))
			}
			flip := false
			peers[i] = &peer{
				send: func(round uint64) error {
					// Alternate SEND and SEND with immediate.
					flip = !flip
					s, err := qp.Post(round, wqebuilder.Signaled)
					if err != nil {
						return err
					}
					if flip {
						return s.Send().Inline(msg(round)).FinishBlueFlame()
					}
					return s.SendImm(uint32(round)).Inline(msg(round)).FinishBlueFlame()
				},
				poll: func(fn func(*transport.Completion)) int { return p.Poll(16, fn) },
				recv: recv,
				mem:  e.Mem(i, 0, 4096),
			}
		}
		pingPong(t, rounds, peers[0], peers[1])
	})
	t.Run("DC", func(t *testing.T) {
		e := engineEnv(t)
		var dcis [2]*dc.DCI
		var dcts [2]*dc.DCT
		var srqs [2]*transport.SharedReceiveQueue
		var ps [2]*transport.Poller
		for i := range 2 {
			cq := e.CQ(i, 64)
			var err error
			ps[i], err = transport.NewPoller(cq)
			require.NoError(t, err)
			srqs[i], err = transport.NewSharedReceiveQueue(e.PD[i], ctx.SRQConfig{Depth: 8})
			require.NoError(t, err)
			dcis[i], err = dc.NewDCI(e.PD[i], cq, dc.DCIConfig{SendDepth: 32, MaxInline: 32})
			require.NoError(t, err)
			dcts[i], err = dc.NewDCT(e.PD[i], cq, dc.DCTConfig{SRQ: srqs[i], Key: 99})
			require.NoError(t, err)
			require.NoError(t, ps[i].Add(dcis[i]))
			require.NoError(t, ps[i].Add(dcts[i]))
		}
		var peers [2]*peer
		for i := range 2 {
			remote, err := dcis[i].NewRemote(dcts[1-i].Endpoint())
			require.NoError(t, err)
			dci, srq, p := dcis[i], srqs[i], ps[i]
			recv := func(wrid uint64) error { return srq.PostRecv(wrid, e.Addr(i, 64*int(wrid)), 64, e.LKey(i)) }
			for w := range 4 {
				require.NoError(t, recv(uint64(w)))
			}
			peers[i] = &peer{
				send: func(round uint64) error {
					s, err := dci.Post(round, wqebuilder.Signaled, remote)
					if err != nil {
						return err
					}
					return s.Send().Inline(msg(round)).FinishBlueFlame()
				},
				poll: func(fn func(*transport.Completion)) int { return p.Poll(16, fn) },
				recv: recv,
				mem:  e.Mem(i, 0, 4096),
			}
		}
		pingPong(t, rounds, peers[0], peers[1])
	})
	t.Run("UD", func(t *testing.T) {
		e := engineEnv(t)
		var qps [2]*ud.QP
		var ps [2]*transport.Poller
		for i := range 2 {
			cq := e.CQ(i, 64)
			var err error
			qps[i], err = ud.New(e.PD[i], cq, ud.Config{SendDepth: 32, RecvDepth: 8, MaxInline: 32, QKey: 5})
			require.NoError(t, err)
			ps[i], err = transport.NewPoller(cq)
			require.NoError(t, err)
			require.NoError(t, ps[i].Add(qps[i]))
		}
		var peers [2]*peer
		for i := range 2 {
			remote, err := qps[i].NewRemote(qps[1-i].Endpoint())
			require.NoError(t, err)
			qp, p := qps[i], ps[i]
			recv := func(wrid uint64) error { return qp.PostRecv(wrid, e.Addr(i, 64*int(wrid)), 64, e.LKey(i)) }
			for w := range 4 {
				require.NoError(t, recv(uint64(w)))
			}
			peers[i] = &peer{
				send: func(round uint64) error {
					s, err := qp.Post(round, wqebuilder.Signaled, remote)
					if err != nil {
						return err
					}
					return s.Send().Inline(msg(round)).FinishBlueFlame()
				},
				poll: func(fn func(*transport.Completion)) int { return p.Poll(16, fn) },
				recv: recv,
				mem:  e.Mem(i, 0, 4096),
				skip: ud.GRHSize,
			}
		}
		pingPong(t, rounds, peers[0], peers[1])
	})
}
