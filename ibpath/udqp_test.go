package ibpath_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/ibpath"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// udEnd is a ud.QP with its Poller, its path and an address cache.
type udEnd struct {
	n    *node
	qp   *ud.QP
	poll *transport.Poller
	p    ibpath.Path
	ahs  *ibpath.AddressCache
	gids []ctx.GIDEntry
}

func newUDEnd(t *testing.T, n *node) *udEnd {
	t.Helper()
	qp, err := ud.New(n.pd, n.cq, ud.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64, QKey: testQKey})
	require.NoError(t, err)
	poll, err := transport.NewPoller(n.cq)
	require.NoError(t, err)
	require.NoError(t, poll.Add(qp))
	p, err := ibpath.Local(n.dev, ibpath.Default(), 1, ctx.GIDSelector{})
	require.NoError(t, err)
	p.SQPN, p.QKey = qp.QPN(), testQKey
	gids, err := n.dev.QueryGIDs(1)
	require.NoError(t, err)
	ahs := ibpath.NewAddressCache(n.pd)
	t.Cleanup(func() { require.NoError(t, ahs.Close()) })
	return &udEnd{n: n, qp: qp, poll: poll, p: p, ahs: ahs, gids: gids}
}

// send posts msg (from offset off of the end's buffer, inline) to the
// destination of path to through the cache's ud.Remote.
func (e *udEnd) send(t *testing.T, to ibpath.Path, wrid uint64, msg string) {
	t.Helper()
	r, err := e.ahs.Remote(e.qp, to)
	require.NoError(t, err)
	st, err := e.qp.Post(wrid, wqebuilder.Signaled, r)
	require.NoError(t, err)
	require.NoError(t, st.Send().Inline([]byte(msg)).FinishBlueFlame())
}

// receive returns a copy of the one receive completion on the end's CQ
// (send completions must be successful).
func (e *udEnd) receive(t *testing.T) transport.Completion {
	t.Helper()
	var got []transport.Completion
	e.poll.Poll(64, func(c *transport.Completion) {
		require.NoError(t, c.Err())
		if !c.IsSend() {
			got = append(got, *c)
		}
	})
	require.Len(t, got, 1, "one receive completion")
	return got[0]
}

// testUDQPRoundTrip: a datagram sent through ud.QP.Post with the address
// cache's Remote arrives, and the path ibpath.Reply builds from the
// transport.Poller's Completion carries the answer back through the other cache.
func testUDQPRoundTrip(t *testing.T, link ctx.LinkLayer) {
	f := newFabric(t, link)
	a, b := newUDEnd(t, newNode(t, f, "sim0")), newUDEnd(t, newNode(t, f, "sim1"))
	to, err := a.p.Connect(b.qp.Endpoint())
	require.NoError(t, err)
	to.QKey = testQKey

	r1, err := a.ahs.Remote(a.qp, to)
	require.NoError(t, err)
	r2, err := a.ahs.Remote(a.qp, to)
	require.NoError(t, err)
	require.Same(t, r1, r2, "one Remote per destination")
	require.Equal(t, b.qp.QPN(), r1.QPN())
	require.Equal(t, uint32(testQKey), r1.QKey())
	require.Zero(t, testing.AllocsPerRun(100, func() {
		if _, err := a.ahs.Remote(a.qp, to); err != nil {
			panic(err)
		}
	}), "a cached Remote allocates nothing")

	require.NoError(t, b.qp.PostRecv(1, b.n.addr(0), 1024, b.n.mr.LKey()))
	require.NoError(t, a.qp.PostRecv(1, a.n.addr(4096), 1024, a.n.mr.LKey()))
	const msg = "ping through ud.QP"
	a.send(t, to, 1, msg)
	require.NoError(t, f.RunUntilIdle())
	a.poll.Poll(8, func(c *transport.Completion) { require.NoError(t, c.Err()) })
	in := b.receive(t)
	require.Equal(t, a.qp.QPN(), in.SourceQPN)
	require.Equal(t, msg, string(b.n.buf.Bytes()[ud.GRHSize:ud.GRHSize+len(msg)]))

	reply, err := ibpath.Reply(&in, b.n.buf.Bytes()[:ud.GRHSize], b.p, b.gids)
	require.NoError(t, err)
	require.Equal(t, a.qp.QPN(), reply.DQPN)
	require.Equal(t, b.qp.QPN(), reply.SQPN)
	require.Equal(t, in.GRH, reply.GlobalRoute)
	if reply.GlobalRoute {
		require.Equal(t, a.p.SGID, reply.DGID, "the reply goes to the sender's GID")
	}
	req, err := ibpath.FromCompletion(&in, b.n.buf.Bytes()[:ud.GRHSize], b.p)
	require.NoError(t, err)
	require.Equal(t, a.qp.QPN(), req.SQPN)

	const answer = "pong"
	b.send(t, reply, 2, answer)
	require.NoError(t, f.RunUntilIdle())
	b.poll.Poll(8, func(c *transport.Completion) { require.NoError(t, c.Err()) })
	back := a.receive(t)
	require.Equal(t, b.qp.QPN(), back.SourceQPN)
	require.Equal(t, answer, string(a.n.buf.Bytes()[4096+ud.GRHSize:4096+ud.GRHSize+len(answer)]))

	// A Remote of the cache belongs to it: closing the Remote leaves the
	// cached address handle open, Evict closes it.
	ah, err := a.ahs.AddressHandle(to)
	require.NoError(t, err)
	require.NoError(t, r1.Close())
	require.False(t, ah.Closed())
	require.NoError(t, a.ahs.Evict(to))
	require.True(t, ah.Closed())
	r3, err := a.ahs.Remote(a.qp, to)
	require.NoError(t, err)
	require.NotSame(t, r1, r3, "a new Remote after the eviction")
}

func TestUDQPRoundTripInfiniBand(t *testing.T) { testUDQPRoundTrip(t, ctx.LinkLayerInfiniBand) }
func TestUDQPRoundTripRoCE(t *testing.T)       { testUDQPRoundTrip(t, ctx.LinkLayerEthernet) }

// TestAddressCacheRemoteRefusals: a nil QP, a QP of another protection
// domain and a bad path are refused, and nothing is cached.
func TestAddressCacheRemoteRefusals(t *testing.T) {
	f := newFabric(t, ctx.LinkLayerInfiniBand)
	a, b := newUDEnd(t, newNode(t, f, "sim0")), newUDEnd(t, newNode(t, f, "sim1"))
	to, err := a.p.Connect(b.qp.Endpoint())
	require.NoError(t, err)
	_, err = a.ahs.Remote(nil, to)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = a.ahs.Remote(b.qp, to)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "another protection domain")
	bad := to
	bad.SL = 16
	_, err = a.ahs.Remote(a.qp, bad)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Zero(t, a.ahs.Len())
}

// TestReplyFromNilCompletion: a nil completion of either kind is refused.
func TestReplyFromNilCompletion(t *testing.T) {
	_, err := ibpath.Reply((*transport.Completion)(nil), nil, ibpath.Default(), nil)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}
