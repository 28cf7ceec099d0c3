package ud_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// peers is a UD QP on each HCA with its own CQ and poller.
type peers struct {
	e  *transporttest.Env
	qp [2]*ud.QP
	p  [2]*transport.Poller
	cq [2]*ctx.CompletionQueue
}

func newPeers(t *testing.T, opts sim.Options, cfg ud.Config) *peers {
	e := transporttest.New(t, opts)
	x := &peers{e: e}
	for i := range 2 {
		x.cq[i], x.p[i] = newPoller(e, i, 1024)
		qp, err := ud.New(e.PD[i], x.cq[i], cfg)
		require.NoError(t, err)
		require.NoError(t, x.p[i].Add(qp))
		x.qp[i] = qp
	}
	return x
}

func TestSendEverySize(t *testing.T) {
	for _, link := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		t.Run(link.String(), func(t *testing.T) {
			x := newPeers(t, sim.Options{LinkLayer: link}, ud.Config{SendDepth: 4, RecvDepth: 4, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 300, QKey: 0x1234})
			e := x.e
			r := rand.New(rand.NewPCG(21, 22))
			remote, err := x.qp[0].NewRemote(x.qp[1].Endpoint())
			require.NoError(t, err)
			mtu := x.qp[1].Endpoint().MTU.Bytes()
			lim := x.qp[0].Limits()
			wrid := uint64(0)
			for _, imm := range []bool{false, true} {
				for _, n := range transporttest.Sizes {
					if n > mtu {
						continue
					}
					for _, p := range transporttest.Payloads {
						what := fmt.Sprintf("imm=%v %d bytes %v", imm, n, p)
						data := e.Fill(0, 1<<20, n, wrid)
						wrid++
						s, err := x.qp[0].Post(wrid, wqebuilder.Signaled, remote)
						require.NoError(t, err)
						v := r.Uint32()
						ds := s.Send()
						if imm {
							ds = s.SendImm(v)
						}
						finish, ok := e.AddPayload(lim, ds, data, p, r)
						if !ok {
							// Use the slot for an empty datagram nobody
							// receives.
							require.NoError(t, s.Send().FinishBlueFlame())
							require.Equal(t, transport.MatchOK, e.One(x.p[0]).Match)
							continue
						}
						pieces := e.ScatterRecv(1, x.qp[1].BeginRecv, wrid+9000, ud.GRHSize, n, int(x.qp[1].Limits().MaxRecvSGE), r)
						require.NoError(t, finish(), what)
						c := e.One(x.p[0])
						require.Equal(t, transport.MatchOK, c.Match, "%s: %v", what, c.Err())
						require.Equal(t, wrid, c.WRID)
						rcv := e.One(x.p[1])
						require.Equal(t, transport.MatchOK, rcv.Match, "%s: %v", what, rcv.Err())
						require.Equal(t, wrid+9000, rcv.WRID)
						require.Equal(t, uint32(ud.GRHSize+n), rcv.ByteCount, what)
						require.Equal(t, x.qp[0].QPN(), rcv.SourceQPN)
						if imm {
							require.Equal(t, prm.CQERespSendImm, rcv.Opcode)
							require.Equal(t, v, rcv.Immediate)
						} else {
							require.Equal(t, prm.CQERespSend, rcv.Opcode)
						}
						require.Equal(t, link == ctx.LinkLayerEthernet, rcv.GRH, "RoCE datagrams carry a GRH")
						e.ExpectPieces(1, pieces, ud.GRHSize, data, what)
					}
				}
			}
			laps := transporttest.Laps(x.qp[0].SendQueue().ProducerIndex(), lim.SendWQEBBs)
			require.Greater(t, laps, uint32(10), "the send ring wrapped")
		})
	}
}

