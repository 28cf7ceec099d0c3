package rc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestPostAndPollAllocateNothing measures allocations of the hot path
// alone: posting (send and receive) and polling; the model runs between the
// measurements.
func TestPostAndPollAllocateNothing(t *testing.T) {
	const runs = 200
	x := newPair(t, rc.Config{SendDepth: 1024, RecvDepth: 1024, MaxInline: 64, MaxSendSGE: 2})
	e := x.e
	payload := []byte("0123456789abcdef")
	wrid := uint64(0)
	allocs := testing.AllocsPerRun(runs, func() {
		wrid++
		s, err := x.qp[0].Post(wrid, wqebuilder.Signaled)
		if err != nil {
			panic(err)
		}
		if err := s.RdmaWriteImm(e.Addr(1, 0), e.RKey(1), uint32(wrid)).Inline(payload).Finish(); err != nil {
			panic(err)
		}
		s, _ = x.qp[0].Post(wrid, 0)
		if err := s.Send().SGE(e.Addr(0, 0), 8, e.LKey(0)).SGE(e.Addr(0, 64), 8, e.LKey(0)).FinishBlueFlame(); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs, "post")
	allocs = testing.AllocsPerRun(runs, func() {
		if err := x.qp[1].BeginRecv(1).SGE(e.Addr(1, 4096), 64, e.LKey(1)).Finish(); err != nil {
			panic(err)
		}
		if err := x.qp[1].PostRecv(2, e.Addr(1, 8192), 64, e.LKey(1)); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs, "post receive")
	x.qp[1].RingRecvDoorbell()
	e.Run()

	var sum uint64
	polled := 0
	for _, p := range x.p {
		allocs = testing.AllocsPerRun(runs, func() {
			polled += p.Poll(2, func(c *transport.Completion) {
				if c.Match == transport.MatchOK {
					sum += c.WRID
				}
			})
		})
		require.Zero(t, allocs, "poll")
	}
	require.Equal(t, 3*(runs+1), polled, "every completion (one per write, two receives per run) was polled in the measured runs")
	require.NotZero(t, sum)
}
