package reliability

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// rcPair is two connected RC queue pairs on the two HCAs of x, with one CQ
// and one poller each, and an arena each.
type rcPair struct {
	x  *fabric
	qp [2]*rc.QP
	cq [2]*ctx.CompletionQueue
	p  [2]*transport.Poller
	ar [2]*arena
	r  [2]*region
}

func newRCPair(t testing.TB, x *fabric, cfg rc.Config) *rcPair {
	t.Helper()
	p := &rcPair{x: x}
	for i := range 2 {
		var err error
		p.cq[i], err = x.c[i].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 255})
		require.NoError(t, err)
		p.p[i], err = transport.NewPoller(p.cq[i])
		require.NoError(t, err)
		p.p[i].EnableCounters()
		p.qp[i], err = rc.New(x.pd[i], p.cq[i], cfg)
		require.NoError(t, err)
		require.NoError(t, p.p[i].Add(p.qp[i]))
		p.ar[i] = newArena(t, x.pd[i], 64<<10)
		ar := p.ar[i]
		t.Cleanup(func() { require.NoError(t, ar.buf.Close()) })
		p.r[i] = p.ar[i].region(t, "memory", 16<<10, allAccess, uint64(i+1))
	}
	require.NoError(t, p.qp[0].Connect(p.qp[1].Endpoint()))
	require.NoError(t, p.qp[1].Connect(p.qp[0].Endpoint()))
	return p
}

// drain polls both CQs until empty and returns the completions, copied.
func (p *rcPair) drain(t testing.TB) []transport.Completion {
	t.Helper()
	require.NoError(t, p.x.f.RunUntilIdle())
	var out []transport.Completion
	for i := range 2 {
		for p.p[i].Poll(64, func(c *transport.Completion) { out = append(out, *c) }) > 0 {
		}
	}
	return out
}

// TestStrictBlueFlameMixedPosts posts, between two looks of the software
// HCA, a BlueFlame copy and then a doorbell-only write to the same BlueFlame
// buffer (a signaled NOP is published with the 8-byte doorbell). The
// buffer then holds the NOP's first 8 bytes over the earlier WQE's: that is
// what a device sees too, and strict mode must not call it a violation.
func TestStrictBlueFlameMixedPosts(t *testing.T) {
	x := newFabric(t, sim.Options{})
	p := newRCPair(t, x, rc.Config{SendDepth: 16, MaxInline: 64})
	src := make([]byte, 48)
	for i := range src {
		src[i] = byte(i + 1)
	}
	for i := range 2 {
		st, err := p.qp[0].Post(uint64(i), 0)
		require.NoError(t, err)
		require.NoError(t, st.RdmaWrite(p.r[1].addr(64*i), p.r[1].rkey()).Inline(src).FinishBlueFlame())
	}
	st, err := p.qp[0].Post(2, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, st.Nop().FinishBlueFlame())
	got := p.drain(t)
	require.Len(t, got, 1)
	require.NoError(t, got[0].Err())
	require.Empty(t, x.f.Violations())
	require.Equal(t, src, p.r[1].mem[64:64+48])
}
