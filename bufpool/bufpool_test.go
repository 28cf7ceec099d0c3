package bufpool_test

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/bufpool"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

func newPD(t *testing.T, f *sim.Fabric, dev string) *ctx.ProtectionDomain {
	t.Helper()
	c, err := f.Open(dev)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	return pd
}

func TestPopPush(t *testing.T) {
	f := sim.New(sim.Options{})
	defer f.Close()
	pd := newPD(t, f, "")
	p, err := bufpool.New(pd, 5, 100, 0)
	require.NoError(t, err)
	defer p.Close()
	require.Equal(t, 5, p.Count())
	require.Equal(t, 100, p.Size())
	require.Equal(t, 5, p.Free())
	require.True(t, p.MemoryRegion().Access()&ctx.AccessLocalWrite != 0)

	var got []int
	for {
		i, ok := p.Pop()
		if !ok {
			break
		}
		got = append(got, i)
	}
	require.Equal(t, []int{0, 1, 2, 3, 4}, got)
	require.Zero(t, p.Free())

	// Buffers do not overlap and lie in the region.
	base := uint64(p.MemoryRegion().Addr())
	for _, i := range got {
		require.True(t, p.InUse(i))
		require.Equal(t, base+uint64(i*100), p.Addr(i))
		require.Len(t, p.Buffer(i), 100)
		idx, err := p.IndexOf(p.Addr(i) + 99)
		require.NoError(t, err)
		require.Equal(t, i, idx)
		p.Buffer(i)[0] = byte(i + 1)
	}
	for _, i := range got {
		require.Equal(t, byte(i+1), p.Buffer(i)[0])
	}
	addr, n, lkey := p.SGE(3, 40)
	require.Equal(t, p.Addr(3), addr)
	require.Equal(t, uint32(40), n)
	require.Equal(t, p.MemoryRegion().LKey(), lkey)
	_, n, _ = p.SGE(3, 1000)
	require.Equal(t, uint32(100), n, "capped at the buffer size")
	require.Equal(t, 100, copy(p.Buffer(2), make([]byte, 500)))
	// An index past the pool panics, like a slice index: no memory past
	// the last buffer (the rest of its page) is handed out, and an index
	// whose offset wraps names no buffer.
	for _, i := range []int{-1, 5, 39, 1 << 58} {
		require.PanicsWithValue(t, "bufpool: buffer index out of range", func() { p.Buffer(i) }, "Buffer(%d)", i)
	}

	require.NoError(t, p.Push(3))
	require.ErrorIs(t, p.Push(3), bufpool.ErrNotInUse, "double push")
	require.ErrorIs(t, p.Push(-1), bufpool.ErrBadIndex)
	require.ErrorIs(t, p.Push(5), bufpool.ErrBadIndex)
	require.ErrorContains(t, p.Push(5), "bufpool: push", "the error names the operation")
	require.Equal(t, 1, p.Free(), "bad pushes change nothing")
	i, ok := p.Pop()
	require.True(t, ok)
	require.Equal(t, 3, i)

	_, err = p.IndexOf(base + 500)
	require.ErrorIs(t, err, bufpool.ErrBadIndex)
	_, err = p.IndexOf(base - 1)
	require.ErrorIs(t, err, bufpool.ErrBadIndex)
	_, err = p.Index(5)
	require.ErrorIs(t, err, bufpool.ErrBadIndex)
	idx, err := p.Index(uint64(4))
	require.NoError(t, err)
	require.Equal(t, 4, idx)
	require.NoError(t, p.Close())
	require.NoError(t, p.Close())
	require.Nil(t, p.Buffer(0), "a closed pool hands out no memory")
	require.NotPanics(t, func() { copy(p.Buffer(1), []byte("x")) })
}

func TestNewRefusesBadSizes(t *testing.T) {
	f := sim.New(sim.Options{})
	defer f.Close()
	pd := newPD(t, f, "")
	for _, c := range [][2]int{{0, 10}, {10, 0}, {-1, 10}, {1 << 30, 1 << 20}} {
		_, err := bufpool.New(pd, c[0], c[1], 0)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%v", c)
	}
	_, err := bufpool.New(nil, 1, 1, 0)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)

	// A buffer is posted as one SGE, whose byte count has 31 bits.
	_, err = bufpool.New(pd, 1, 1<<31, 0)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "buffer size 2147483648 above 2147483647")
	p, err := bufpool.New(pd, 1, wqebuilder.MaxSGELength, 0) // mapped, never touched
	require.NoError(t, err)
	defer p.Close()
	addr, n, _ := p.SGE(0, 1<<31)
	require.Equal(t, p.Addr(0), addr)
	require.Equal(t, uint32(wqebuilder.MaxSGELength), n)
	cq, err := pd.Context().CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4})
	require.NoError(t, err)
	qp, err := rc.New(pd, cq, rc.Config{SendDepth: 1, RecvDepth: 2})
	require.NoError(t, err)
	defer qp.Close()
	posted, err := bufpool.PostReceives(p, &qp.Queue, 1)
	require.NoError(t, err)
	require.Equal(t, 1, posted)
}

