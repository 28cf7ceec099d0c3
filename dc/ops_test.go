package dc_test

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// fixture is one DCI on HCA 0 and three DCTs on HCA 1 sharing an SRQ.
type fixture struct {
	e       *transporttest.Env
	dci     *dc.DCI
	dcts    []*dc.DCT
	remotes []*dc.Remote
	srq     *transport.SharedReceiveQueue
	sp, rp  *transport.Poller
	scq     *ctx.CompletionQueue
	rcq     *ctx.CompletionQueue
}

func newFixture(t *testing.T, cfg dc.DCIConfig, targets int) *fixture {
	e := transporttest.New(t, sim.Options{})
	f := &fixture{e: e}
	f.scq, f.sp = newPoller(e, 0, 1024)
	f.rcq, f.rp = newPoller(e, 1, 1024)
	var err error
	f.dci, err = dc.NewDCI(e.PD[0], f.scq, cfg)
	require.NoError(t, err)
	require.NoError(t, f.sp.Add(f.dci))
	f.srq, err = transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 64, MaxSGE: 4})
	require.NoError(t, err)
	for i := range targets {
		dct, err := dc.NewDCT(e.PD[1], f.rcq, dc.DCTConfig{SRQ: f.srq, Key: 0xabc0 + uint64(i), MinRNRTimer: 1})
		require.NoError(t, err)
		require.NoError(t, f.rp.Add(dct))
		r, err := f.dci.NewRemote(dct.Endpoint())
		require.NoError(t, err)
		f.dcts = append(f.dcts, dct)
		f.remotes = append(f.remotes, r)
	}
	return f
}

func TestEveryOpcodeToManyTargets(t *testing.T) {
	f := newFixture(t, dc.DCIConfig{SendDepth: 4, MaxSendSGE: 4, MaxInline: 300}, 3)
	e := f.e
	r := rand.New(rand.NewPCG(11, 12))
	lim := f.dci.Limits()
	wrid := uint64(0)
	ops := []prm.Opcode{prm.OpSend, prm.OpSendImm, prm.OpSendInval, prm.OpRdmaWrite, prm.OpRdmaWriteImm}
	for _, op := range ops {
		for _, n := range transporttest.Sizes {
			for _, p := range transporttest.Payloads {
				k := int(wrid) % len(f.dcts)
				dct, remote := f.dcts[k], f.remotes[k]
				what := fmt.Sprintf("%v %d bytes %v to DCT %d", op, n, p, k)
				data := e.Fill(0, 1<<20, n, wrid)
				wrid++
				s, err := f.dci.Post(wrid, wqebuilder.Signaled, remote)
				require.NoError(t, err)
				imm := r.Uint32()
				dst := transporttest.DstOff + r.IntN(256)
				var ds wqebuilder.DataStage
				switch op {
				case prm.OpSend:
					ds = s.Send()
				case prm.OpSendImm:
					ds = s.SendImm(imm)
				case prm.OpSendInval:
					ds = s.SendInv(imm)
				case prm.OpRdmaWrite:
					ds = s.RdmaWrite(e.Addr(1, dst), e.RKey(1))
				default:
					ds = s.RdmaWriteImm(e.Addr(1, dst), e.RKey(1), imm)
				}
				finish, ok := e.AddPayload(lim, ds, data, p, r)
				if !ok {
					// Give the slot back with a NOP.
					require.NoError(t, s.Nop().FinishBlueFlame())
					require.Equal(t, transport.MatchOK, e.One(f.sp).Match)
					continue
				}
				var pieces []transporttest.Piece
				switch op {
				case prm.OpRdmaWrite:
					e.Poison(1, dst, n)
				case prm.OpRdmaWriteImm:
					e.Poison(1, dst, n)
					require.NoError(t, f.srq.PostRecv(wrid+5000, 0, 0, 0))
				default:
					pieces = e.ScatterRecv(1, f.srq.BeginRecv, wrid+5000, 0, n, int(f.srq.MaxSGE()), r)
				}
				require.NoError(t, finish(), what)
				c := e.One(f.sp)
				require.Equal(t, transport.MatchOK, c.Match, "%s: %v", what, c.Err())
				require.Equal(t, wrid, c.WRID)
				require.Equal(t, op, c.SendOpcode)
				if op == prm.OpRdmaWrite {
					require.Empty(t, e.Drain(f.rp))
					e.Expect(1, dst, data, what)
					continue
				}
				rcv := e.One(f.rp)
				require.Equal(t, transport.MatchOK, rcv.Match, "%s: %v", what, rcv.Err())
				require.Equal(t, wrid+5000, rcv.WRID, what)
				require.Equal(t, dct.QPN(), rcv.QPN, what)
				require.Same(t, &dct.Queue, rcv.Queue)
				require.Equal(t, f.dci.QPN(), rcv.SourceQPN, what)
				require.Equal(t, uint32(n), rcv.ByteCount, what)
				switch op {
				case prm.OpSend:
					require.Equal(t, prm.CQERespSend, rcv.Opcode)
				case prm.OpSendImm:
					require.Equal(t, prm.CQERespSendImm, rcv.Opcode)
					require.Equal(t, imm, rcv.Immediate)
				case prm.OpSendInval:
					require.Equal(t, prm.CQERespSendInv, rcv.Opcode)
					require.Equal(t, imm, rcv.Immediate)
				default:
					require.Equal(t, prm.CQERespWrImm, rcv.Opcode)
					require.Equal(t, imm, rcv.Immediate)
					e.Expect(1, dst, data, what)
					continue
				}
				e.ExpectPieces(1, pieces, 0, data, what)
			}
		}
	}
	require.Zero(t, f.srq.Outstanding())
	laps := transporttest.Laps(f.dci.SendQueue().ProducerIndex(), lim.SendWQEBBs)
	require.Greater(t, laps, uint32(10), "the send ring wrapped")
}