// TestReplyPath answers a datagram through ReplyRemote: by LID on
// InfiniBand, from the GRH when the sender used one (an address handle
// with a GRH, or RoCE).
func TestReplyPath(t *testing.T) {
	for _, c := range []struct {
		name string
		link ctx.LinkLayer
		grh  bool
	}{
		{"InfiniBand by LID", ctx.LinkLayerInfiniBand, false},
		{"InfiniBand with a GRH", ctx.LinkLayerInfiniBand, true},
		{"RoCE", ctx.LinkLayerEthernet, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			x := newPeers(t, sim.Options{LinkLayer: c.link}, ud.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64, QKey: 7})
			e := x.e
			ep := x.qp[1].Endpoint()
			var to *ud.Remote
			var err error
			if c.grh {
				// On InfiniBand a GRH goes with the port's LID, from an
				// address handle of the caller's.
				ah, err := e.PD[0].CreateAddressHandle(ctx.AddressAttr{Port: 1, DLID: ep.LID, GlobalRoute: true, DGID: ep.GID, HopLimit: 64})
				require.NoError(t, err)
				to, err = x.qp[0].RemoteVia(ah, ep.QPN, ep.QKey)
				require.NoError(t, err)
			} else {
				to, err = x.qp[0].NewRemote(ep)
				require.NoError(t, err)
			}
			require.Equal(t, x.qp[1].QPN(), to.QPN())
			require.Equal(t, uint32(7), to.QKey())
			require.NoError(t, x.qp[1].PostRecv(1, e.Addr(1, 0), 256, e.LKey(1)))
			require.NoError(t, x.qp[0].PostRecv(2, e.Addr(0, 4096), 256, e.LKey(0)))
			s, err := x.qp[0].Post(1, wqebuilder.Signaled, to)
			require.NoError(t, err)
			require.NoError(t, s.Send().Inline([]byte("question")).FinishBlueFlame())
			e.One(x.p[0])
			in := e.One(x.p[1])
			require.Equal(t, transport.MatchOK, in.Match)
			require.Equal(t, c.grh || c.link == ctx.LinkLayerEthernet, in.GRH)
			if !in.GRH {
				require.Equal(t, x.qp[0].Endpoint().LID, in.SLID)
				_, err := x.qp[1].ReplyRemote(&in, nil)
				require.NoError(t, err, "no GRH needed without one")
			} else {
				_, err := x.qp[1].ReplyRemote(&in, nil)
				require.ErrorIs(t, err, ctx.ErrInvalidArgument, "a GRH completion needs the GRH bytes")
				from := x.qp[0].Endpoint().GID
				if c.link == ctx.LinkLayerEthernet {
					// The chosen GID is RoCE v2 IPv4-mapped: the IPv4
					// header fills the last 20 bytes, source address at 12.
					require.Equal(t, from[12:], e.Mem(1, 20+12, 4), "the IPv4 header names the sender's address")
				} else {
					var sgid ctx.GID
					copy(sgid[:], e.Mem(1, 8, 16))
					require.Equal(t, from, sgid, "the GRH names the sender's GID")
				}
			}
			back, err := x.qp[1].ReplyRemote(&in, e.Mem(1, 0, ud.GRHSize))
			require.NoError(t, err)
			require.Equal(t, x.qp[0].QPN(), back.QPN())
			s, err = x.qp[1].Post(2, wqebuilder.Signaled, back)
			require.NoError(t, err)
			require.NoError(t, s.SendImm(99).Inline([]byte("answer")).FinishBlueFlame())
			e.One(x.p[1])
			got := e.One(x.p[0])
			require.Equal(t, transport.MatchOK, got.Match)
			require.Equal(t, uint32(99), got.Immediate)
			require.Equal(t, "answer", string(e.Mem(0, 4096+ud.GRHSize, 6)))
			require.NoError(t, back.Close())
			require.NoError(t, back.Close())

			// ReplyRemote wants a successful receive completion.
			send := e.Drain(x.p[1])
			require.Empty(t, send)
			_, err = x.qp[1].ReplyRemote(&transport.Completion{Opcode: prm.CQEReq}, nil)
			require.Error(t, err)
			_, err = x.qp[1].ReplyRemote(nil, nil)
			require.Error(t, err)
		})
	}
}

