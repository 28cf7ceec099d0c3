package rc_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// Buffer layout of the data tests (both sides): sources, destinations.
const (
	srcOff = 0
	dstOff = 2 << 20
	gap    = 96 // between the pieces of a scatter/gather list
)

// payload says how a WQE carries its bytes.
type payload int

const (
	inline payload = iota // one inline segment
	sge1                  // one data segment
	sgeN                  // up to 4 data segments
	mixed                 // data segments, then inline data
)

func (p payload) String() string { return [...]string{"inline", "sge1", "sgeN", "mixed"}[p] }

var sizes = []int{0, 1, 3, 12, 16, 17, 31, 32, 33, 48, 60, 64, 65, 100, 128, 255, 256, 300, 444, 512, 1000, 4095, 4096, 4097, 9000, 32768, 65536}

// gatherList writes data at side i in pieces (with gaps between them) and
// returns each piece's address and length.
func gatherList(e *transporttest.Env, i int, data []byte, pieces []int) (addr []uint64, n []uint32) {
	off := srcOff
	pos := 0
	for _, k := range pieces {
		copy(e.Mem(i, off, k), data[pos:pos+k])
		addr = append(addr, e.Addr(i, off))
		n = append(n, uint32(k))
		pos += k
		off += k + gap
	}
	return addr, n
}

// withPayload adds data to a send or write stage the way p says. ok is
// false when the queue cannot carry it that way.
func withPayload(e *transporttest.Env, qp *rc.QP, s wqebuilder.DataStage, data []byte, p payload, r *rand.Rand) (finish func() error, ok bool) {
	lim := qp.Limits()
	n := len(data)
	switch p {
	case inline:
		if n > int(lim.MaxInline) {
			return nil, false
		}
		return s.Inline(data).FinishBlueFlame, true
	case sge1:
		a, l := gatherList(e, 0, data, []int{n})
		return s.SGE(a[0], l[0], e.LKey(0)).FinishBlueFlame, true
	case sgeN:
		a, l := gatherList(e, 0, data, transporttest.Split(n, int(min(lim.MaxSendSGE, 4)), r))
		for k := range a {
			s = s.SGE(a[k], l[k], e.LKey(0))
		}
		return s.FinishBlueFlame, true
	default:
		tail := min(n/2, int(lim.MaxInline))
		head := n - tail
		if tail == 0 || head == 0 {
			return nil, false
		}
		a, l := gatherList(e, 0, data[:head], transporttest.Split(head, int(min(lim.MaxSendSGE-1, 2)), r))
		for k := range a {
			s = s.SGE(a[k], l[k], e.LKey(0))
		}
		return s.Inline(data[head:]).FinishBlueFlame, true
	}
}

// piece is one buffer of a scatter list.
type piece struct{ off, n int }

// scatterRecv posts a receive of n bytes split in pieces at the peer's
// destination area and returns the pieces, for checking.
func scatterRecv(t *testing.T, e *transporttest.Env, qp *rc.QP, wrid uint64, n int, r *rand.Rand) []piece {
	s := qp.BeginRecv(wrid)
	off := dstOff
	var out []piece
	for _, k := range transporttest.Split(n, int(qp.MaxRecvSGE()), r) {
		e.Poison(1, off, k)
		s = s.SGE(e.Addr(1, off), uint32(k), e.LKey(1))
		out = append(out, piece{off, k})
		off += k + 2*transporttest.Guard
	}
	require.NoError(t, s.FinishDoorbell())
	return out
}

// checkScatter requires the pieces at side i to hold data in order.
func checkScatter(e *transporttest.Env, i int, pieces []piece, data []byte, what string) {
	pos := 0
	for k, p := range pieces {
		e.Expect(i, p.off, data[pos:pos+p.n], fmt.Sprintf("%s piece %d", what, k))
		pos += p.n
	}
}

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
			for _, p := range []payload{inline, sge1, sgeN, mixed} {
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
				finish, ok := withPayload(e, x.qp[0], ds, data, p, r)
				if !ok {
					wrid--
					continue
				}
				pieces := scatterRecv(t, e, x.qp[1], wrid+1000000, n, r)
				require.NoError(t, finish(), what)
				c := e.One(x.p[0])
				require.Equal(t, rc.StatusOK, c.Status, "%s: %v", what, c.Err())
				require.Equal(t, wrid, c.WRID, what)
				require.Equal(t, op, c.SendOpcode, what)
				rcv := e.One(x.p[1])
				require.Equal(t, rc.StatusOK, rcv.Status, "%s: %v", what, rcv.Err())
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
				checkScatter(e, 1, pieces, data, what)
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
			for _, p := range []payload{inline, sge1, sgeN, mixed} {
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
				finish, ok := withPayload(e, x.qp[0], ds, data, p, r)
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
				require.Equal(t, rc.StatusOK, c.Status, "%s: %v", what, c.Err())
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
				var pieces []piece
				for _, k := range transporttest.Split(n, 4, r) {
					e.Poison(0, off, k)
					sc = sc.SGE(e.Addr(0, off), uint32(k), e.LKey(0))
					pieces = append(pieces, piece{off, k})
					off += k + 2*transporttest.Guard
				}
				require.NoError(t, sc.FinishBlueFlame())
				c = e.One(x.p[0])
				require.Equal(t, rc.StatusOK, c.Status, "read %s: %v", what, c.Err())
				require.Equal(t, prm.OpRdmaRead, c.SendOpcode)
				require.Equal(t, uint32(n), c.ByteCount, what)
				checkScatter(e, 0, pieces, data, "read back "+what)
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
		require.Equal(t, rc.StatusOK, c.Status, "%s: %v", k.name, c.Err())
		require.Equal(t, uint64(i), c.WRID)
		require.Equal(t, want, e.Load(1, target, k.size), "%s new value (old %#x)", k.name, old)
		require.Equal(t, wantResult, e.Load(0, result, k.size), "%s result", k.name)
		e.Expect(0, result, e.Mem(0, result, k.size), k.name+" result bounds")
	}
}
