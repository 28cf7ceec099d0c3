package transport_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestSharedBlueFlameRegister limits the software HCA to one dedicated
// BlueFlame register per device: the first QP gets it, later QPs (RC, DC,
// UD alike) share a doorbell-only register, and every one of them still
// carries data end to end. The model's strict mode fails the test if a
// BlueFlame copy reaches the shared register. A register freed by a
// closed QP goes to the next QP created.
func TestSharedBlueFlameRegister(t *testing.T) {
	e := transporttest.New(t, sim.Options{BlueFlameRegisters: 1})
	cq := [2]*ctx.CompletionQueue{e.CQ(0, 64), e.CQ(1, 64)}
	var polls [2]*transport.Poller
	for i := range 2 {
		var err error
		polls[i], err = transport.NewPoller(cq[i])
		require.NoError(t, err)
	}
	// Two RC pairs: the first holds each device's dedicated register.
	var pairs [2][2]*rc.QP
	for k := range 2 {
		for i := range 2 {
			qp, err := rc.New(e.PD[i], cq[i], rc.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64})
			require.NoError(t, err)
			require.NoError(t, polls[i].Add(qp))
			pairs[k][i] = qp
		}
		require.NoError(t, pairs[k][0].Connect(pairs[k][1].Endpoint()))
		require.NoError(t, pairs[k][1].Connect(pairs[k][0].Endpoint()))
	}
	dedicated, shared := provider.QPDescriptor(pairs[0][0].Handle()), provider.QPDescriptor(pairs[1][0].Handle())
	require.NotZero(t, dedicated.BlueFlameSize, "the first QP has a register of its own")
	require.Zero(t, shared.BlueFlameSize, "the second shares one, doorbell only")
	require.NotNil(t, shared.BlueFlame)

	// A DCI and a UD QP on device 0 share the same register.
	dci, err := dc.NewDCI(e.PD[0], cq[0], dc.DCIConfig{SendDepth: 8, MaxInline: 64})
	require.NoError(t, err)
	require.Zero(t, provider.QPDescriptor(dci.Handle()).BlueFlameSize)
	require.Equal(t, shared.BlueFlame, provider.QPDescriptor(dci.Handle()).BlueFlame)
	udq, err := ud.New(e.PD[0], cq[0], ud.Config{SendDepth: 8, RecvDepth: 8, QKey: 7, MaxInline: 64})
	require.NoError(t, err)
	require.Zero(t, provider.QPDescriptor(udq.Handle()).BlueFlameSize)
	require.Equal(t, shared.BlueFlame, provider.QPDescriptor(udq.Handle()).BlueFlame)
	require.NoError(t, dci.Close())
	require.NoError(t, udq.Close())

	// Both pairs write into device 1's buffer with BlueFlame posts (a
	// doorbell where the register has no BlueFlame buffer), inline and
	// gathered.
	for k := range 2 {
		for n, inline := range []bool{true, false} {
			off := 4096*k + 1024*n
			src := e.Fill(0, 65536+off, 48, uint64(100+k*2+n))
			e.Poison(1, off, len(src))
			s, err := pairs[k][0].Post(uint64(k), wqebuilder.Signaled)
			require.NoError(t, err)
			w := s.RdmaWrite(e.Addr(1, off), e.RKey(1))
			if inline {
				require.NoError(t, w.Inline(src).FinishBlueFlame())
			} else {
				require.NoError(t, w.SGE(e.Addr(0, 65536+off), uint32(len(src)), e.LKey(0)).FinishBlueFlame())
			}
			e.Run()
			c := e.One(polls[0])
			require.Equal(t, transport.MatchOK, c.Match, "pair %d", k)
			e.Expect(1, off, src, fmt.Sprintf("pair %d, inline %v", k, inline))
		}
	}

	// Closing the QP that held device 0's register frees it for the next.
	require.NoError(t, pairs[0][0].Close())
	again, err := rc.New(e.PD[0], cq[0], rc.Config{SendDepth: 8, RecvDepth: 8})
	require.NoError(t, err)
	require.NotZero(t, provider.QPDescriptor(again.Handle()).BlueFlameSize)
	require.NotEqual(t, shared.BlueFlame, provider.QPDescriptor(again.Handle()).BlueFlame)
	require.NoError(t, again.Close())
}

// TestSharedRegisterConcurrentPosts runs ping-pongs on two RC pairs at
// once, every QP on its device's one shared doorbell-only register, each
// side posting from its own goroutine while the engine runs in another:
// the register's 8-byte doorbells do not need a lock.
func TestSharedRegisterConcurrentPosts(t *testing.T) {
	rounds := 4000
	if testing.Short() {
		rounds = 500
	}
	e := transporttest.New(t, sim.Options{Mode: sim.Engine, IdleSleep: 50 * time.Microsecond, BlueFlameRegisters: -1})
	type side struct {
		qp *rc.QP
		p  *transport.Poller
	}
	var pairs [2][2]side
	for k := range 2 {
		for i := range 2 {
			cq := e.CQ(i, 64)
			qp, err := rc.New(e.PD[i], cq, rc.Config{SendDepth: 32, RecvDepth: 8, MaxInline: 32})
			require.NoError(t, err)
			require.Zero(t, provider.QPDescriptor(qp.Handle()).BlueFlameSize)
			p, err := transport.NewPoller(cq)
			require.NoError(t, err)
			require.NoError(t, p.Add(qp))
			pairs[k][i] = side{qp, p}
		}
		require.NoError(t, pairs[k][0].qp.Connect(pairs[k][1].qp.Endpoint()))
		require.NoError(t, pairs[k][1].qp.Connect(pairs[k][0].qp.Endpoint()))
	}
	var peers [2][2]*peer
	for k := range 2 {
		for i := range 2 {
			s := pairs[k][i]
			base := 8192 * k
			recv := func(wrid uint64) error {
				return s.qp.PostRecv(wrid, e.Addr(i, base+64*int(wrid)), 64, e.LKey(i))
			}
			for w := range 4 {
				require.NoError(t, recv(uint64(w)))
			}
			peers[k][i] = &peer{
				send: func(round uint64) error {
					st, err := s.qp.Post(round, wqebuilder.Signaled)
					if err != nil {
						return err
					}
					return st.Send().Inline(msg(round)).FinishBlueFlame()
				},
				poll: func(fn func(*transport.Completion)) int { return s.p.Poll(16, fn) },
				recv: recv,
				mem:  e.Mem(i, base, 4096),
			}
		}
	}
	// The pairs' ping-pongs run at once (each side in its own goroutine).
	t.Run("pairs", func(t *testing.T) {
		for k := range 2 {
			t.Run(fmt.Sprint(k), func(t *testing.T) {
				t.Parallel()
				pingPong(t, rounds, peers[k][0], peers[k][1])
			})
		}
	})
}