func TestManyDestinations(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq, p := newPoller(e, 0, 256)
	rcq, rp := newPoller(e, 1, 256)
	sender, err := ud.New(e.PD[0], cq, ud.Config{SendDepth: 64, MaxInline: 64, QKey: 1})
	require.NoError(t, err)
	require.NoError(t, p.Add(sender))
	var remotes []*ud.Remote
	var qps []*ud.QP
	for i := range 5 {
		q, err := ud.New(e.PD[1], rcq, ud.Config{SendDepth: 1, RecvDepth: 4, QKey: uint32(100 + i)})
		require.NoError(t, err)
		require.NoError(t, rp.Add(q))
		require.NoError(t, q.PostRecv(uint64(i), e.Addr(1, 1024*i), 1024, e.LKey(1)))
		r, err := sender.NewRemote(q.Endpoint())
		require.NoError(t, err)
		remotes, qps = append(remotes, r), append(qps, q)
	}
	for i, r := range remotes {
		s, err := sender.Post(uint64(i), 0, r)
		require.NoError(t, err)
		require.NoError(t, s.SendImm(uint32(i)).Inline([]byte(fmt.Sprintf("to %d", i))).Finish())
	}
	sender.RingDoorbell()
	got := e.Drain(rp)
	require.Len(t, got, 5)
	for _, c := range got {
		require.Equal(t, transport.MatchOK, c.Match)
		require.Equal(t, qps[c.Immediate].QPN(), c.QPN)
		require.Equal(t, fmt.Sprintf("to %d", c.Immediate), string(e.Mem(1, 1024*int(c.WRID)+ud.GRHSize, 4)))
	}
	require.Empty(t, e.Drain(p), "unsignaled sends complete silently")
}

func TestDatagramLossAndErrors(t *testing.T) {
	x := newPeers(t, sim.Options{}, ud.Config{SendDepth: 16, RecvDepth: 8, MaxInline: 64, MaxSendSGE: 2, QKey: 0x42})
	e := x.e
	ep := x.qp[1].Endpoint()

	// A wrong qkey, or no receive posted: dropped, the sender succeeds.
	wrong := ep
	wrong.QKey = 0x43
	bad, err := x.qp[0].NewRemote(wrong)
	require.NoError(t, err)
	good, err := x.qp[0].NewRemote(ep)
	require.NoError(t, err)
	for _, r := range []*ud.Remote{bad, good} {
		s, err := x.qp[0].Post(1, wqebuilder.Signaled, r)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte("lost")).FinishBlueFlame())
		require.Equal(t, transport.MatchOK, e.One(x.p[0]).Match)
	}
	require.Empty(t, e.Drain(x.p[1]))
	require.Equal(t, uint64(2), e.Fabric.Stats().UDDropped)
	require.Equal(t, transport.StateReady, x.qp[1].State())

	// A receive buffer too small for the GRH and the payload: the receiver
	// fails (and goes to error); the sender does not know.
	require.NoError(t, x.qp[1].PostRecv(5, e.Addr(1, 0), ud.GRHSize+3, e.LKey(1)))
	require.NoError(t, x.qp[1].PostRecv(6, e.Addr(1, 512), 512, e.LKey(1)))
	s, err := x.qp[0].Post(2, wqebuilder.Signaled, good)
	require.NoError(t, err)
	require.NoError(t, s.Send().Inline([]byte("four")).FinishBlueFlame())
	require.Equal(t, transport.MatchOK, e.One(x.p[0]).Match)
	rcv := e.Drain(x.p[1])
	require.Len(t, rcv, 2)
	require.Equal(t, prm.SyndromeLocalLength, rcv[0].Syndrome)
	require.Equal(t, uint64(5), rcv[0].WRID)
	require.True(t, rcv[1].IsFlush())
	require.Equal(t, uint64(6), rcv[1].WRID)
	require.Equal(t, transport.StateError, x.qp[1].State())
	_, err = x.qp[1].Post(1, 0, bad)
	require.ErrorIs(t, err, transport.ErrQPError)

	// A datagram larger than the MTU: LOCAL_LENGTH_ERR at the sender, the
	// WQEs after it flushed.
	mtu := ep.MTU.Bytes()
	big := e.Fill(0, 0, mtu+1, 1)
	s, err = x.qp[0].Post(10, wqebuilder.Signaled, good)
	require.NoError(t, err)
	require.NoError(t, s.Send().SGE(e.Addr(0, 0), uint32(len(big)), e.LKey(0)).Finish())
	for w := uint64(11); w < 14; w++ {
		s, err := x.qp[0].Post(w, wqebuilder.Signaled, good)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte("x")).Finish())
	}
	x.qp[0].RingDoorbell()
	got := e.Drain(x.p[0])
	require.Len(t, got, 4)
	require.Equal(t, prm.SyndromeLocalLength, got[0].Syndrome)
	require.ErrorIs(t, got[0].Err(), monocq.ErrCompletion)
	require.ErrorIs(t, got[0].Err(), monocq.ErrLocalLength)
	require.NotErrorIs(t, got[0].Err(), monocq.ErrFlushed)
	for _, c := range got[1:] {
		require.True(t, c.IsFlush())
		require.ErrorIs(t, c.Err(), monocq.ErrFlushed)
	}
	require.Equal(t, transport.StateError, x.qp[0].State())
}