func TestPopPushDoNotAllocate(t *testing.T) {
	f := sim.New(sim.Options{})
	defer f.Close()
	p, err := bufpool.New(newPD(t, f, ""), 64, 64, 0)
	require.NoError(t, err)
	defer p.Close()
	allocs := testing.AllocsPerRun(1000, func() {
		i, _ := p.Pop()
		j, _ := p.Pop()
		_ = p.Buffer(i)
		_, _, _ = p.SGE(j, 8)
		_ = p.Push(i)
		_ = p.Push(j)
	})
	require.Zero(t, allocs)
}

// TestUDExchangeThroughPools runs datagrams between two UD queue pairs whose
// sends and receives all use pool buffers, reposting each receive buffer
// after reading it.
func TestUDExchangeThroughPools(t *testing.T) {
	f := sim.New(sim.Options{Strict: true})
	defer f.Close()
	pdA, pdB := newPD(t, f, "sim0"), newPD(t, f, "sim1")
	cqA, err := pdA.Context().CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
	require.NoError(t, err)
	cqB, err := pdB.Context().CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
	require.NoError(t, err)
	a, err := ud.New(pdA, cqA, ud.Config{SendDepth: 16, RecvDepth: 16, QKey: 0x1234})
	require.NoError(t, err)
	b, err := ud.New(pdB, cqB, ud.Config{SendDepth: 16, RecvDepth: 8, QKey: 0x1234})
	require.NoError(t, err)
	pollA, err := transport.NewPoller(cqA)
	require.NoError(t, err)
	require.NoError(t, pollA.Add(a))
	pollB, err := transport.NewPoller(cqB)
	require.NoError(t, err)
	require.NoError(t, pollB.Add(b))

	sendPool, err := bufpool.New(pdA, 8, 256, 0)
	require.NoError(t, err)
	defer sendPool.Close()
	recvPool, err := bufpool.New(pdB, 8, ud.GRHSize+256, 0)
	require.NoError(t, err)
	defer recvPool.Close()

	n, err := bufpool.PostReceives(recvPool, &b.Queue, 8)
	require.NoError(t, err)
	require.Equal(t, 8, n)
	require.Zero(t, recvPool.Free())
	require.Equal(t, uint32(8), b.RecvOutstanding())

	toB, err := a.NewRemote(b.Endpoint())
	require.NoError(t, err)
	defer toB.Close()

	const rounds = 40
	received := map[string]bool{}
	for r := 0; r < rounds; r++ {
		i, ok := sendPool.Pop()
		require.True(t, ok)
		msg := fmt.Sprintf("datagram %02d", r)
		copy(sendPool.Buffer(i), []byte(msg))
		addr, length, lkey := sendPool.SGE(i, len(msg))
		s, err := a.Post(uint64(i), wqebuilder.Signaled, toB)
		require.NoError(t, err)
		require.NoError(t, s.Send().SGE(addr, length, lkey).FinishBlueFlame())
		require.NoError(t, f.RunUntilIdle())

		pollA.Poll(16, func(c *transport.Completion) {
			require.NoError(t, c.Err())
			j, err := sendPool.Index(c.WRID)
			require.NoError(t, err)
			require.NoError(t, sendPool.Push(j))
		})
		pollB.Poll(16, func(c *transport.Completion) {
			require.NoError(t, c.Err())
			j, err := recvPool.Index(c.WRID)
			require.NoError(t, err)
			got := string(recvPool.Buffer(j)[ud.GRHSize:c.ByteCount])
			received[got] = true
			require.NoError(t, bufpool.Repost(recvPool, &b.Queue, j))
		})
	}
	require.Len(t, received, rounds)
	require.Equal(t, 8, sendPool.Free(), "every send buffer came back")
	require.Equal(t, uint32(8), b.RecvOutstanding(), "every receive buffer was posted again")
	require.ErrorIs(t, bufpool.Repost(recvPool, &b.Queue, 0), transport.ErrReceiveQueueFull)
}

func TestPostReceivesStopsWhenFull(t *testing.T) {
	f := sim.New(sim.Options{})
	defer f.Close()
	pd := newPD(t, f, "")
	srq, err := transport.NewSharedReceiveQueue(pd, ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	p, err := bufpool.New(pd, 10, 64, 0)
	require.NoError(t, err)
	defer p.Close()
	n, err := bufpool.PostReceives(p, srq, 10)
	require.ErrorIs(t, err, transport.ErrReceiveQueueFull)
	require.Equal(t, int(srq.Outstanding()), n)
	require.Equal(t, 10-n, p.Free(), "the refused buffer went back to the pool")

	small, err := bufpool.New(pd, 2, 64, 0)
	require.NoError(t, err)
	defer small.Close()
	srq2, err := transport.NewSharedReceiveQueue(pd, ctx.SRQConfig{Depth: 16})
	require.NoError(t, err)
	n, err = bufpool.PostReceives(small, srq2, 3)
	require.ErrorIs(t, err, bufpool.ErrEmpty)
	require.Equal(t, 2, n)
}
