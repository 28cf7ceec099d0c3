package sim

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// mapped counts the buffers of bufs that are still mapped.
func mapped(bufs []*ctx.Buffer) int {
	n := 0
	for _, b := range bufs {
		if !b.Closed() {
			n++
		}
	}
	return n
}

// TestQueueMemoryOutlivesClose closes a Context under an RC QP (with an
// SRQ) and its Poller: the model forgets the queues at once, but their
// rings, doorbell records, BlueFlame and UAR pages stay mapped while the
// data plane can reach them, and are unmapped once it cannot.
func TestQueueMemoryOutlivesClose(t *testing.T) {
	fab := New(Options{})
	t.Cleanup(func() { require.NoError(t, fab.Close()) })
	c, err := fab.Open("sim0")
	require.NoError(t, err)
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	ccq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 15})
	require.NoError(t, err)
	rsrq, err := transport.NewSharedReceiveQueue(pd, ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	poller, err := transport.NewPoller(ccq)
	require.NoError(t, err)
	q, err := rc.New(pd, ccq, rc.Config{SendDepth: 4, RecvDepth: 4})
	require.NoError(t, err)
	own, err := rc.New(pd, ccq, rc.Config{SendDepth: 4, SRQ: rsrq})
	require.NoError(t, err)

	require.NoError(t, q.Connect(own.Endpoint()))
	require.NoError(t, own.Connect(q.Endpoint()))

	var bufs []*ctx.Buffer
	add := func(bs ...*ctx.Buffer) {
		for _, b := range bs {
			if b != nil {
				bufs = append(bufs, b)
			}
		}
	}
	for _, h := range []any{provider.QueuePairOf(q.Handle()), provider.QueuePairOf(own.Handle()), provider.CompletionQueueOf(ccq), provider.SRQOf(rsrq.Handle())} {
		switch x := h.(type) {
		case *qp:
			add(x.bufs[:]...)
		case *cq:
			add(x.bufs[:]...)
		case *srq:
			add(x.bufs[:]...)
		}
	}
	// Two QPs (send ring, doorbell record, BlueFlame page; one receive
	// ring), the CQ (ring, doorbell record, UAR) and the SRQ (ring,
	// doorbell record).
	require.Len(t, bufs, 4+3+3+2)

	st, err := q.Post(1, wqebuilder.Signaled)
	require.NoError(t, err)
	recv := rsrq.BeginRecv(1)
	require.NoError(t, c.Close())
	require.Empty(t, fab.qps, "the model still runs a closed QP")
	require.Empty(t, fab.cqs, "the model still writes a closed CQ")
	for range 3 {
		runtime.GC()
	}
	require.Equal(t, len(bufs), mapped(bufs), "memory unmapped while a stage can write it")
	require.ErrorIs(t, st.Nop().FinishBlueFlame(), ctx.ErrClosed)
	require.ErrorIs(t, recv.SGE(0x1000, 8, 1).FinishDoorbell(), ctx.ErrClosed)
	require.Zero(t, poller.Poll(4, func(*transport.Completion) {}))
	runtime.KeepAlive(own)

	// Nothing reaches the queues now: the cleanups unmap every buffer.
	q, own, rsrq, poller, ccq, pd, c, st, recv = nil, nil, nil, nil, nil, nil, nil, wqebuilder.OpStage{}, transport.RecvStage{}
	deadline := time.Now().Add(10 * time.Second)
	for mapped(bufs) > 0 && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.Zero(t, mapped(bufs), "buffers still mapped after the last reference went")
}
