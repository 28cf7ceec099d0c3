package ibpath_test

import (
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/ibpath"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

func TestValidateRanges(t *testing.T) {
	require.NoError(t, ibpath.Default().Validate())
	cases := []struct {
		name string
		mod  func(*ibpath.Path)
	}{
		{"SQPN", func(p *ibpath.Path) { p.SQPN = 1 << 24 }},
		{"DQPN", func(p *ibpath.Path) { p.DQPN = 1 << 24 }},
		{"SQPSN", func(p *ibpath.Path) { p.SQPSN = 1 << 24 }},
		{"DQPSN", func(p *ibpath.Path) { p.DQPSN = 1 << 24 }},
		{"retry count", func(p *ibpath.Path) { p.RetryCount = 8 }},
		{"RNR retry", func(p *ibpath.Path) { p.RNRRetry = 8 }},
		{"min RNR timer", func(p *ibpath.Path) { p.MinRNRTimer = 32 }},
		{"timeout", func(p *ibpath.Path) { p.Timeout = 32 }},
		{"SL", func(p *ibpath.Path) { p.SL = 16 }},
		{"flow label", func(p *ibpath.Path) { p.FlowLabel = 1 << 20 }},
		{"MTU", func(p *ibpath.Path) { p.MTU = 6 }},
	}
	for _, c := range cases {
		p := ibpath.Default()
		c.mod(&p)
		err := p.Validate()
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, c.name)
		require.Contains(t, err.Error(), c.name)
	}
	// The largest legal values pass.
	p := ibpath.Path{SQPN: 1<<24 - 1, DQPN: 1<<24 - 1, SQPSN: 1<<24 - 1, DQPSN: 1<<24 - 1,
		RetryCount: 7, RNRRetry: 7, MinRNRTimer: 31, Timeout: 31, SL: 15, FlowLabel: 1<<20 - 1, MTU: ctx.MTU4096}
	require.NoError(t, p.Validate())
}

func fullPath() ibpath.Path {
	return ibpath.Path{
		Port: 2, PKeyIndex: 3, QKey: 0x11112222, MTU: ctx.MTU2048,
		RetryCount: 5, RNRRetry: 6, MinRNRTimer: 17, Timeout: 19,
		SQPN: 0x123, DQPN: 0x456, SQPSN: 0x789, DQPSN: 0xabc,
		MaxRdAtomic: 4, MaxDestRdAtomic: 8,
		SLID: 7, DLID: 9, SrcPathBits: 1, SL: 3, StaticRate: 2,
		GlobalRoute: true, SGID: ctx.GID{0xfe, 0x80, 15: 1}, DGID: ctx.GID{0xfe, 0x80, 15: 2}, SGIDIndex: 1,
		FlowLabel: 0x12345, TrafficClass: 0x20, HopLimit: 9,
	}
}

func TestReverse(t *testing.T) {
	p := fullPath()
	r := p.Reverse()
	require.Equal(t, uint32(0x456), r.SQPN)
	require.Equal(t, uint32(0x123), r.DQPN)
	require.Equal(t, uint32(0xabc), r.SQPSN)
	require.Equal(t, uint32(0x789), r.DQPSN)
	require.Equal(t, uint16(9), r.SLID)
	require.Equal(t, uint16(7), r.DLID)
	require.Equal(t, p.DGID, r.SGID)
	require.Equal(t, p.SGID, r.DGID)
	require.Equal(t, uint8(8), r.MaxRdAtomic)
	require.Equal(t, uint8(4), r.MaxDestRdAtomic)
	require.Equal(t, p, r.Reverse())
}

func TestEndpointAndConnect(t *testing.T) {
	p := fullPath()
	e := p.Endpoint(endpoint.TransportRC)
	require.NoError(t, e.Validate())
	require.Equal(t, endpoint.Endpoint{Transport: endpoint.TransportRC, QPN: 0x123, LID: 7, GID: p.SGID,
		GIDIndex: 1, PSN: 0x789, MTU: ctx.MTU2048}, e)

	local := ibpath.Default()
	local.MTU = ctx.MTU4096
	remote := endpoint.Endpoint{Transport: endpoint.TransportRC, QPN: 0x77, PSN: 0x55, LID: 4, MTU: ctx.MTU1024}
	c, err := local.Connect(remote)
	require.NoError(t, err)
	require.Equal(t, uint32(0x77), c.DQPN)
	require.Equal(t, uint32(0x55), c.DQPSN)
	require.Equal(t, uint16(4), c.DLID)
	require.Equal(t, ctx.MTU1024, c.MTU, "the lower MTU wins")
	require.False(t, c.GlobalRoute)

	// A peer without a LID needs a GRH and a GID.
	remote.LID = 0
	_, err = local.Connect(remote)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	remote.GID = ctx.GID{0xfe, 0x80, 15: 9}
	c, err = local.Connect(remote)
	require.NoError(t, err)
	require.True(t, c.GlobalRoute)
	require.Equal(t, remote.GID, c.DGID)

	// On InfiniBand (the local port has a LID) a GRH does not replace the
	// peer's LID, which the subnet forwards by.
	ib := local
	ib.SLID = 3
	_, err = ib.Connect(remote)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	ib.GlobalRoute = true
	_, err = ib.Connect(remote)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	remote.LID = 4
	c, err = ib.Connect(remote)
	require.NoError(t, err)
	require.Equal(t, uint16(4), c.DLID)
	require.True(t, c.GlobalRoute)

	// A DC endpoint names its DCT.
	dc := endpoint.Endpoint{Transport: endpoint.TransportDC, QPN: 0x10, DCTNumber: 0x99, DCAccessKey: 5, LID: 2, MTU: ctx.MTU4096}
	c, err = local.Connect(dc)
	require.NoError(t, err)
	require.Equal(t, uint32(0x99), c.DQPN)
}

