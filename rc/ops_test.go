package rc_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

const (
	srcOff = transporttest.SrcOff
	dstOff = transporttest.DstOff
)

var sizes = transporttest.Sizes

// TestSendOpcodes sends every payload size in every payload form with
// SEND, SEND_IMM and SEND_INV and checks the received bytes, the receive
// completion and the send completion.
func TestSendOpcodes(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 4, RecvDepth: 4, MaxSendSGE: 4, MaxRecvSGE: 4, MaxInline: 400})
	e := x.e
	r := rand.New(rand.NewPCG(1, 2))
	wrid := uint64(0)
	for _, op := range []prm.Opcode{prm.OpSend, prm.OpSendImm, prm.OpSendInval} {
		for _, n := range sizes {
			for _, p := range transporttest.Payloads {
				what := fmt.Sprintf("%v %d bytes %v", op, n, p)
				data := e.Fill(0, 1<<20, n, wrid)
				wrid++
				s, err := x.qp[0].Post(wrid, wqebuilder.Signaled)
				require.NoError(t, err)
				imm := uint32(r.Uint32())
				var ds wqebuilder.DataStage
				switch op {
				case prm.OpSend:
					ds = s.Send()
				case prm.OpSendImm:
					ds = s.SendImm(imm)
				default:
					ds = s.SendInv(imm)
				}
				finish, ok := e.AddPayload(x.qp[0].Limits(), ds, data, p, r)
				if !ok {
					wrid--
					continue
				}
				pieces := e.ScatterRecv(1, x.qp[1].BeginRecv, wrid+1000000, 0, n, int(x.qp[1].Limits().MaxRecvSGE), r)
				require.NoError(t, finish(), what)
				c := e.One(x.p[0])
				require.Equal(t, transport.MatchOK, c.Match, "%s: %v", what, c.Err())
				require.Equal(t, wrid, c.WRID, what)
				require.Equal(t, op, c.SendOpcode, what)
				rcv := e.One(x.p[1])
				require.Equal(t, transport.MatchOK, rcv.Match, "%s: %v", what, rcv.Err())
				require.Equal(t, wrid+1000000, rcv.WRID, what)
				require.Equal(t, uint32(n), rcv.ByteCount, what)
				switch op {
				case prm.OpSend:
					require.Equal(t, prm.CQERespSend, rcv.Opcode, what)
				case prm.OpSendImm:
					require.Equal(t, prm.CQERespSendImm, rcv.Opcode, what)
					require.Equal(t, imm, rcv.Immediate, what)
				default:
					require.Equal(t, prm.CQERespSendInv, rcv.Opcode, what)
					require.Equal(t, imm, rcv.Immediate, what)
				}
				e.ExpectPieces(1, pieces, 0, data, what)
			}
		}
	}
	require.Greater(t, wrid, uint64(250))
	laps := transporttest.Laps(x.qp[0].SendQueue().ProducerIndex(), x.qp[0].Limits().SendWQEBBs)
	require.Greater(t, laps, uint32(10), "the send ring wrapped")
}

// TestWriteAndRead writes every size in every form with RDMA_WRITE and
// RDMA_WRITE_IMM, then reads it back with RDMA_READ into a scatter list.
func TestWriteAndRead(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 4, RecvDepth: 4, MaxSendSGE: 4, MaxRecvSGE: 1, MaxInline: 256})
	e := x.e
	r := rand.New(rand.NewPCG(3, 4))
	wrid := uint64(0)
	for _, imm := range []bool{false, true} {
		for _, n := range sizes {
			for _, p := range transporttest.Payloads {
				what := fmt.Sprintf("write imm=%v %d bytes %v", imm, n, p)
				data := e.Fill(0, 1<<20, n, wrid+77)
				wrid++
				dst := dstOff + int(r.IntN(512))
				e.Poison(1, dst, n)
				s, err := x.qp[0].Post(wrid, wqebuilder.Signaled)
				require.NoError(t, err)
				var ds wqebuilder.DataStage
				v := r.Uint32()
				if imm {
					require.NoError(t, x.qp[1].PostRecv(wrid+500, 0, 0, 0))
					ds = s.RdmaWriteImm(e.Addr(1, dst), e.RKey(1), v)
				} else {
					ds = s.RdmaWrite(e.Addr(1, dst), e.RKey(1))
				}
				finish, ok := e.AddPayload(x.qp[0].Limits(), ds, data, p, r)
				if !ok {
					if imm {
						// Take the receive back with a zero-byte write.
						s, err := x.qp[0].Post(wrid, 0)
						require.NoError(t, err)
						require.NoError(t, s.RdmaWriteImm(e.Addr(1, dst), e.RKey(1), v).FinishBlueFlame())
						require.Equal(t, prm.CQERespWrImm, e.One(x.p[1]).Opcode)
					}
					continue
				}
				require.NoError(t, finish(), what)
				c := e.One(x.p[0])
				require.Equal(t, transport.MatchOK, c.Match, "%s: %v", what, c.Err())
				require.Equal(t, wrid, c.WRID)
				if imm {
					rcv := e.One(x.p[1])
					require.Equal(t, prm.CQERespWrImm, rcv.Opcode, what)
					require.Equal(t, v, rcv.Immediate, what)
					require.Equal(t, uint32(n), rcv.ByteCount, what)
					require.Equal(t, wrid+500, rcv.WRID, what)
				}
				e.Expect(1, dst, data, what)

				// Read it back into up to four pieces.
				wrid++
				rs, err := x.qp[0].Post(wrid, wqebuilder.Signaled)
				require.NoError(t, err)
				sc := rs.RdmaRead(e.Addr(1, dst), e.RKey(1))
				off := dstOff
				var pieces []transporttest.Piece
				for _, k := range transporttest.Split(n, 4, r) {
					e.Poison(0, off, k)
					sc = sc.SGE(e.Addr(0, off), uint32(k), e.LKey(0))
					pieces = append(pieces, transporttest.Piece{Off: off, N: k})
					off += k + 2*transporttest.Guard
				}
				require.NoError(t, sc.FinishBlueFlame())
				c = e.One(x.p[0])
				require.Equal(t, transport.MatchOK, c.Match, "read %s: %v", what, c.Err())
				require.Equal(t, prm.OpRdmaRead, c.SendOpcode)
				require.Equal(t, uint32(n), c.ByteCount, what)
				e.ExpectPieces(0, pieces, 0, data, "read back "+what)
			}
		}
	}
	laps := transporttest.Laps(x.qp[0].SendQueue().ProducerIndex(), x.qp[0].Limits().SendWQEBBs)
	require.Greater(t, laps, uint32(10), "the send ring wrapped")
}