func TestUDMisuse(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 16)
	srq, err := transport.NewSharedReceiveQueue(e.PD[0], ctx.SRQConfig{Depth: 8})
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		cfg  ud.Config
		pd   *ctx.ProtectionDomain
		cq   *ctx.CompletionQueue
	}{
		{"send depth 0", ud.Config{}, e.PD[0], cq},
		{"nil PD", ud.Config{SendDepth: 1}, nil, cq},
		{"nil CQ", ud.Config{SendDepth: 1}, e.PD[0], nil},
		{"receive depth and SRQ", ud.Config{SendDepth: 1, RecvDepth: 1, SRQ: srq}, e.PD[0], cq},
		{"PSN", ud.Config{SendDepth: 1, PSN: 1 << 24}, e.PD[0], cq},
		{"inline", ud.Config{SendDepth: 1, MaxInline: 1 << 16}, e.PD[0], cq},
	} {
		_, err := ud.New(c.pd, c.cq, c.cfg)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, c.name)
		require.Contains(t, err.Error(), "ud: new QP", c.name)
	}
	q, err := ud.New(e.PD[0], cq, ud.Config{SendDepth: 4, SRQ: srq, QKey: 3})
	require.NoError(t, err)
	ep := q.Endpoint()
	require.Equal(t, endpoint.TransportUD, ep.Transport)
	require.Equal(t, uint32(3), ep.QKey)
	require.Equal(t, uint32(3), q.QKey())
	require.NoError(t, ep.Validate())
	require.ErrorIs(t, q.PostRecv(1, 0, 0, 0), transport.ErrNoReceiveQueue)
	rcEP := ep
	rcEP.Transport, rcEP.QKey = endpoint.TransportRC, 0
	_, err = q.NewRemote(rcEP)
	require.ErrorIs(t, err, transport.ErrTransport)
	r, err := q.NewRemote(ep)
	require.NoError(t, err)
	require.NoError(t, q.Fail())
	_, err = q.Post(1, 0, r)
	require.ErrorIs(t, err, transport.ErrQPError)
	require.NoError(t, q.Close())
	require.NoError(t, q.Close())
	_, err = q.Post(1, 0, r)
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.NoError(t, r.Close())
}