func TestConnectRejectsGarbage(t *testing.T) {
	local := ibpath.Default()
	local.SQPN = 0x100
	bad := []endpoint.Endpoint{
		{},
		{Transport: endpoint.TransportRC, QPN: 1 << 24, LID: 1, MTU: ctx.MTU1024},
		{Transport: endpoint.TransportRC, QPN: 1, LID: 1, MTU: 9},
		{Transport: endpoint.TransportRC, QPN: 1, PSN: 1 << 25, LID: 1, MTU: ctx.MTU1024},
		{Transport: 7, QPN: 1, LID: 1, MTU: ctx.MTU1024},
	}
	for i, e := range bad {
		got, err := local.Connect(e)
		require.Error(t, err, "endpoint %d", i)
		require.Equal(t, local, got, "bad input changes nothing")
	}
	// Bytes off the wire are decoded by endpoint and refused there.
	var e endpoint.Endpoint
	require.ErrorIs(t, e.UnmarshalBinary([]byte("MXEP garbage garbage garbage")), endpoint.ErrMalformed)
}

// connectPair builds two RC QPs on two devices and connects them with paths
// made from each other's endpoints.
func connectPair(t *testing.T, link ctx.LinkLayer) (*node, *node, *testQP, *testQP, ibpath.Path) {
	f := newFabric(t, link)
	a, b := newNode(t, f, "sim0"), newNode(t, f, "sim1")
	qa, qb := a.newQP(t, ctx.QPTypeRC), b.newQP(t, ctx.QPTypeRC)

	pa, err := ibpath.Local(a.dev, ibpath.Default(), 1, ctx.GIDSelector{})
	require.NoError(t, err)
	pb, err := ibpath.Local(b.dev, ibpath.Default(), 1, ctx.GIDSelector{})
	require.NoError(t, err)
	pa.SQPN, pa.SQPSN = qa.qp.QPN(), 0x1234
	pb.SQPN, pb.SQPSN = qb.qp.QPN(), 0x4321

	// The endpoints travel through their wire encoding.
	wire := func(e endpoint.Endpoint) endpoint.Endpoint {
		bin, err := e.MarshalBinary()
		require.NoError(t, err)
		var out endpoint.Endpoint
		require.NoError(t, out.UnmarshalBinary(bin))
		return out
	}
	ea, eb := wire(pa.Endpoint(endpoint.TransportRC)), wire(pb.Endpoint(endpoint.TransportRC))
	pa, err = pa.Connect(eb)
	require.NoError(t, err)
	pb, err = pb.Connect(ea)
	require.NoError(t, err)
	access := ctx.AccessLocalWrite | ctx.AccessRemoteWrite | ctx.AccessRemoteRead
	require.NoError(t, ibpath.ModifyToConnected(qa.qp, pa, access))
	require.NoError(t, ibpath.ModifyToConnected(qb.qp, pb, access))
	for _, q := range []*testQP{qa, qb} {
		s, err := q.qp.State()
		require.NoError(t, err)
		require.Equal(t, ctx.QPStateRTS, s)
	}
	require.Equal(t, qb.qp.QPN(), qa.qp.RemoteQPN())
	require.Equal(t, qa.qp.QPN(), qb.qp.RemoteQPN())

	// A SEND and an RDMA WRITE cross the connection.
	copy(a.buf.Bytes(), "hello over a path")
	qb.postRecv(b.addr(0), 64, b.mr.LKey())
	require.NoError(t, qa.sq.Begin(1, wqebuilder.Signaled).Send().SGE(a.addr(0), 17, a.mr.LKey()).Finish())
	require.NoError(t, qa.sq.Begin(2, wqebuilder.Signaled).RdmaWrite(b.addr(1024), b.mr.RKey()).SGE(a.addr(0), 5, a.mr.LKey()).Finish())
	qa.sq.RingDoorbell()
	ca := drain(t, f, a)
	require.Len(t, ca, 2)
	for _, c := range ca {
		require.NoError(t, c.Err())
	}
	require.Equal(t, "hello over a path", string(b.buf.Bytes()[:17]))
	require.Equal(t, "hello", string(b.buf.Bytes()[1024:1029]))
	return a, b, qa, qb, pa
}