func TestReadAndAtomicsToManyTargets(t *testing.T) {
	f := newFixture(t, dc.DCIConfig{SendDepth: 4, MaxSendSGE: 4}, 3)
	e := f.e
	r := rand.New(rand.NewPCG(13, 14))
	for i, n := range transporttest.Sizes {
		k := i % len(f.dcts)
		src := transporttest.DstOff + 8*r.IntN(64)
		data := e.Fill(1, src, n, uint64(i))
		s, err := f.dci.Post(uint64(i), wqebuilder.Signaled, f.remotes[k])
		require.NoError(t, err)
		sc := s.RdmaRead(e.Addr(1, src), e.RKey(1))
		off := transporttest.DstOff
		var pieces []transporttest.Piece
		for _, size := range transporttest.Split(n, 4, r) {
			e.Poison(0, off, size)
			sc = sc.SGE(e.Addr(0, off), uint32(size), e.LKey(0))
			pieces = append(pieces, transporttest.Piece{Off: off, N: size})
			off += size + 2*transporttest.Guard
		}
		require.NoError(t, sc.FinishBlueFlame())
		c := e.One(f.sp)
		require.Equal(t, transport.MatchOK, c.Match, "read %d: %v", n, c.Err())
		require.Equal(t, uint32(n), c.ByteCount)
		e.ExpectPieces(0, pieces, 0, data, fmt.Sprintf("read %d bytes", n))
	}
	for i := range 300 {
		k := i % len(f.dcts)
		a := transporttest.Atomic{Size: 8, CS: i%2 == 0, Masked: i%3 == 0, Swap: r.Uint64(), Compare: r.Uint64(), CmpMask: r.Uint64(), SwpMask: r.Uint64()}
		if a.Masked && i%4 == 0 {
			a.Size = 4
			a.Swap, a.Compare, a.CmpMask, a.SwpMask = a.Swap&0xffffffff, a.Compare&0xffffffff, a.CmpMask&0xffffffff, a.SwpMask&0xffffffff
		}
		target := 8 * r.IntN(1024)
		old := r.Uint64() >> (64 - 8*a.Size)
		if i%5 == 0 {
			a.Compare = old
		}
		e.Store(1, target, a.Size, old)
		want, wantOld := a.Apply(old)
		s, err := f.dci.Post(uint64(i), wqebuilder.Signaled, f.remotes[k])
		require.NoError(t, err)
		raddr, rkey := e.Addr(1, target), e.RKey(1)
		var as wqebuilder.AtomicStage
		switch {
		case !a.Masked && a.CS:
			as = s.AtomicCS(raddr, rkey, a.Compare, a.Swap)
		case !a.Masked:
			as = s.AtomicFA(raddr, rkey, a.Swap)
		case a.Size == 4 && a.CS:
			as = s.MaskedCS32(raddr, rkey, uint32(a.Compare), uint32(a.Swap), uint32(a.CmpMask), uint32(a.SwpMask))
		case a.Size == 4:
			as = s.MaskedFA32(raddr, rkey, uint32(a.Swap), uint32(a.SwpMask))
		case a.CS:
			as = s.MaskedCS64(raddr, rkey, a.Compare, a.Swap, a.CmpMask, a.SwpMask)
		default:
			as = s.MaskedFA64(raddr, rkey, a.Swap, a.SwpMask)
		}
		require.NoError(t, as.Result(e.Addr(0, 64), e.LKey(0)).FinishBlueFlame())
		c := e.One(f.sp)
		require.Equal(t, transport.MatchOK, c.Match, "%+v: %v", a, c.Err())
		require.Equal(t, want, e.Load(1, target, a.Size), "%+v", a)
		require.Equal(t, wantOld, e.Load(0, 64, a.Size), "%+v", a)
	}
}
