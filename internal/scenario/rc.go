package scenario

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// sizes are the payload sizes the RC scenarios move through scatter/gather
// lists: the edges of a segment, of a WQEBB, of a page, up to 64 KiB.
var sizes = []int{1, 15, 16, 63, 64, 65, 4095, 4096 + 17, 65536}

// split cuts n bytes into at most k adjacent pieces, none empty when n >= k.
func split(n, k int) []int {
	k = max(min(k, n), 1)
	out := make([]int, 0, k)
	for i := range k {
		piece := n / k
		if i < n%k {
			piece++
		}
		out = append(out, piece)
	}
	return out
}

// sgeWrite posts one RDMA_WRITE (with immediate when imm is non-nil) of the
// n bytes at srcOff of side 0 to dstOff of side 1 as up to maxSGE data
// segments.
func sgeWrite(e *env, qp *rc.QP, wrid uint64, srcOff, dstOff, n, maxSGE int, imm *uint32) error {
	s, err := qp.Post(wrid, wqebuilder.Signaled)
	if err != nil {
		return err
	}
	var d wqebuilder.DataStage
	if imm != nil {
		d = s.RdmaWriteImm(e.addr(1, dstOff), e.rkey(1), *imm)
	} else {
		d = s.RdmaWrite(e.addr(1, dstOff), e.rkey(1))
	}
	off := srcOff
	for _, piece := range split(n, maxSGE) {
		d = d.SGE(e.addr(0, off), uint32(piece), e.lkey(0))
		off += piece
	}
	return d.FinishBlueFlame()
}

// requireSend checks a send completion: successful, for wrid, of the given
// WQE opcode.
func requireSend(c transport.Completion, wrid uint64, op prm.Opcode) error {
	if err := c.Err(); err != nil {
		return err
	}
	return firstErr(
		check("send completion opcode", c.Opcode, prm.CQEReq),
		check("send completion wrid", c.WRID, wrid),
		check("send completion WQE opcode", c.SendOpcode, op),
	)
}

// RCWrite moves payloads of 1 byte to 64 KiB with RDMA_WRITE from one RC
// queue pair's memory to its peer's, through scatter/gather lists and
// inline, then a stream of 256 mostly unsignaled writes that goes round the
// send ring several times; every destination is checked byte for byte with
// its surroundings untouched.
func RCWrite(c *ctx.Context, o Options) error {
	return run("RCWrite", c, o, func(e *env) error {
		a, _, err := e.rcPair(e.rcConfig(0), e.rcConfig(0))
		if err != nil {
			return err
		}
		lim := a.Limits()
		wrid := uint64(0)
		for k, n := range sizes {
			wrid++
			want := e.fill(0, 0, n, uint64(k))
			dst := 4096 + k%7
			e.poisonAt(1, dst, n)
			if err := sgeWrite(e, a, wrid, 0, dst, n, int(lim.MaxSendSGE), nil); err != nil {
				return fmt.Errorf("post %d bytes: %w", n, err)
			}
			cs, err := e.wait(0, 1)
			if err != nil {
				return err
			}
			if err := firstErr(requireSend(cs[0], wrid, prm.OpRdmaWrite), e.expect(1, dst, want, fmt.Sprintf("RDMA_WRITE of %d bytes in %d SGEs", n, len(split(n, int(lim.MaxSendSGE)))))); err != nil {
				return err
			}
		}
		// Inline payloads, up to the queue pair's max inline.
		for k, n := range []int{1, 12, 13, 44, 45, int(lim.MaxInline)} {
			if n == 0 || n > int(lim.MaxInline) {
				continue
			}
			wrid++
			want := pattern(n, uint64(100+k))
			dst := 256 + k
			e.poisonAt(1, dst, n)
			s, err := a.Post(wrid, wqebuilder.Signaled)
			if err != nil {
				return err
			}
			if err := s.RdmaWrite(e.addr(1, dst), e.rkey(1)).Inline(want).FinishBlueFlame(); err != nil {
				return fmt.Errorf("post inline %d bytes: %w", n, err)
			}
			cs, err := e.wait(0, 1)
			if err != nil {
				return err
			}
			if err := firstErr(requireSend(cs[0], wrid, prm.OpRdmaWrite), e.expect(1, dst, want, fmt.Sprintf("inline RDMA_WRITE of %d bytes", n))); err != nil {
				return err
			}
		}
		return writeStream(e, a, &wrid)
	})
}

