package ibpath_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/ibpath"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

const testQKey = 0x11111111

type udSide struct {
	n    *node
	q    *testQP
	p    ibpath.Path
	ahs  *ibpath.AddressCache
	gids []ctx.GIDEntry
}

// newUDSide makes a UD QP on n whose path leaves from the chosen GID.
func newUDSide(t *testing.T, n *node) *udSide { return newUDSideGID(t, n, ctx.GIDSelector{}) }

// newUDSideGID is newUDSide with the QP's path leaving from the GID gid
// selects.
func newUDSideGID(t *testing.T, n *node, gid ctx.GIDSelector) *udSide {
	q := n.newQP(t, ctx.QPTypeUD)
	p, err := ibpath.Local(n.dev, ibpath.Default(), 1, gid)
	require.NoError(t, err)
	p.SQPN, p.QKey = q.qp.QPN(), testQKey
	require.NoError(t, ibpath.ModifyToConnected(q.qp, p, 0))
	gids, err := n.dev.QueryGIDs(1)
	require.NoError(t, err)
	ahs := ibpath.NewAddressCache(n.pd)
	t.Cleanup(func() { require.NoError(t, ahs.Close()) })
	return &udSide{n: n, q: q, p: p, ahs: ahs, gids: gids}
}

func (s *udSide) endpoint() endpoint.Endpoint {
	e := s.p.Endpoint(endpoint.TransportUD)
	e.QKey = s.p.QKey
	return e
}

func (s *udSide) send(t *testing.T, to ibpath.Path, wrid uint64, off, n int) {
	ah, err := s.ahs.AddressHandle(to)
	require.NoError(t, err)
	av := ah.AV()
	require.NoError(t, s.q.sq.Begin(wrid, wqebuilder.Signaled).UD(&av, to.DQPN, to.QKey).Send().
		SGE(s.n.addr(off), uint32(n), s.n.mr.LKey()).Finish())
	s.q.sq.RingDoorbell()
}

// recvOne returns the single receive CQE found on the side's CQ (send
// completions are checked and skipped).
func recvOne(t *testing.T, cqes []monocq.CQE) *monocq.CQE {
	t.Helper()
	var got *monocq.CQE
	for i := range cqes {
		c := &cqes[i]
		require.NoError(t, c.Err())
		if c.Opcode() != prm.CQEReq {
			require.Nil(t, got, "one receive expected")
			got = c
		}
	}
	require.NotNil(t, got, "no receive completion")
	return got
}

func testUDReply(t *testing.T, link ctx.LinkLayer, global bool) {
	f := newFabric(t, link)
	a, b := newUDSide(t, newNode(t, f, "sim0")), newUDSide(t, newNode(t, f, "sim1"))
	if global {
		a.p.GlobalRoute = true
	}
	to, err := a.p.Connect(b.endpoint())
	require.NoError(t, err)
	to.QKey = testQKey

	const msg = "ping over UD"
	copy(a.n.buf.Bytes()[256:], msg)
	b.q.postRecv(b.n.addr(0), 1024, b.n.mr.LKey())
	a.q.postRecv(a.n.addr(4096), 1024, a.n.mr.LKey())
	a.send(t, to, 1, 256, len(msg))
	require.NoError(t, f.RunUntilIdle())
	var cqes []monocq.CQE
	b.n.poll.Poll(64, func(c *monocq.CQE) { cqes = append(cqes, *c) })
	recvCQE := *recvOne(t, cqes)
	rc := &recvCQE
	require.Equal(t, uint32(prm.GRHSize+len(msg)), rc.ByteCount())
	require.Equal(t, msg, string(b.n.buf.Bytes()[prm.GRHSize:prm.GRHSize+len(msg)]))
	require.Equal(t, link == ctx.LinkLayerEthernet || global, rc.HasGRH())

	reply, err := ibpath.Reply(rc, b.n.buf.Bytes()[:prm.GRHSize], b.p, b.gids)
	require.NoError(t, err)
	require.Equal(t, a.q.qp.QPN(), reply.DQPN)
	require.Equal(t, b.q.qp.QPN(), reply.SQPN)
	require.Equal(t, uint32(testQKey), reply.QKey)
	if rc.HasGRH() {
		require.True(t, reply.GlobalRoute)
		require.Equal(t, a.p.SGID, reply.DGID, "the reply goes to the sender's GID")
		require.Equal(t, b.p.SGID, reply.SGID)
		require.Equal(t, uint8(0xff), reply.HopLimit)
	} else {
		require.False(t, reply.GlobalRoute)
	}
	if link == ctx.LinkLayerInfiniBand {
		require.Equal(t, a.p.SLID, reply.DLID, "the reply goes to the sender's LID")
	}

	const answer = "pong"
	copy(b.n.buf.Bytes()[2048:], answer)
	b.send(t, reply, 2, 2048, len(answer))
	require.NoError(t, f.RunUntilIdle())
	cqes = cqes[:0]
	a.n.poll.Poll(64, func(c *monocq.CQE) { cqes = append(cqes, *c) })
	back := recvOne(t, cqes)
	require.Equal(t, b.q.qp.QPN(), back.SourceQP())
	require.Equal(t, answer, string(a.n.buf.Bytes()[4096+prm.GRHSize:4096+prm.GRHSize+len(answer)]))

	// The request path seen from the sender is the reply reversed.
	req, err := ibpath.FromCompletion(rc, b.n.buf.Bytes()[:prm.GRHSize], b.p)
	require.NoError(t, err)
	require.Equal(t, a.q.qp.QPN(), req.SQPN)
	require.Equal(t, b.q.qp.QPN(), req.DQPN)
}