func TestConnectRCInfiniBand(t *testing.T) {
	a, _, _, _, p := connectPair(t, ctx.LinkLayerInfiniBand)
	require.False(t, p.GlobalRoute)
	require.NotZero(t, p.DLID)
	gids, err := a.dev.QueryGIDs(1)
	require.NoError(t, err)
	require.Equal(t, uint8(0), p.SGIDIndex, "InfiniBand: the port GID")
	require.Equal(t, gids[0].GID, p.SGID)
}

// TestConnectRCRoCE: with the GID left unset, Local chooses the RoCE v2
// IPv4-mapped GID (index 3 of the model's table), not index 0 (RoCE v1
// link-local), and the connection carries traffic.
func TestConnectRCRoCE(t *testing.T) {
	a, b, _, _, p := connectPair(t, ctx.LinkLayerEthernet)
	require.True(t, p.GlobalRoute, "RoCE paths carry a GRH")
	require.False(t, p.DGID.IsZero())
	ga, err := a.dev.QueryGIDs(1)
	require.NoError(t, err)
	gb, err := b.dev.QueryGIDs(1)
	require.NoError(t, err)
	require.Equal(t, uint8(3), p.SGIDIndex)
	require.Equal(t, ctx.GIDTypeRoCEv2, ga[3].Type)
	require.True(t, netip.AddrFrom16(p.SGID).Is4In6(), "SGID %v", p.SGID)
	require.Equal(t, ga[3].GID, p.SGID)
	require.Equal(t, gb[3].GID, p.DGID, "the peer's endpoint carried its chosen GID")
}

// TestLocalGIDSelection: an explicit index overrides the choice; an index
// with no entry is refused on RoCE (nothing changes) and accepted on
// InfiniBand without a GRH, where the GID is not used.
func TestLocalGIDSelection(t *testing.T) {
	f := newFabric(t, ctx.LinkLayerEthernet)
	a := newNode(t, f, "sim0")
	gids, err := a.dev.QueryGIDs(1)
	require.NoError(t, err)
	p, err := ibpath.Local(a.dev, ibpath.Default(), 1, ctx.GIDIndex(5))
	require.NoError(t, err)
	require.Equal(t, uint8(5), p.SGIDIndex)
	require.Equal(t, gids[5].GID, p.SGID)
	require.Equal(t, uint8(5), p.Endpoint(endpoint.TransportRC).GIDIndex, "the endpoint says which GID")

	in := ibpath.Default()
	out, err := ibpath.Local(a.dev, in, 1, ctx.GIDIndex(77))
	require.ErrorIs(t, err, ctx.ErrNotFound)
	require.Contains(t, err.Error(), "index 77")
	require.Equal(t, in, out, "a refused GID changes nothing")

	ib := newNode(t, newFabric(t, ctx.LinkLayerInfiniBand), "sim0")
	p, err = ibpath.Local(ib.dev, ibpath.Default(), 1, ctx.GIDIndex(77))
	require.NoError(t, err, "InfiniBand addresses by LID")
	require.True(t, p.SGID.IsZero())
	g := ibpath.Default()
	g.GlobalRoute = true
	_, err = ibpath.Local(ib.dev, g, 1, ctx.GIDIndex(77))
	require.ErrorIs(t, err, ctx.ErrNotFound, "a GRH needs the GID")
}

func TestModifyRefusesIncompletePaths(t *testing.T) {
	f := newFabric(t, ctx.LinkLayerInfiniBand)
	a := newNode(t, f, "sim0")
	q := a.newQP(t, ctx.QPTypeRC)
	p := ibpath.Default()
	require.NoError(t, ibpath.ModifyToInit(q.qp, p, ctx.AccessLocalWrite))

	err := ibpath.ModifyToRTR(q.qp, p) // no remote QPN
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	p.DQPN = 0x1ffffff
	require.ErrorIs(t, ibpath.ModifyToRTR(q.qp, p), ctx.ErrInvalidArgument)
	p.DQPN, p.MTU = 0x200, 0
	require.ErrorIs(t, ibpath.ModifyToRTR(q.qp, p), ctx.ErrInvalidArgument)
	s, err := q.qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateInit, s, "a refused path leaves the QP where it was")

	// RTS before RTR is the provider's to refuse.
	require.ErrorIs(t, ibpath.ModifyToRTS(q.qp, ibpath.Default()), ctx.ErrInvalidState)
}
