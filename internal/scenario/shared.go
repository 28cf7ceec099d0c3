package scenario

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// SRQ sends 24 messages over two RC connections whose receiving queue pairs
// share one SRQ of 8 receives, reposting each receive as it completes, so
// the SRQ's free list goes round three times; every completion must name
// the queue pair the message went to and a receive that was outstanding,
// and the message must be in that receive's buffer.
func SRQ(c *ctx.Context, o Options) error {
	return run("SRQ", c, o, func(e *env) error {
		const depth, messages, slot = 8, 24, 512
		const recvBase = 640 << 10
		srq, err := transport.NewSharedReceiveQueue(e.pd, ctx.SRQConfig{Depth: depth})
		if err != nil {
			return err
		}
		var senders, receivers [2]*rc.QP
		for i := range 2 {
			rcfg := e.rcConfig(0)
			rcfg.SRQ = srq
			if senders[i], receivers[i], err = e.rcPair(e.rcConfig(0), rcfg); err != nil {
				return err
			}
		}
		// buffer[wrid] is the offset of the receive posted with wrid.
		buffer := map[uint64]int{}
		next := uint64(1000)
		post := func(off int) error {
			e.poisonAt(1, off, 256)
			if err := srq.PostRecv(next, e.addr(1, off), 256, e.lkey(1)); err != nil {
				return err
			}
			buffer[next] = off
			next++
			return nil
		}
		for k := range depth {
			if err := post(recvBase + k*slot); err != nil {
				return err
			}
		}
		for m := range messages {
			to := m % 2
			n := 100 + m
			want := e.fill(0, m*slot, n, uint64(m))
			s, err := senders[to].Post(uint64(m), wqebuilder.Signaled)
			if err != nil {
				return err
			}
			if err := s.Send().SGE(e.addr(0, m*slot), uint32(n), e.lkey(0)).FinishBlueFlame(); err != nil {
				return err
			}
			sent, err := e.wait(0, 1)
			if err != nil {
				return err
			}
			got, err := e.waitOK(1, 1)
			if err != nil {
				return err
			}
			r := got[0]
			off, ok := buffer[r.WRID]
			if !ok {
				return fmt.Errorf("message %d: receive completion names wrid %d, which is not outstanding", m, r.WRID)
			}
			delete(buffer, r.WRID)
			if err := firstErr(
				requireSend(sent[0], uint64(m), prm.OpSend),
				check(fmt.Sprintf("message %d: receive QPN", m), r.QPN, receivers[to].QPN()),
				check(fmt.Sprintf("message %d: completion matched to the receiving queue pair", m), r.Queue == &receivers[to].Queue, true),
				check(fmt.Sprintf("message %d: byte count", m), r.ByteCount, uint32(n)),
				e.expect(1, off, want, fmt.Sprintf("message %d through the SRQ", m)),
			); err != nil {
				return err
			}
			if err := post(off); err != nil {
				return err
			}
		}
		return firstErr(
			check("SRQ receives outstanding", srq.Outstanding(), uint32(depth)),
			check("receives left in the table", len(buffer), depth),
		)
	})
}

// DC has one DC initiator reach two DC targets (different DC access keys,
// one SRQ): a SEND to each lands in the SRQ's buffers with the right DCT
// number in the completion, then an RDMA_WRITE of 4 KiB to the targets'
// memory and an RDMA_READ of it back, checked byte for byte.
func DC(c *ctx.Context, o Options) error {
	return run("DC", c, o, func(e *env) error {
		if !e.dev.DC {
			return fmt.Errorf("%s has no DC transport: %w", e.c.DeviceName(), ErrSkip)
		}
		srq, err := transport.NewSharedReceiveQueue(e.pd, ctx.SRQConfig{Depth: 16})
		if err != nil {
			return err
		}
		var dcts [2]*dc.DCT
		var remotes [2]*dc.Remote
		dci, err := dc.NewDCI(e.pd, e.cq[0], dc.DCIConfig{SendDepth: 32, MaxInline: min(64, e.dev.MaxInline), Port: e.port, GID: e.gid})
		if err != nil {
			return err
		}
		if err := e.p[0].Add(dci); err != nil {
			return err
		}
		for i := range 2 {
			if dcts[i], err = dc.NewDCT(e.pd, e.cq[1], dc.DCTConfig{SRQ: srq, Key: 0x5eed0000 + uint64(i), Port: e.port, GID: e.gid}); err != nil {
				return err
			}
			if err := e.p[1].Add(dcts[i]); err != nil {
				return err
			}
			if remotes[i], err = dci.NewRemote(dcts[i].Endpoint()); err != nil {
				return err
			}
		}
		const recvBase = 64 << 10
		for i := range 2 {
			e.poisonAt(1, recvBase+i*1024, 256)
			if err := srq.PostRecv(uint64(300+i), e.addr(1, recvBase+i*1024), 256, e.lkey(1)); err != nil {
				return err
			}
		}
		// One SEND to each target; the SRQ hands out its receives in the
		// order they were posted.
		sentTo := map[uint32][]byte{}
		for i := range 2 {
			payload := []byte(fmt.Sprintf("to DCT %d", i))
			if int(dci.Limits().MaxInline) < len(payload) {
				payload = payload[:dci.Limits().MaxInline]
			}
			sentTo[dcts[i].QPN()] = payload
			s, err := dci.Post(uint64(i+1), wqebuilder.Signaled, remotes[i])
			if err != nil {
				return err
			}
			if err := s.Send().Inline(payload).FinishBlueFlame(); err != nil {
				return err
			}
			sent, err := e.wait(0, 1)
			if err != nil {
				return err
			}
			got, err := e.waitOK(1, 1)
			if err != nil {
				return err
			}
			r := got[0]
			if err := firstErr(
				requireSend(sent[0], uint64(i+1), prm.OpSend),
				check("DC receive opcode", r.Opcode, prm.CQERespSend),
				check("DC receive QPN (the DCT number)", r.QPN, dcts[i].QPN()),
				check("DC receive wrid", r.WRID, uint64(300+i)),
				check("DC receive byte count", r.ByteCount, uint32(len(payload))),
				e.expect(1, recvBase+i*1024, payload, fmt.Sprintf("SEND to DCT %d", i)),
			); err != nil {
				return err
			}
		}
		// RDMA_WRITE through DCT 1, then RDMA_READ back through DCT 0.
		const n, src, dst, back = 4096, 0, 128 << 10, 256 << 10
		want := e.fill(0, src, n, 7)
		e.poisonAt(1, dst, n)
		s, err := dci.Post(10, wqebuilder.Signaled, remotes[1])
		if err != nil {
			return err
		}
		if err := s.RdmaWrite(e.addr(1, dst), e.rkey(1)).SGE(e.addr(0, src), n, e.lkey(0)).FinishBlueFlame(); err != nil {
			return err
		}
		cs, err := e.wait(0, 1)
		if err != nil {
			return err
		}
		if err := firstErr(requireSend(cs[0], 10, prm.OpRdmaWrite), e.expect(1, dst, want, "DC RDMA_WRITE")); err != nil {
			return err
		}
		e.poisonAt(0, back, n)
		s, err = dci.Post(11, wqebuilder.Signaled, remotes[0])
		if err != nil {
			return err
		}
		if err := s.RdmaRead(e.addr(1, dst), e.rkey(1)).SGE(e.addr(0, back), n, e.lkey(0)).FinishBlueFlame(); err != nil {
			return err
		}
		if cs, err = e.wait(0, 1); err != nil {
			return err
		}
		return firstErr(requireSend(cs[0], 11, prm.OpRdmaRead), e.expect(0, back, want, "DC RDMA_READ"), e.quiet(1))
	})
}

