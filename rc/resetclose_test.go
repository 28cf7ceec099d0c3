package rc_test

import (
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestCloseWhileReset: Close (and a close through Handle) may run on any
// goroutine while the owner resets the queue pair: Reset then fails with
// ctx.ErrClosed or leaves the QP to be closed, and, under the race
// detector, nothing the owner's Reset writes is read by the close. Reset
// rebuilt the whole Queue, writing the words Close reads: a data race.
func TestCloseWhileReset(t *testing.T) {
	e := transporttest.New(t, sim.Options{Mode: sim.Engine})
	cq := e.CQ(0, 64)
	for i := range 50 {
		q, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4, RecvDepth: 4})
		require.NoError(t, err)
		require.NoError(t, q.Connect(q.Endpoint()))
		start := make(chan struct{})
		var wg sync.WaitGroup
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			if i%2 == 0 {
				require.NoError(t, q.Close())
			} else {
				require.NoError(t, q.Handle().Close())
			}
		}()
		close(start)
		for range 4 {
			if err := q.Reset(); err != nil {
				require.True(t, errors.Is(err, ctx.ErrClosed), "%v", err)
				break
			}
		}
		wg.Wait()
		require.NoError(t, q.Close())
	}
}