// writeStream posts writes of 100 bytes to consecutive destinations, enough
// to go round the send ring twice, in batches of 16 behind one doorbell,
// only the last of each batch signaled, and checks every destination.
func writeStream(e *env, a *rc.QP, wrid *uint64) error {
	const batch, n, most = 16, 100, 2048
	const srcBase, dstBase = 128 << 10, 384 << 10
	ring := int(a.Limits().SendWQEBBs)
	count := min((2*ring+batch+batch-1)/batch*batch, most)
	want := e.fill(0, srcBase, count*n, 42)
	e.poisonAt(1, dstBase, count*n)
	for first := 0; first < count; first += batch {
		for k := first; k < first+batch; k++ {
			*wrid++
			flags := wqebuilder.Flags(0)
			if k == first+batch-1 {
				flags = wqebuilder.Signaled
			}
			s, err := a.Post(*wrid, flags)
			if err != nil {
				return err
			}
			if err := s.RdmaWrite(e.addr(1, dstBase+k*n), e.rkey(1)).SGE(e.addr(0, srcBase+k*n), n, e.lkey(0)).Finish(); err != nil {
				return fmt.Errorf("stream write %d: %w", k, err)
			}
		}
		a.RingDoorbell()
		cs, err := e.wait(0, 1)
		if err != nil {
			return err
		}
		if err := requireSend(cs[0], *wrid, prm.OpRdmaWrite); err != nil {
			return fmt.Errorf("stream batch at %d: %w", first, err)
		}
	}
	if out := a.SendQueue().Outstanding(); out != 0 {
		return fmt.Errorf("stream: %d WQEBBs still outstanding after the last completion", out)
	}
	if laps := int(a.SendQueue().ProducerIndex()) / ring; laps < 2 && count < most {
		return fmt.Errorf("stream: the send ring of %d WQEBBs went round only %d times", ring, laps)
	}
	return e.expect(1, dstBase, want, fmt.Sprintf("stream of %d RDMA_WRITEs", count))
}

// RCWriteImm sends RDMA_WRITE with immediate of 0 bytes, a few bytes inline
// and 4 KiB through a scatter/gather list; each consumes a receive posted
// without buffers at the peer, whose completion carries the immediate and
// the byte count, and the data is checked byte for byte.
func RCWriteImm(c *ctx.Context, o Options) error {
	return run("RCWriteImm", c, o, func(e *env) error {
		a, b, err := e.rcPair(e.rcConfig(0), e.rcConfig(16))
		if err != nil {
			return err
		}
		for k, n := range []int{0, 5, 4096} {
			wrid := uint64(10 + k)
			imm := uint32(0xdead0000 + k)
			dst := 1024 * (k + 1)
			if err := b.PostRecv(uint64(100+k), 0, 0, 0); err != nil {
				return err
			}
			var want []byte
			e.poisonAt(1, dst, n)
			if n == 5 {
				want = []byte("hello")
				s, err := a.Post(wrid, wqebuilder.Signaled)
				if err != nil {
					return err
				}
				if err := s.RdmaWriteImm(e.addr(1, dst), e.rkey(1), imm).Inline(want).FinishBlueFlame(); err != nil {
					return err
				}
			} else {
				want = e.fill(0, 0, n, uint64(k))
				if err := sgeWrite(e, a, wrid, 0, dst, n, 2, &imm); err != nil {
					return err
				}
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
				requireSend(sent[0], wrid, prm.OpRdmaWriteImm),
				check("receive opcode", r.Opcode, prm.CQERespWrImm),
				check("receive wrid", r.WRID, uint64(100+k)),
				check("immediate", r.Immediate, imm),
				check("byte count", r.ByteCount, uint32(n)),
				check("receive QPN", r.QPN, b.QPN()),
				e.expect(1, dst, want, fmt.Sprintf("RDMA_WRITE_IMM of %d bytes", n)),
			); err != nil {
				return err
			}
		}
		return e.quiet(1)
	})
}

