package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// onesComplementSum16 adds the big-endian 16-bit words of b with end-around
// carry.
func onesComplementSum16(b []byte) uint16 {
	var s uint64
	for i := 0; i < len(b); i += 2 {
		s += uint64(b[i])<<8 | uint64(b[i+1])
	}
	for s>>16 != 0 {
		s = s>>16 + s&0xffff
	}
	return uint16(s)
}

// TestUDNetworkHeaders checks every byte of the 40-byte area in front of a
// UD payload, on InfiniBand and, on an Ethernet port, for each kind of GID
// the datagram leaves from, and what the receive CQE reports in flags_rqpn:
// on InfiniBand the SL in bits 27..24, on RoCE the network header type in
// bits 25..24 (bits 27..26 stay clear: no SL there on RoCE):
//
//   - InfiniBand: the GRH, IP version 6, traffic class and flow label from
//     the address vector, PayLen big-endian (IBA: the bytes after the GRH
//     through the ICRC), next header 0x1b (BTH follows), hop limit, SGID
//     and DGID.
//   - RoCE v1 (link-local or IPv4-mapped GID): the InfiniBand GRH, next
//     header 0x1b, PayLen = BTH + DETH + [ImmDt] + payload padded to 4 +
//     ICRC; type GRH (0).
//   - RoCE v2, IPv6 GID: the IPv6 header, payload length 8 (UDP) more than
//     PayLen, next header 17; type IPv6 (1).
//   - RoCE v2, IPv4-mapped GID: 20 zero bytes, then the IPv4 header: 0x45,
//     TOS = traffic class, total length 20 + 8 + PayLen, identification 0,
//     DF, TTL = hop limit, protocol 17, a checksum recomputed here, source
//     and destination addresses; type IPv4 (2).
func TestUDNetworkHeaders(t *testing.T) {
	cases := []struct {
		name  string
		link  ctx.LinkLayer
		idx   uint8
		gtype ctx.GIDType
		l3    uint8
	}{
		{"InfiniBand", ctx.LinkLayerInfiniBand, 0, ctx.GIDTypeIB, prm.CQERoCEL3GRH},
		{"RoCEv1", ctx.LinkLayerEthernet, 0, ctx.GIDTypeRoCEv1, prm.CQERoCEL3GRH},
		{"RoCEv1-IPv4-mapped", ctx.LinkLayerEthernet, 2, ctx.GIDTypeRoCEv1, prm.CQERoCEL3GRH},
		{"RoCEv2-IPv6", ctx.LinkLayerEthernet, 1, ctx.GIDTypeRoCEv2, prm.CQERoCEL3IPv6},
		{"RoCEv2-IPv4", ctx.LinkLayerEthernet, 3, ctx.GIDTypeRoCEv2, prm.CQERoCEL3IPv4},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t, Options{LinkLayer: tc.link})
			a := e.udQP(e.pd, 1, qpOpts{})
			b := e.udQP(e.pd2, 1, qpOpts{})
			mine, err := e.c.QueryGIDs(1)
			require.NoError(t, err)
			theirs, err := e.c2.QueryGIDs(1)
			require.NoError(t, err)
			require.Equal(t, tc.gtype, mine[tc.idx].Type)
			sgid, dgid := mine[tc.idx].GID, theirs[tc.idx].GID
			// SL 7: on InfiniBand flags_rqpn carries it, on RoCE it must
			// not show there.
			ah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{GlobalRoute: true, DGID: dgid, SGIDIndex: tc.idx, DLID: lidOf(t, e.c2),
				HopLimit: 17, TrafficClass: 0xa5, FlowLabel: 0x9abcd, SL: 7})
			require.NoError(t, err)
			av := ah.AV()
			be.PutUint32(av[prm.AVKey:], 1)
			be.PutUint32(av[prm.AVDQPDCT:], b.qp.QPN()|prm.ExtendedUDAV)
			payload := make([]byte, 301)
			for i := range payload {
				payload[i] = byte(i*7 + 1)
			}
			copy(e.mem(8192, len(payload)), payload)
			ops := []struct {
				op     prm.Opcode
				n      int
				payLen uint16 // IBA PayLen: BTH, DETH, [ImmDt], padded payload, ICRC
			}{
				{prm.OpSend, 300, 12 + 8 + 300 + 4},
				{prm.OpSendImm, 301, 12 + 8 + 4 + 304 + 4},
			}
			for k, o := range ops {
				off := k * 1024
				for i := range e.mem2(off, 40) {
					e.mem2(off, 40)[i] = 0xcc // stale bytes the device must overwrite
				}
				b.postRecv(dataSeg(40+512, e.mr2.LKey(), e.addr2(off)))
				a.post(o.op, 0, prm.FlagCQUpdate, 0x77, av[:], dataSeg(uint32(o.n), e.mr.LKey(), e.addr(8192)))
				e.run()
				require.Equal(t, prm.CQEReq, a.scq.one(t).op)
				rc := b.rcq.one(t)
				require.True(t, rc.grh)
				require.Equal(t, uint32(prm.CQEGRHInData), rc.flagsRQPN>>prm.CQEGRHShift&prm.CQEGRHMask)
				if tc.link == ctx.LinkLayerInfiniBand {
					require.Equal(t, uint32(7), rc.flagsRQPN>>24&0xf, "SL in flags_rqpn bits 27..24")
				} else {
					require.Equal(t, uint32(tc.l3), rc.flagsRQPN>>24&3, "network header type in flags_rqpn bits 25..24")
					require.Zero(t, rc.flagsRQPN>>26&3, "flags_rqpn bits 27..26")
				}
				require.Equal(t, a.qp.QPN(), rc.srcQPN)
				require.Equal(t, uint32(40+o.n), rc.byteCnt)
				require.Equal(t, payload[:o.n], e.mem2(off+40, o.n))

				h := e.mem2(off, 40)
				switch tc.l3 {
				case prm.CQERoCEL3GRH, prm.CQERoCEL3IPv6:
					length, next := o.payLen, byte(0x1b)
					if tc.l3 == prm.CQERoCEL3IPv6 {
						length, next = o.payLen+8, 17
					}
					require.Equal(t, uint32(6<<28|0xa5<<20|0x9abcd), be.Uint32(h[0:4]), "version, traffic class, flow label")
					require.Equal(t, length, be.Uint16(h[4:6]), "payload length of a %d-byte %v", o.n, o.op)
					require.Equal(t, next, h[6], "next header")
					require.Equal(t, byte(17), h[7], "hop limit")
					require.Equal(t, sgid[:], h[8:24], "source")
					require.Equal(t, dgid[:], h[24:40], "destination")
				case prm.CQERoCEL3IPv4:
					require.Equal(t, make([]byte, 20), h[:20], "the undefined first 20 bytes are written as zeros")
					ip := h[20:40]
					require.Equal(t, byte(0x45), ip[0], "version 4, IHL 5")
					require.Equal(t, byte(0xa5), ip[1], "TOS")
					require.Equal(t, 20+8+o.payLen, be.Uint16(ip[2:4]), "total length of a %d-byte %v", o.n, o.op)
					require.Equal(t, uint16(0), be.Uint16(ip[4:6]), "identification")
					require.Equal(t, uint16(0x4000), be.Uint16(ip[6:8]), "DF, fragment offset 0")
					require.Equal(t, byte(17), ip[8], "TTL")
					require.Equal(t, byte(17), ip[9], "protocol UDP")
					require.Equal(t, sgid[12:16], ip[12:16], "source address")
					require.Equal(t, dgid[12:16], ip[16:20], "destination address")
					var zeroed [20]byte
					copy(zeroed[:], ip)
					zeroed[10], zeroed[11] = 0, 0
					require.Equal(t, ^onesComplementSum16(zeroed[:]), be.Uint16(ip[10:12]), "header checksum")
					require.Equal(t, uint16(0xffff), onesComplementSum16(ip), "a header with its checksum sums to 0xffff")
				}
			}
		})
	}
}