func TestUDReplyInfiniBand(t *testing.T)       { testUDReply(t, ctx.LinkLayerInfiniBand, false) }
func TestUDReplyInfiniBandGlobal(t *testing.T) { testUDReply(t, ctx.LinkLayerInfiniBand, true) }
func TestUDReplyRoCE(t *testing.T)             { testUDReply(t, ctx.LinkLayerEthernet, false) }

// testUDReplyRoCEGID sends a datagram from GID index gid of one RoCE port
// to the same index of the other, checks the network header in front of
// the payload and its type in the CQE (prm.CQERoCEL3*), and answers it with
// the path ibpath.Reply builds from them; the answer must reach the sender,
// from the same GID index, and arrive with the same kind of header. The
// sender's SL is 5, which must not show in the CQE on RoCE.
func testUDReplyRoCEGID(t *testing.T, gid uint8, l3 uint8) {
	f := newFabric(t, ctx.LinkLayerEthernet)
	a, b := newUDSideGID(t, newNode(t, f, "sim0"), ctx.GIDIndex(gid)), newUDSideGID(t, newNode(t, f, "sim1"), ctx.GIDIndex(gid))
	to, err := a.p.Connect(b.endpoint())
	require.NoError(t, err)
	to.QKey, to.SL = testQKey, 5

	// checkHeader checks the 40 bytes in front of a payload sent from GID
	// src to GID dst, and the CQE's network header type.
	checkHeader := func(c *monocq.CQE, h []byte, src, dst ctx.GID) {
		t.Helper()
		require.True(t, c.HasGRH())
		require.Equal(t, l3, c.RoCEL3Type(), "network header type in the CQE")
		switch l3 {
		case prm.CQERoCEL3GRH, prm.CQERoCEL3IPv6:
			next := byte(0x1b)
			if l3 == prm.CQERoCEL3IPv6 {
				next = 17
			}
			require.Equal(t, byte(6), h[0]>>4)
			require.Equal(t, next, h[6], "next header")
			require.Equal(t, src[:], h[8:24])
			require.Equal(t, dst[:], h[24:40])
		case prm.CQERoCEL3IPv4:
			require.Equal(t, make([]byte, 20), h[:20])
			require.Equal(t, byte(0x45), h[20])
			require.Equal(t, byte(17), h[29], "protocol UDP")
			require.Equal(t, src[12:], h[32:36])
			require.Equal(t, dst[12:], h[36:40])
		}
	}

	const msg = "ping over RoCE"
	copy(a.n.buf.Bytes()[256:], msg)
	b.q.postRecv(b.n.addr(0), 1024, b.n.mr.LKey())
	a.q.postRecv(a.n.addr(4096), 1024, a.n.mr.LKey())
	a.send(t, to, 1, 256, len(msg))
	recvCQE := *recvOne(t, drain(t, f, b.n))
	rc := &recvCQE
	require.Equal(t, uint32(prm.GRHSize+len(msg)), rc.ByteCount())
	require.Equal(t, msg, string(b.n.buf.Bytes()[prm.GRHSize:prm.GRHSize+len(msg)]))
	checkHeader(rc, b.n.buf.Bytes()[:prm.GRHSize], a.p.SGID, b.p.SGID)

	reply, err := ibpath.Reply(rc, b.n.buf.Bytes()[:prm.GRHSize], b.p, b.gids)
	require.NoError(t, err)
	require.True(t, reply.GlobalRoute)
	require.Equal(t, a.q.qp.QPN(), reply.DQPN)
	require.Equal(t, a.p.SGID, reply.DGID, "the reply goes to the sender's GID")
	require.Equal(t, b.p.SGID, reply.SGID)
	require.Equal(t, gid, reply.SGIDIndex, "the reply leaves from the GID the datagram came to")

	const answer = "pong"
	copy(b.n.buf.Bytes()[2048:], answer)
	b.send(t, reply, 2, 2048, len(answer))
	back := recvOne(t, drain(t, f, a.n))
	require.Equal(t, b.q.qp.QPN(), back.SourceQP())
	require.Equal(t, answer, string(a.n.buf.Bytes()[4096+prm.GRHSize:4096+prm.GRHSize+len(answer)]))
	checkHeader(back, a.n.buf.Bytes()[4096:4096+prm.GRHSize], b.p.SGID, a.p.SGID)
}