// RCRead reads payloads of 1 byte to 64 KiB from the peer's memory with
// RDMA_READ into up to four local scatter entries and checks them byte for
// byte.
func RCRead(c *ctx.Context, o Options) error {
	return run("RCRead", c, o, func(e *env) error {
		a, _, err := e.rcPair(e.rcConfig(0), e.rcConfig(0))
		if err != nil {
			return err
		}
		maxSGE := int(a.Limits().MaxSendSGE)
		for k, n := range sizes {
			wrid := uint64(k + 1)
			want := e.fill(1, 8192+k, n, uint64(1000+k))
			dst := 128<<10 + k
			e.poisonAt(0, dst, n)
			s, err := a.Post(wrid, wqebuilder.Signaled)
			if err != nil {
				return err
			}
			st := s.RdmaRead(e.addr(1, 8192+k), e.rkey(1))
			off := dst
			for _, piece := range split(n, maxSGE) {
				st = st.SGE(e.addr(0, off), uint32(piece), e.lkey(0))
				off += piece
			}
			if err := st.FinishBlueFlame(); err != nil {
				return err
			}
			cs, err := e.wait(0, 1)
			if err != nil {
				return err
			}
			if err := firstErr(
				requireSend(cs[0], wrid, prm.OpRdmaRead),
				check("RDMA_READ byte count", cs[0].ByteCount, uint32(n)),
				e.expect(0, dst, want, fmt.Sprintf("RDMA_READ of %d bytes", n)),
			); err != nil {
				return err
			}
		}
		return nil
	})
}

// RCAtomics runs 8-byte fetch-and-add and compare-and-swap (a match and a
// miss) on the peer's memory, then ten fetch-and-adds in a row of which
// only the last is signaled, checking every returned old value and the
// final remote value. It decides the byte order of 8-byte atomics: the
// remote word is a uint64 in host byte order and so is each old value, as
// a device keeps them in the mode mlx5_core sets (the only one in which
// mlx5_ib reports IBV_ATOMIC_HCA). The values have eight distinct bytes
// and the additions carry from one byte into the next, so on a
// little-endian host a device that treated the word as big-endian would
// leave a different remote value after the first fetch-and-add, and
// return different old values after it.
func RCAtomics(c *ctx.Context, o Options) error {
	return run("RCAtomics", c, o, func(e *env) error {
		if !e.dev.AtomicHCA {
			return fmt.Errorf("%s has no 64-bit atomics executed by the HCA: %w", e.c.DeviceName(), ErrSkip)
		}
		a, _, err := e.rcPair(e.rcConfig(0), e.rcConfig(0))
		if err != nil {
			return err
		}
		const target, results = 512, 1024
		e.store64(1, target, 0x0102030405060708)
		type op struct {
			cs               bool
			compare, operand uint64
			old, after       uint64
		}
		for k, x := range []op{
			// 0x08 + 0xf9 carries into the second lowest byte.
			{cs: false, operand: 0xf9, old: 0x0102030405060708, after: 0x0102030405060801},
			{cs: true, compare: 0x0102030405060801, operand: 0x1122334455667788, old: 0x0102030405060801, after: 0x1122334455667788},
			// The compare is the word with its bytes reversed: a miss,
			// where a device reading the word big-endian would swap.
			{cs: true, compare: 0x8877665544332211, operand: 1, old: 0x1122334455667788, after: 0x1122334455667788},
			{cs: false, operand: 1<<63 + 1, old: 0x1122334455667788, after: 0x9122334455667789},
		} {
			wrid := uint64(k + 1)
			e.store64(0, results+8*k, 0xffffffffffffffff)
			s, err := a.Post(wrid, wqebuilder.Signaled)
			if err != nil {
				return err
			}
			var st wqebuilder.AtomicStage
			opc := prm.OpAtomicFA
			if x.cs {
				st, opc = s.AtomicCS(e.addr(1, target), e.rkey(1), x.compare, x.operand), prm.OpAtomicCS
			} else {
				st = s.AtomicFA(e.addr(1, target), e.rkey(1), x.operand)
			}
			if err := st.Result(e.addr(0, results+8*k), e.lkey(0)).FinishBlueFlame(); err != nil {
				return err
			}
			cs, err := e.wait(0, 1)
			if err != nil {
				return err
			}
			if err := firstErr(
				requireSend(cs[0], wrid, opc),
				check(fmt.Sprintf("atomic %d: old value returned", k), e.load64(0, results+8*k), x.old),
				check(fmt.Sprintf("atomic %d: remote value after", k), e.load64(1, target), x.after),
			); err != nil {
				return err
			}
		}
		// Ten fetch-and-adds in a row, one doorbell, the last signaled;
		// the sum (55) carries out of the lowest byte.
		e.store64(1, target, 0x01020304050607f0)
		for k := range 10 {
			flags := wqebuilder.Flags(0)
			if k == 9 {
				flags = wqebuilder.Signaled
			}
			s, err := a.Post(uint64(100+k), flags)
			if err != nil {
				return err
			}
			if err := s.AtomicFA(e.addr(1, target), e.rkey(1), uint64(k+1)).Result(e.addr(0, results+8*k), e.lkey(0)).Finish(); err != nil {
				return err
			}
		}
		a.RingDoorbell()
		cs, err := e.wait(0, 1)
		if err != nil {
			return err
		}
		if err := requireSend(cs[0], 109, prm.OpAtomicFA); err != nil {
			return err
		}
		sum := uint64(0x01020304050607f0)
		for k := range 10 {
			if err := check(fmt.Sprintf("fetch-and-add %d of 10: old value", k), e.load64(0, results+8*k), sum); err != nil {
				return err
			}
			sum += uint64(k + 1)
		}
		return check("remote value after ten fetch-and-adds", e.load64(1, target), sum)
	})
}