// TestRoCERCReceiveL3Type checks the network header type of RC receive
// completions on an Ethernet port: it follows the GID the sender's path
// leaves from, as for UD, in place of SL.
func TestRoCERCReceiveL3Type(t *testing.T) {
	for _, tc := range []struct {
		idx uint8
		l3  uint8
	}{{0, prm.CQERoCEL3GRH}, {1, prm.CQERoCEL3IPv6}, {2, prm.CQERoCEL3GRH}, {3, prm.CQERoCEL3IPv4}} {
		e := newEnv(t, Options{LinkLayer: ctx.LinkLayerEthernet})
		gids1, err := e.c.QueryGIDs(1)
		require.NoError(t, err)
		gids2, err := e.c2.QueryGIDs(1)
		require.NoError(t, err)
		a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
		b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
		for _, s := range []struct {
			q    *testQP
			peer uint32
			dgid ctx.GID
		}{{a, b.qp.QPN(), gids2[tc.idx].GID}, {b, a.qp.QPN(), gids1[tc.idx].GID}} {
			require.NoError(t, s.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
			require.NoError(t, s.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: s.peer, PathMTU: ctx.MTU1024,
				Path: ctx.AddressAttr{GlobalRoute: true, DGID: s.dgid, SGIDIndex: tc.idx, HopLimit: 64, SL: 7}}))
			require.NoError(t, s.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7}))
		}
		b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
		a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("rc over roce")))
		e.run()
		require.Equal(t, prm.CQEReq, a.scq.one(t).op)
		rc := b.rcq.one(t)
		require.Equal(t, prm.CQERespSend, rc.op)
		require.Equal(t, uint32(tc.l3), rc.flagsRQPN>>24&3, "GID index %d", tc.idx)
		require.Zero(t, rc.flagsRQPN>>26&3, "GID index %d: no SL in flags_rqpn on RoCE", tc.idx)
		require.Equal(t, a.qp.QPN(), rc.srcQPN)
	}
}

// TestUDCQESLInfiniBand: on InfiniBand flags_rqpn keeps the packet's SL in
// bits 27..24, whether or not a GRH came.
func TestUDCQESLInfiniBand(t *testing.T) {
	e := newEnv(t, Options{})
	a := e.udQP(e.pd, 1, qpOpts{})
	b := e.udQP(e.pd2, 1, qpOpts{})
	gids, err := e.c2.QueryGIDs(1)
	require.NoError(t, err)
	for i, global := range []bool{false, true} {
		ah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{DLID: lidOf(t, e.c2), SL: 13, GlobalRoute: global, DGID: gids[0].GID, HopLimit: 1})
		require.NoError(t, err)
		av := ah.AV()
		be.PutUint32(av[prm.AVKey:], 1)
		be.PutUint32(av[prm.AVDQPDCT:], b.qp.QPN()|prm.ExtendedUDAV)
		b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(i*64)))
		a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av[:], inlineSeg([]byte("sl")))
		e.run()
		require.Equal(t, prm.CQEReq, a.scq.one(t).op)
		rc := b.rcq.one(t)
		require.Equal(t, global, rc.grh)
		require.Equal(t, uint32(13), rc.flagsRQPN>>prm.CQESLShift&prm.CQESLMask)
	}
}