func TestUDReplyRoCEv1(t *testing.T)           { testUDReplyRoCEGID(t, 0, prm.CQERoCEL3GRH) }
func TestUDReplyRoCEv1IPv4Mapped(t *testing.T) { testUDReplyRoCEGID(t, 2, prm.CQERoCEL3GRH) }
func TestUDReplyRoCEv2IPv6(t *testing.T)       { testUDReplyRoCEGID(t, 1, prm.CQERoCEL3IPv6) }
func TestUDReplyRoCEv2IPv4(t *testing.T)       { testUDReplyRoCEGID(t, 3, prm.CQERoCEL3IPv4) }

func TestAddressCacheBuildsOnce(t *testing.T) {
	f := newFabric(t, ctx.LinkLayerInfiniBand)
	a, b := newUDSide(t, newNode(t, f, "sim0")), newUDSide(t, newNode(t, f, "sim1"))
	to, err := a.p.Connect(b.endpoint())
	require.NoError(t, err)
	to.QKey = testQKey

	ah, err := a.ahs.AddressHandle(to)
	require.NoError(t, err)
	other := to
	other.DQPN, other.DQPSN = 0x999, 0x5 // same destination port, another QP
	ah2, err := a.ahs.AddressHandle(other)
	require.NoError(t, err)
	require.Same(t, ah, ah2, "the address handle is keyed by the address, not the QP")
	hits, misses := a.ahs.Stats()
	require.Equal(t, uint64(1), hits)
	require.Equal(t, uint64(1), misses)
	require.Equal(t, 1, a.ahs.Len())
	// The cached vector routes to the peer's LID.
	av := ah.AV()
	require.Equal(t, b.p.SLID, binary.BigEndian.Uint16(av[prm.AVRLID:]))

	allocs := testing.AllocsPerRun(1000, func() {
		if _, err := a.ahs.AddressHandle(to); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs, "a cached lookup allocates nothing")

	sl := to
	sl.SL = 3
	ah3, err := a.ahs.AddressHandle(sl)
	require.NoError(t, err)
	require.NotSame(t, ah, ah3)
	require.Equal(t, 2, a.ahs.Len())

	require.NoError(t, a.ahs.Evict(to))
	require.True(t, ah.Closed())
	require.Equal(t, 1, a.ahs.Len())
	require.NoError(t, a.ahs.Evict(to), "evicting an absent entry is a no-op")

	bad := to
	bad.FlowLabel = 1 << 21
	bad.GlobalRoute = true
	_, err = a.ahs.AddressHandle(bad)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Equal(t, 1, a.ahs.Len(), "a refused path caches nothing")
}

// TestReplyPicksGIDEntryOfTheHeaderType: where a port has the same GID as a
// RoCE v1 and a RoCE v2 entry, the reply leaves from the entry of the kind
// the datagram came as.
func TestReplyPicksGIDEntryOfTheHeaderType(t *testing.T) {
	var recv monocq.CQE
	binary.BigEndian.PutUint32(recv[24:], 1<<28|0x42)
	recv[63] = uint8(prm.CQERespSend) << 4
	mine := ctx.GID{0xfe, 0x80, 15: 7}
	gids := []ctx.GIDEntry{
		{Index: 0, GID: mine, Type: ctx.GIDTypeRoCEv1},
		{Index: 1, GID: mine, Type: ctx.GIDTypeRoCEv2},
	}
	h := make([]byte, 40)
	h[0] = 0x60
	h[8] = 0xfe
	copy(h[24:], mine[:])
	for _, c := range []struct {
		next byte
		idx  uint8
	}{{0x1b, 0}, {17, 1}} {
		h[6] = c.next
		p, err := ibpath.Reply(&recv, h, ibpath.Default(), gids)
		require.NoError(t, err)
		require.Equal(t, c.idx, p.SGIDIndex, "next header %#x", c.next)
	}
	// No entry of the right type: not found.
	_, err := ibpath.Reply(&recv, h, ibpath.Default(), gids[:1])
	require.ErrorIs(t, err, ctx.ErrNotFound)
}

func TestReplyRefusesNonReceives(t *testing.T) {
	var req monocq.CQE
	req[63] = uint8(prm.CQEReq) << 4
	_, err := ibpath.Reply(&req, nil, ibpath.Default(), nil)
	require.ErrorIs(t, err, ibpath.ErrNotReceive)

	var failed monocq.CQE
	failed[55] = uint8(prm.SyndromeLocalLength)
	failed[63] = uint8(prm.CQERespErr) << 4
	_, err = ibpath.Reply(&failed, nil, ibpath.Default(), nil)
	require.ErrorIs(t, err, monocq.ErrCompletion)

	// A receive that claims a GRH needs its 40 bytes.
	var recv monocq.CQE
	binary.BigEndian.PutUint32(recv[24:], 1<<28|0x42)
	recv[63] = uint8(prm.CQERespSend) << 4
	_, err = ibpath.Reply(&recv, make([]byte, 10), ibpath.Default(), nil)
	require.ErrorIs(t, err, transport.ErrBadGRH)

	// A GRH naming a GID the port does not have cannot be answered from it.
	g6 := make([]byte, 40)
	g6[0] = 0x60
	g6[24] = 0x20
	_, err = ibpath.Reply(&recv, g6, ibpath.Default(), []ctx.GIDEntry{{Index: 0, GID: ctx.GID{0xfe, 0x80}}})
	require.ErrorIs(t, err, ctx.ErrNotFound)
	p, err := ibpath.Reply(&recv, g6, ibpath.Default(), nil)
	require.NoError(t, err)
	require.Equal(t, uint32(0x42), p.DQPN)
}

// TestReplyPathBitsFromCompletion: a transport Completion's path bits, as
// a raw CQE's, become the reply's source path bits, and the path it was
// received on has them in its DLID (ibv_init_ah_from_wc).
func TestReplyPathBitsFromCompletion(t *testing.T) {
	local := ibpath.Default()
	local.SLID = 0x10
	var raw monocq.CQE
	binary.BigEndian.PutUint32(raw[24:], 0x42)
	binary.BigEndian.PutUint16(raw[prm.CQESLID:], 0x20)
	raw[prm.CQEMLPath] = 3
	raw[63] = uint8(prm.CQERespSend) << 4
	c := &transport.Completion{Opcode: prm.CQERespSend, SourceQPN: 0x42, SLID: 0x20, PathBits: 3}
	check := func(name string, reply, from ibpath.Path, errs ...error) {
		for _, err := range errs {
			require.NoError(t, err, name)
		}
		require.Equal(t, uint8(3), reply.SrcPathBits, name)
		require.Equal(t, uint16(0x20), reply.DLID, name)
		require.Equal(t, uint32(0x42), reply.DQPN, name)
		require.Equal(t, uint16(0x13), from.DLID, name)
	}
	reply, err1 := ibpath.Reply(&raw, nil, local, nil)
	from, err2 := ibpath.FromCompletion(&raw, nil, local)
	check("CQE", reply, from, err1, err2)
	reply, err1 = ibpath.Reply(c, nil, local, nil)
	from, err2 = ibpath.FromCompletion(c, nil, local)
	check("Completion", reply, from, err1, err2)
}