// RCSendRecv sends messages of 0 bytes to 64 KiB (SEND and SEND with
// immediate, inline and through scatter/gather lists) into receives of one
// to three scatter entries, some far apart, and checks each receive
// completion (opcode, work request, byte count, immediate) and every byte
// in every entry.
func RCSendRecv(c *ctx.Context, o Options) error {
	return run("RCSendRecv", c, o, func(e *env) error {
		a, b, err := e.rcPair(e.rcConfig(0), e.rcConfig(32))
		if err != nil {
			return err
		}
		maxSend := int(a.Limits().MaxSendSGE)
		maxRecv := int(b.Limits().MaxRecvSGE)
		type msg struct {
			n      int
			inline bool
			imm    bool
			pieces int // receive scatter entries
		}
		msgs := []msg{
			{n: 0, pieces: 1},
			{n: 1, inline: true, pieces: 1},
			{n: 40, inline: true, imm: true, pieces: 2},
			{n: 64, pieces: 1, imm: true},
			{n: 4096 + 3, pieces: 3},
			{n: 65536, pieces: 2, imm: true},
		}
		for k, m := range msgs {
			if m.inline && m.n > int(a.Limits().MaxInline) {
				continue
			}
			pieces := split(m.n, min(m.pieces, maxRecv))
			// Receive entries 8 KiB apart, each poisoned around.
			rs := b.BeginRecv(uint64(200 + k))
			offs := make([]int, len(pieces))
			for p, n := range pieces {
				offs[p] = 512<<10 + p*(80<<10) + k
				e.poisonAt(1, offs[p], n)
				rs = rs.SGE(e.addr(1, offs[p]), uint32(n), e.lkey(1))
			}
			if err := rs.FinishDoorbell(); err != nil {
				return err
			}
			wrid := uint64(k + 1)
			imm := uint32(0x1000 + k)
			s, err := a.Post(wrid, wqebuilder.Signaled)
			if err != nil {
				return err
			}
			var d wqebuilder.DataStage
			opc, ropc := prm.OpSend, prm.CQERespSend
			if m.imm {
				d, opc, ropc = s.SendImm(imm), prm.OpSendImm, prm.CQERespSendImm
			} else {
				d = s.Send()
			}
			var want []byte
			if m.inline {
				want = pattern(m.n, uint64(k))
				err = d.Inline(want).FinishBlueFlame()
			} else {
				want = e.fill(0, 0, m.n, uint64(k))
				off := 0
				for _, piece := range split(m.n, maxSend) {
					d = d.SGE(e.addr(0, off), uint32(piece), e.lkey(0))
					off += piece
				}
				err = d.FinishBlueFlame()
			}
			if err != nil {
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
			checks := []error{
				requireSend(sent[0], wrid, opc),
				check("receive opcode", r.Opcode, ropc),
				check("receive wrid", r.WRID, uint64(200+k)),
				check("byte count", r.ByteCount, uint32(m.n)),
			}
			if m.imm {
				checks = append(checks, check("immediate", r.Immediate, imm))
			}
			at := 0
			for p, n := range pieces {
				checks = append(checks, e.expect(1, offs[p], want[at:at+n], fmt.Sprintf("message %d (%d bytes) entry %d", k, m.n, p)))
				at += n
			}
			if err := firstErr(checks...); err != nil {
				return err
			}
		}
		return check("receives outstanding", b.RecvOutstanding(), uint32(0))
	})
}
