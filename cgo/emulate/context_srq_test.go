//go:build cgo && linux

package emulate_test

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestContextRCOnSharedReceiveQueue goes through the kit's own stack as an
// application does, ctx.Open with the hardware provider (the cgo provider
// over rdma-core) on the emulated device: an rc SRQ (ibv_create_srq) shared
// by two RC QPs, each fed by its own sender, 100 messages through the SRQ
// posted and polled by package rc, the SRQ on the model under the number
// rdma-core reported, and gone once the Context is closed.
func TestContextRCOnSharedReceiveQueue(t *testing.T) {
	f := emulate.Fabric()
	require.NotNil(t, f, "the emulation is on")
	maps := emulate.MappingCount()
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			_ = c.Close()
		}
	}()
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	buf, err := ctx.AllocBuffer(1<<14, ctx.BufferOptions{})
	require.NoError(t, err)
	defer buf.Close()
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite)
	require.NoError(t, err)
	base := uint64(mr.Addr())

	srq, err := transport.NewSharedReceiveQueue(pd, ctx.SRQConfig{Depth: 15})
	require.NoError(t, err, "ibv_create_srq through the Context")
	srqn := srq.SRQN()
	info, ok := simadopt.LookupSRQ(f, srqn)
	require.True(t, ok, "the model has SRQN %#x", srqn)
	require.NotNil(t, info.Ring)

	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
	require.NoError(t, err)
	poll, err := transport.NewPoller(cq)
	require.NoError(t, err)
	var senders, receivers [2]*rc.QP
	for i := range 2 {
		senders[i], err = rc.New(pd, cq, rc.Config{SendDepth: 16, MaxInline: 64})
		require.NoError(t, err)
		receivers[i], err = rc.New(pd, cq, rc.Config{SendDepth: 1, SRQ: srq})
		require.NoError(t, err, "an RC QP on the SRQ")
		require.NoError(t, poll.Add(&senders[i].Queue))
		require.NoError(t, poll.Add(&receivers[i].Queue))
		require.NoError(t, senders[i].Connect(receivers[i].Endpoint()))
		require.NoError(t, receivers[i].Connect(senders[i].Endpoint()))
	}

	slot := map[uint64]int{}
	next := uint64(0)
	post := func() {
		for srq.Free() > 0 {
			next++
			slot[next] = int(next % 64)
			require.NoError(t, srq.BeginRecv(next).SGE(base+uint64(128*slot[next]), 128, mr.LKey()).Finish())
		}
		srq.RingRecvDoorbell()
	}
	post()
	for m := range 100 {
		i := m % 2
		msg := fmt.Sprintf("message %d to receiver %d", m, i)
		s, err := senders[i].Post(uint64(m), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte(msg)).Finish())
		senders[i].RingDoorbell()
		var got []transport.Completion
		for deadline := time.Now().Add(10 * time.Second); len(got) < 2 && time.Now().Before(deadline); {
			poll.Poll(4, func(c *transport.Completion) { got = append(got, *c) })
		}
		require.Len(t, got, 2, "message %d: a send and a receive completion", m)
		for _, g := range got {
			require.Equal(t, transport.MatchOK, g.Match, "%v", g.Err())
			if g.QPN == senders[i].QPN() {
				continue
			}
			require.Equal(t, receivers[i].QPN(), g.QPN, "message %d", m)
			require.Equal(t, uint32(len(msg)), g.ByteCount)
			o := slot[g.WRID]
			delete(slot, g.WRID)
			require.Equal(t, msg, string(buf.Bytes()[128*o:128*o+len(msg)]))
		}
		post()
	}
	require.Equal(t, uint64(0), receivers[0].Unmatched()+receivers[1].Unmatched())

	require.NoError(t, c.Close())
	closed = true
	_, ok = simadopt.LookupSRQ(f, srqn)
	require.False(t, ok, "closing the Context destroys the SRQ on the model")
	deadline := time.Now().Add(10 * time.Second)
	for emulate.MappingCount() != maps && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, maps, emulate.MappingCount(), "the device closed once the queue memory was collected")
}