// UD sends a datagram with immediate from one UD queue pair to another,
// checks the receive (GRH space, byte count, immediate, source QPN, payload)
// and answers it through the reply path built from the receive completion;
// the reply must arrive at the first queue pair.
func UD(c *ctx.Context, o Options) error {
	return run("UD", c, o, func(e *env) error {
		const qkey = 0x11111111
		cfg := ud.Config{SendDepth: 16, RecvDepth: 16, QKey: qkey, MaxInline: min(64, e.dev.MaxInline), Port: e.port, GID: e.gid}
		var qps [2]*ud.QP
		for i := range 2 {
			qp, err := ud.New(e.pd, e.cq[i], cfg)
			if err != nil {
				return err
			}
			if err := e.p[i].Add(qp); err != nil {
				return err
			}
			qps[i] = qp
		}
		const n, recvOff, replyOff = 200, 8192, 16384
		e.poisonAt(1, recvOff, ud.GRHSize+n)
		e.poisonAt(0, replyOff, ud.GRHSize+n)
		if err := qps[1].PostRecv(1, e.addr(1, recvOff), ud.GRHSize+n, e.lkey(1)); err != nil {
			return err
		}
		if err := qps[0].PostRecv(2, e.addr(0, replyOff), ud.GRHSize+n, e.lkey(0)); err != nil {
			return err
		}
		remote, err := qps[0].NewRemote(qps[1].Endpoint())
		if err != nil {
			return err
		}
		want := e.fill(0, 0, n, 3)
		s, err := qps[0].Post(10, wqebuilder.Signaled, remote)
		if err != nil {
			return err
		}
		if err := s.SendImm(77).SGE(e.addr(0, 0), n, e.lkey(0)).FinishBlueFlame(); err != nil {
			return err
		}
		sent, err := e.wait(0, 1)
		if err != nil {
			return err
		}
		got, err := e.waitOK(1, 1)
		if err != nil {
			return err
		}
		r := got[0]
		if err := firstErr(
			requireSend(sent[0], 10, prm.OpSendImm),
			check("UD receive opcode", r.Opcode, prm.CQERespSendImm),
			check("UD receive wrid", r.WRID, uint64(1)),
			check("UD byte count (GRH space included)", r.ByteCount, uint32(ud.GRHSize+n)),
			check("UD immediate", r.Immediate, uint32(77)),
			check("UD source QPN", r.SourceQPN, qps[0].QPN()),
			check("UD GRH present", r.GRH, e.link == ctx.LinkLayerEthernet),
			check("UD payload", string(e.mem(1, recvOff+ud.GRHSize, n)), string(want)),
		); err != nil {
			return err
		}
		back, err := qps[1].ReplyRemote(&r, e.mem(1, recvOff, ud.GRHSize))
		if err != nil {
			return err
		}
		reply := pattern(min(48, int(qps[1].Limits().MaxInline)), 4)
		if s, err = qps[1].Post(20, wqebuilder.Signaled, back); err != nil {
			return err
		}
		if err := s.Send().Inline(reply).FinishBlueFlame(); err != nil {
			return err
		}
		if sent, err = e.wait(1, 1); err != nil {
			return err
		}
		if got, err = e.waitOK(0, 1); err != nil {
			return err
		}
		r = got[0]
		return firstErr(
			requireSend(sent[0], 20, prm.OpSend),
			check("reply opcode", r.Opcode, prm.CQERespSend),
			check("reply wrid", r.WRID, uint64(2)),
			check("reply byte count", r.ByteCount, uint32(ud.GRHSize+len(reply))),
			check("reply source QPN", r.SourceQPN, qps[1].QPN()),
			check("reply payload", string(e.mem(0, replyOff+ud.GRHSize, len(reply))), string(reply)),
			remote.Close(),
			back.Close(),
		)
	})
}