// TestAtomics runs every atomic against a reference model, on aligned
// targets across the buffer.
func TestAtomics(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 8, RecvDepth: 1})
	e := x.e
	r := rand.New(rand.NewPCG(5, 6))
	type kind struct {
		name   string
		masked bool
		cs     bool
		size   int
	}
	kinds := []kind{
		{"ATOMIC_CS", false, true, 8}, {"ATOMIC_FA", false, false, 8},
		{"MASKED_CS32", true, true, 4}, {"MASKED_FA32", true, false, 4},
		{"MASKED_CS64", true, true, 8}, {"MASKED_FA64", true, false, 8},
	}
	for i := range 600 {
		k := kinds[i%len(kinds)]
		target := dstOff + 8*r.IntN(4096)
		result := dstOff + 8*r.IntN(4096)
		old := r.Uint64()
		if k.size == 4 {
			old &= 0xffffffff
		}
		e.Store(1, target, k.size, old)
		a := transporttest.Atomic{Masked: k.masked, CS: k.cs, Size: k.size, Swap: r.Uint64(), Compare: r.Uint64(),
			CmpMask: r.Uint64(), SwpMask: r.Uint64()}
		if i%3 == 0 {
			a.Compare = old // a compare that matches
		}
		if k.size == 4 {
			a.Swap &= 0xffffffff
			a.Compare &= 0xffffffff
			a.CmpMask &= 0xffffffff
			a.SwpMask &= 0xffffffff
		}
		want, wantResult := a.Apply(old)
		e.Poison(0, result, k.size)
		s, err := x.qp[0].Post(uint64(i), wqebuilder.Signaled)
		require.NoError(t, err)
		raddr, rkey := e.Addr(1, target), e.RKey(1)
		var as wqebuilder.AtomicStage
		switch k.name {
		case "ATOMIC_CS":
			as = s.AtomicCS(raddr, rkey, a.Compare, a.Swap)
		case "ATOMIC_FA":
			as = s.AtomicFA(raddr, rkey, a.Swap)
		case "MASKED_CS32":
			as = s.MaskedCS32(raddr, rkey, uint32(a.Compare), uint32(a.Swap), uint32(a.CmpMask), uint32(a.SwpMask))
		case "MASKED_FA32":
			as = s.MaskedFA32(raddr, rkey, uint32(a.Swap), uint32(a.SwpMask))
		case "MASKED_CS64":
			as = s.MaskedCS64(raddr, rkey, a.Compare, a.Swap, a.CmpMask, a.SwpMask)
		default:
			as = s.MaskedFA64(raddr, rkey, a.Swap, a.SwpMask)
		}
		require.NoError(t, as.Result(e.Addr(0, result), e.LKey(0)).FinishBlueFlame())
		c := e.One(x.p[0])
		require.Equal(t, transport.MatchOK, c.Match, "%s: %v", k.name, c.Err())
		require.Equal(t, uint64(i), c.WRID)
		require.Equal(t, want, e.Load(1, target, k.size), "%s new value (old %#x)", k.name, old)
		require.Equal(t, wantResult, e.Load(0, result, k.size), "%s result", k.name)
		e.Expect(0, result, e.Mem(0, result, k.size), k.name+" result bounds")
	}
}
