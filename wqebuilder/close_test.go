package wqebuilder_test

import (
	"bytes"
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestCloseRefusesOpenAndLaterStages closes a queue with a stage open: that
// stage, and one begun after Close, fail at Finish with ErrClosed (which is
// ctx.ErrClosed), and neither the doorbell record nor the register is
// written, by Finish, FinishBlueFlame or RingDoorbell, nor a WQE finished
// before Close published.
func TestCloseRefusesOpenAndLaterStages(t *testing.T) {
	f := newFixture(t, defaultOpts())
	q := f.q
	require.NoError(t, q.Begin(1, wqebuilder.Signaled).Nop().Finish(), "a WQE left unrung")
	open := q.Begin(2, wqebuilder.Signaled).RdmaWrite(0x1000, 7)
	require.False(t, q.Closed())
	q.Close()
	q.Close()
	require.True(t, q.Closed())
	bf := bytes.Clone(f.bf)
	db := f.dbrecSend()
	pi := q.ProducerIndex()

	err := open.SGE(0x2000, 64, 3).Inline([]byte("late")).FinishBlueFlame()
	require.ErrorIs(t, err, ctx.ErrClosed)
	var pe *wqebuilder.PostError
	require.True(t, errors.As(err, &pe))
	require.Equal(t, fmt.Sprintf("wqebuilder: post RDMA_WRITE on QP %#x: %v", testQPN, ctx.ErrClosed), err.Error())

	err = q.Begin(3, 0).Send().Inline([]byte("later")).Finish()
	require.ErrorIs(t, err, ctx.ErrClosed)
	q.RingDoorbell()
	require.Equal(t, pi, q.ProducerIndex())
	require.Equal(t, db, f.dbrecSend(), "the doorbell record moved after Close")
	require.Equal(t, bf, f.bf, "the register was written after Close")
	require.Zero(t, testing.AllocsPerRun(100, func() {
		_ = q.Begin(4, 0).Nop().FinishBlueFlame()
	}), "a refused Finish after Close allocates")
}

// TestCloseFromAnotherGoroutine closes the queue while its owner posts: the
// owner's posts go on until one fails with ErrClosed, and -race sees no
// unsynchronized access between Close and the posts.
func TestCloseFromAnotherGoroutine(t *testing.T) {
	f := newFixture(t, defaultOpts())
	q := f.q
	var wg sync.WaitGroup
	started := make(chan struct{})
	var err error
	wg.Go(func() {
		for i := uint64(0); ; i++ {
			if i == 10 {
				close(started)
			}
			if q.Free() < q.Config().MaxWQEBBs {
				// Retire everything: the test has no device.
				for q.Outstanding() > 0 {
					_, ok := q.Complete(uint16(q.ProducerIndex() - 1))
					require.True(t, ok)
				}
			}
			if err = q.Begin(i, wqebuilder.Signaled).Send().Inline([]byte("x")).FinishBlueFlame(); err != nil {
				return
			}
		}
	})
	<-started
	q.Close()
	wg.Wait()
	require.ErrorIs(t, err, ctx.ErrClosed)
}