func TestUDAllocatesNothing(t *testing.T) {
	x := newPeers(t, sim.Options{}, ud.Config{SendDepth: 512, RecvDepth: 512, MaxInline: 64, QKey: 1})
	e := x.e
	const runs = 200
	remote, err := x.qp[0].NewRemote(x.qp[1].Endpoint())
	require.NoError(t, err)
	allocs := testing.AllocsPerRun(runs, func() {
		if err := x.qp[1].PostRecv(1, e.Addr(1, 0), 1024, e.LKey(1)); err != nil {
			panic(err)
		}
		s, _ := x.qp[0].Post(2, wqebuilder.Signaled, remote)
		if err := s.SendImm(5).Inline([]byte("datagram")).FinishBlueFlame(); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs, "post")
	e.Run()
	n := 0
	for _, p := range x.p {
		allocs = testing.AllocsPerRun(runs, func() {
			n += p.Poll(1, func(c *transport.Completion) {
				if c.Match != transport.MatchOK {
					panic(c.Err())
				}
			})
		})
		require.Zero(t, allocs, "poll")
	}
	require.Equal(t, 2*(runs+1), n)
}

// ipv4Header builds a 20-byte IPv4 header (no options) from src to dst with
// its checksum, as a RoCE v2 device leaves it in bytes 20..40 of the GRH
// area.
func ipv4Header(tos, ttl uint8, src, dst [4]byte) []byte {
	h := make([]byte, 20)
	h[0], h[1] = 0x45, tos
	binary.BigEndian.PutUint16(h[2:], 20+8+12+64) // total length: IP, UDP, BTH, payload
	h[8], h[9] = ttl, 17                          // UDP
	copy(h[12:16], src[:])
	copy(h[16:20], dst[:])
	var sum uint32
	for i := 0; i < 20; i += 2 {
		sum += uint32(h[i])<<8 | uint32(h[i+1])
	}
	for sum > 0xffff {
		sum = sum&0xffff + sum>>16
	}
	binary.BigEndian.PutUint16(h[10:], ^uint16(sum))
	return h
}

// TestReplyRoCEv2Forms answers a RoCE datagram whose GRH area the test
// writes by hand in both forms a RoCE v2 device uses: the IPv6 header in
// all 40 bytes, and the IPv4 header in the last 20 (the first 20 left
// undefined; here they even look like an IPv6 header naming a stranger).
// The reply must reach the sender either way.
func TestReplyRoCEv2Forms(t *testing.T) {
	for _, form := range []string{"IPv6", "IPv4"} {
		t.Run(form, func(t *testing.T) {
			gidIndex := uint8(1) // RoCE v2, link-local GID
			if form == "IPv4" {
				gidIndex = 3 // RoCE v2, IPv4-mapped GID
			}
			x := newPeers(t, sim.Options{LinkLayer: ctx.LinkLayerEthernet},
				ud.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64, QKey: 7, GID: ctx.GIDIndex(gidIndex)})
			e := x.e
			gids0, err := e.Ctx[0].QueryGIDs(1)
			require.NoError(t, err)
			gids1, err := e.Ctx[1].QueryGIDs(1)
			require.NoError(t, err)
			sender, receiver := gids0[gidIndex].GID, gids1[gidIndex].GID
			require.Equal(t, ctx.GIDTypeRoCEv2, gids0[gidIndex].Type)

			to, err := x.qp[0].NewRemote(x.qp[1].Endpoint())
			require.NoError(t, err)
			require.NoError(t, x.qp[1].PostRecv(1, e.Addr(1, 0), 256, e.LKey(1)))
			require.NoError(t, x.qp[0].PostRecv(2, e.Addr(0, 4096), 256, e.LKey(0)))
			s, err := x.qp[0].Post(1, wqebuilder.Signaled, to)
			require.NoError(t, err)
			require.NoError(t, s.Send().Inline([]byte("question")).FinishBlueFlame())
			e.One(x.p[0])
			in := e.One(x.p[1])
			require.Equal(t, transport.MatchOK, in.Match)
			require.True(t, in.GRH)

			grh := make([]byte, ud.GRHSize)
			if form == "IPv6" {
				// Version 6, traffic class 0x28, flow label 0x12345,
				// next header UDP, hop limit 64.
				binary.BigEndian.PutUint32(grh[0:], 6<<28|0x28<<20|0x12345)
				grh[6], grh[7] = 17, 64
				copy(grh[8:24], sender[:])
				copy(grh[24:40], receiver[:])
			} else {
				require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff}, sender[:12], "an IPv4-mapped GID")
				// The undefined first half looks like an IPv6 header whose
				// source (bytes 8..24) is nobody on the fabric.
				grh[0] = 6 << 4
				for i := 8; i < 20; i++ {
					grh[i] = 0xee
				}
				copy(grh[20:], ipv4Header(0x28, 64, [4]byte(sender[12:16]), [4]byte(receiver[12:16])))
			}
			copy(e.Mem(1, 0, ud.GRHSize), grh)

			back, err := x.qp[1].ReplyRemote(&in, e.Mem(1, 0, ud.GRHSize))
			require.NoError(t, err)
			require.Equal(t, x.qp[0].QPN(), back.QPN())
			s, err = x.qp[1].Post(2, wqebuilder.Signaled, back)
			require.NoError(t, err)
			require.NoError(t, s.SendImm(99).Inline([]byte("answer")).FinishBlueFlame())
			require.Equal(t, transport.MatchOK, e.One(x.p[1]).Match)
			got := e.One(x.p[0])
			require.Equal(t, transport.MatchOK, got.Match)
			require.Equal(t, uint32(99), got.Immediate)
			require.Equal(t, "answer", string(e.Mem(0, 4096+ud.GRHSize, 6)))
			// The reply's own header names the sender as destination: the
			// GID in the IPv6 form, the IPv4 address in bytes 36..40 of the
			// IPv4 form.
			if form == "IPv6" {
				require.Equal(t, sender[:], e.Mem(0, 4096+24, 16))
			} else {
				require.Equal(t, sender[12:], e.Mem(0, 4096+36, 4))
			}
			require.NoError(t, back.Close())

			// Neither form: refused, nothing created.
			clear(e.Mem(1, 0, ud.GRHSize))
			_, err = x.qp[1].ReplyRemote(&in, e.Mem(1, 0, ud.GRHSize))
			require.ErrorIs(t, err, transport.ErrBadGRH)
		})
	}
}
