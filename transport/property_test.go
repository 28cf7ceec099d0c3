package transport_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// EnvPropertyOps sets the number of operations of TestProperty (default
// 100,000; 20,000 with -short).
const EnvPropertyOps = "MLX5KIT_PROPERTY_OPS"

// Layout of side A (the initiators) and side B (the targets).
const (
	aSrc     = 0       // per-op source slots
	aRead    = 1 << 20 // per-op read destinations
	aResult  = 3 << 20 // per-op atomic results, 8 bytes each
	slotSize = 16 << 10

	bRC     = 0         // RC's target region
	bDC     = 256 << 10 // DC's target region
	region  = 256 << 10
	bRecv   = 1 << 20 // RC receive slots
	bSRQ    = 2 << 20 // SRQ receive slots
	bUD     = 3 << 20 // UD receive slots
	recvCnt = 64      // receive slots per queue

	maxOps   = 48 // operations per batch
	maxSend  = 9000
	udMax    = 4096
	rcRQSize = 128
)

// posted is a send work request the reference model waits to see retired.
type posted struct {
	wrid     uint64
	signaled bool
	op       prm.Opcode
}

// message is what a receive completion must show.
type message struct {
	op   prm.CQEOpcode
	imm  uint32
	data []byte // nil for RDMA_WRITE_IMM: the bytes went to memory
	n    int
	dct  int
}

// initiator is one of side A's queue pairs with its reference state.
type initiator struct {
	name     string
	q        *transport.Queue
	lim      transport.Limits
	fifo     []posted
	nextWRID uint64
	done     int // signaled completions seen
}

// retire applies a send completion to the reference: it must name the
// oldest signaled WQE, and retires every unsignaled one before it.
func (in *initiator) retire(t *testing.T, c *transport.Completion) {
	t.Helper()
	require.Equal(t, transport.MatchOK, c.Match, "%s: %v", in.name, c.Err())
	for len(in.fifo) > 0 {
		w := in.fifo[0]
		in.fifo = in.fifo[1:]
		if w.wrid == c.WRID {
			require.True(t, w.signaled, "%s: completion for unsignaled WQE %d", in.name, w.wrid)
			require.Equal(t, w.op, c.SendOpcode, "%s: WQE %d", in.name, w.wrid)
			in.done++
			return
		}
		require.False(t, w.signaled, "%s: signaled WQE %d retired without its completion (got %d)", in.name, w.wrid, c.WRID)
	}
	require.Failf(t, "unexpected completion", "%s: wrid %d is not outstanding", in.name, c.WRID)
}

func propertyOps(t *testing.T) int {
	if s := os.Getenv(EnvPropertyOps); s != "" {
		n, err := strconv.Atoi(s)
		require.NoError(t, err, EnvPropertyOps)
		return n
	}
	if testing.Short() {
		return 20000
	}
	return 100000
}

// TestProperty runs a random stream of operations across RC, DC and UD
// with mixed signaling and checks every effect against a plain Go model:
// side B's target memory (a mirror updated by every write and atomic in
// post order), what reads and atomics return, every receive (opcode, byte
// count, immediate, sender, bytes), and every send completion (each
// signaled WQE exactly once, in order, retiring the unsignaled ones before
// it). Side A's three queue pairs share one CQ and one Poller; side B's
// receivers (an RC QP, two DCTs on an SRQ, a UD QP) share another.
func TestProperty(t *testing.T) {
	total := propertyOps(t)
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("MLX5KIT_PROPERTY_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseUint(s, 10, 64)
		require.NoError(t, err)
	}
	t.Logf("seed %d (MLX5KIT_PROPERTY_SEED), %d operations (%s)", seed, total, EnvPropertyOps)
	r := rand.New(rand.NewPCG(seed, seed*31+7))
	e := transporttest.New(t, sim.Options{})

	// Side A.
	acq := e.CQ(0, 4096)
	ap, err := transport.NewPoller(acq)
	require.NoError(t, err)
	aRC, err := rc.New(e.PD[0], acq, rc.Config{SendDepth: 64, MaxSendSGE: 4, MaxInline: 200})
	require.NoError(t, err)
	aDCI, err := dc.NewDCI(e.PD[0], acq, dc.DCIConfig{SendDepth: 64, MaxSendSGE: 4, MaxInline: 200})
	require.NoError(t, err)
	aUD, err := ud.New(e.PD[0], acq, ud.Config{SendDepth: 64, MaxSendSGE: 4, MaxInline: 200, QKey: 0x5151})
	require.NoError(t, err)
	for _, q := range []*transport.Queue{&aRC.Queue, &aDCI.Queue, &aUD.Queue} {
		require.NoError(t, ap.Add(q), "one poller for every transport")
	}

	// Side B.
	bcq := e.CQ(1, 4096)
	bp, err := transport.NewPoller(bcq)
	require.NoError(t, err)
	bRCQP, err := rc.New(e.PD[1], bcq, rc.Config{SendDepth: 1, RecvDepth: rcRQSize})
	require.NoError(t, err)
	srq, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: recvCnt})
	require.NoError(t, err)
	var dcts [2]*dc.DCT
	var remotes [2]*dc.Remote
	for k := range dcts {
		dcts[k], err = dc.NewDCT(e.PD[1], bcq, dc.DCTConfig{SRQ: srq, Key: uint64(0x7000 + k)})
		require.NoError(t, err)
		remotes[k], err = aDCI.NewRemote(dcts[k].Endpoint())
		require.NoError(t, err)
	}
	bUDQP, err := ud.New(e.PD[1], bcq, ud.Config{SendDepth: 1, RecvDepth: recvCnt, QKey: 0x5151})
	require.NoError(t, err)
	for _, q := range []*transport.Queue{&bRCQP.Queue, &dcts[0].Queue, &dcts[1].Queue, &bUDQP.Queue} {
		require.NoError(t, bp.Add(q))
	}
	require.NoError(t, aRC.Connect(bRCQP.Endpoint()))
	require.NoError(t, bRCQP.Connect(aRC.Endpoint()))
	udRemote, err := aUD.NewRemote(bUDQP.Endpoint())
	require.NoError(t, err)
	badEP := bUDQP.Endpoint()
	badEP.QKey++
	udWrongQKey, err := aUD.NewRemote(badEP)
	require.NoError(t, err)

	ins := map[uint32]*initiator{
		aRC.QPN():  {name: "RC", q: &aRC.Queue, lim: aRC.Limits()},
		aDCI.QPN(): {name: "DCI", q: &aDCI.Queue, lim: aDCI.Limits()},
		aUD.QPN():  {name: "UD", q: &aUD.Queue, lim: aUD.Limits()},
	}

	// The reference: B's target memory, the messages each receiver must
	// see in order, and which buffer each posted receive has.
	mirror := make([]byte, 2*region)
	copy(mirror, e.Mem(1, bRC, 2*region))
	var rcMsgs, dcMsgs, udMsgs []message
	rcSlots, udSlots := []int{}, []int{}
	srqSlot := map[uint64]int{}
	var rcNext, udNext, srqNext uint64
	topUp := func() {
		for bRCQP.RecvOutstanding() < recvCnt {
			slot := int(rcNext % recvCnt)
			require.NoError(t, bRCQP.BeginRecv(rcNext).SGE(e.Addr(1, bRecv+slot*slotSize), slotSize, e.LKey(1)).Finish())
			rcSlots = append(rcSlots, slot)
			rcNext++
		}
		bRCQP.RingRecvDoorbell()
		for srq.Free() > 0 {
			slot := int(srqNext % (2 * recvCnt))
			srqSlot[srqNext] = slot
			require.NoError(t, srq.BeginRecv(srqNext).SGE(e.Addr(1, bSRQ+slot*(slotSize/2)), slotSize/2, e.LKey(1)).Finish())
			srqNext++
		}
		srq.RingRecvDoorbell()
		for bUDQP.RecvOutstanding() < recvCnt {
			slot := int(udNext % recvCnt)
			require.NoError(t, bUDQP.BeginRecv(udNext).SGE(e.Addr(1, bUD+slot*(slotSize/2)), slotSize/2, e.LKey(1)).Finish())
			udSlots = append(udSlots, slot)
			udNext++
		}
		bUDQP.RingRecvDoorbell()
	}

	type check struct {
		off  int // in A's buffer
		want []byte
		what string
	}
	var stats struct {
		signaled, sends, writes, reads, atomics, nops, recvs, dropped int
		byOp                                                          map[string]int
	}
	stats.byOp = map[string]int{}

	ops := 0
	for ops < total {
		topUp()
		var checks []check
		n := 1 + r.IntN(maxOps)
	batch:
		for k := 0; k < n && ops < total; k++ {
			slot := k
			src := aSrc + slot*slotSize
			var in *initiator
			var kind int // 0 RC, 1 DC, 2 UD
			switch x := r.IntN(10); {
			case x < 4:
				kind = 0
				in = ins[aRC.QPN()]
			case x < 8:
				kind = 1
				in = ins[aDCI.QPN()]
			default:
				kind = 2
				in = ins[aUD.QPN()]
			}
			sq := in.q.SendQueue()
			lim := in.lim
			if sq.Free() < 2*lim.MaxWQEBBs {
				// Full of WQEs that completions have not retired yet: the
				// signaled ones among them retire the rest after this batch.
				break batch
			}
			// Unsignaled WQEs stay in the ring until a signaled one after
			// them completes: signal often enough to keep room.
			signaled := r.IntN(10) < 3 || sq.Free() < sq.Outstanding()
			flags := wqebuilder.Flags(0)
			if signaled {
				flags = wqebuilder.Signaled
			}
			in.nextWRID++
			wrid := in.nextWRID

			// The payload: random size, carried inline, by SGEs or both.
			size := r.IntN(64)
			switch r.IntN(8) {
			case 0:
				size = r.IntN(maxSend)
			case 1, 2:
				size = r.IntN(1024)
			}
			data := e.Fill(0, src, size, r.Uint64())
			payload := func(s wqebuilder.DataStage, maxBytes int) (wqebuilder.DataStage, []byte, bool) {
				// returns the stage with SGEs (and reports inline) for data[:maxBytes]
				d := data[:min(len(data), maxBytes)]
				if len(d) <= int(lim.MaxInline) && r.IntN(2) == 0 {
					return s, d, true
				}
				pieces := transporttest.Split(len(d), int(min(lim.MaxSendSGE, 4)), r)
				pos := 0
				for _, p := range pieces {
					s = s.SGE(e.Addr(0, src+pos), uint32(p), e.LKey(0))
					pos += p
				}
				return s, d, false
			}
			finish := func(s wqebuilder.DataStage, d []byte, inl bool) error {
				if inl {
					return s.Inline(d).Finish()
				}
				return s.Finish()
			}

			var err error
			var op prm.Opcode
			switch kind {
			case 2: // UD: SEND or SEND_IMM, sometimes to a wrong qkey
				remote, lost := udRemote, false
				if r.IntN(25) == 0 {
					remote, lost = udWrongQKey, true
				}
				st, perr := aUD.Post(wrid, flags, remote)
				require.NoError(t, perr)
				imm := r.Uint32()
				var ds wqebuilder.DataStage
				m := message{op: prm.CQERespSend}
				if r.IntN(2) == 0 {
					ds, op = st.Send(), prm.OpSend
				} else {
					ds, op = st.SendImm(imm), prm.OpSendImm
					m.op, m.imm = prm.CQERespSendImm, imm
				}
				ds, d, inl := payload(ds, udMax)
				m.data, m.n = d, len(d)
				err = finish(ds, d, inl)
				if lost {
					stats.dropped++
				} else {
					udMsgs = append(udMsgs, m)
				}
				stats.sends++
			default:
				var st wqebuilder.OpStage
				base, target := bRC, 0
				dctIdx := r.IntN(2)
				if kind == 0 {
					st, err = aRC.Post(wrid, flags)
				} else {
					st, err = aDCI.Post(wrid, flags, remotes[dctIdx])
					base = bDC
				}
				require.NoError(t, err)
				msgs := &rcMsgs
				if kind == 1 {
					msgs = &dcMsgs
				}
				imm := r.Uint32()
				switch x := r.IntN(20); {
				case x < 5: // SEND, SEND_IMM, SEND_INV
					var ds wqebuilder.DataStage
					m := message{dct: dctIdx}
					switch x {
					case 0, 1:
						ds, op, m.op = st.Send(), prm.OpSend, prm.CQERespSend
					case 2, 3:
						ds, op, m.op, m.imm = st.SendImm(imm), prm.OpSendImm, prm.CQERespSendImm, imm
					default:
						ds, op, m.op, m.imm = st.SendInv(imm), prm.OpSendInval, prm.CQERespSendInv, imm
					}
					maxBytes := slotSize
					if kind == 1 {
						maxBytes = slotSize / 2
					}
					ds, d, inl := payload(ds, maxBytes)
					m.data, m.n = d, len(d)
					err = finish(ds, d, inl)
					*msgs = append(*msgs, m)
					stats.sends++
				case x < 11: // RDMA_WRITE, RDMA_WRITE_IMM
					target = r.IntN(region - maxSend)
					var ds wqebuilder.DataStage
					if x < 9 {
						ds, op = st.RdmaWrite(e.Addr(1, base+target), e.RKey(1)), prm.OpRdmaWrite
					} else {
						ds, op = st.RdmaWriteImm(e.Addr(1, base+target), e.RKey(1), imm), prm.OpRdmaWriteImm
					}
					ds, d, inl := payload(ds, maxSend)
					err = finish(ds, d, inl)
					copy(mirror[base-bRC+target:], d)
					if op == prm.OpRdmaWriteImm {
						*msgs = append(*msgs, message{op: prm.CQERespWrImm, imm: imm, n: len(d), dct: dctIdx})
					}
					stats.writes++
				case x < 14: // RDMA_READ
					n := r.IntN(maxSend)
					target = r.IntN(region - maxSend)
					sc := st.RdmaRead(e.Addr(1, base+target), e.RKey(1))
					dst := aRead + slot*slotSize
					pos := 0
					for _, p := range transporttest.Split(n, int(min(lim.MaxSendSGE, 4)), r) {
						sc = sc.SGE(e.Addr(0, dst+pos), uint32(p), e.LKey(0))
						pos += p
					}
					op = prm.OpRdmaRead
					err = sc.Finish()
					checks = append(checks, check{dst, append([]byte(nil), mirror[base-bRC+target:][:n]...), "read"})
					stats.reads++
				case x < 19: // atomics
					a := transporttest.Atomic{Size: 8, CS: r.IntN(2) == 0, Masked: r.IntN(2) == 0,
						Swap: r.Uint64(), Compare: r.Uint64(), CmpMask: r.Uint64(), SwpMask: r.Uint64()}
					if a.Masked && r.IntN(2) == 0 {
						a.Size = 4
						a.Swap, a.Compare, a.CmpMask, a.SwpMask = a.Swap&0xffffffff, a.Compare&0xffffffff, a.CmpMask&0xffffffff, a.SwpMask&0xffffffff
					}
					target = 8 * r.IntN(region/8)
					old := transporttest.LoadWord(mirror[base-bRC+target:], a.Size)
					if r.IntN(3) == 0 {
						a.Compare = old
					}
					next, result := a.Apply(old)
					transporttest.StoreWord(mirror[base-bRC+target:], a.Size, next)
					raddr, rkey := e.Addr(1, base+target), e.RKey(1)
					var as wqebuilder.AtomicStage
					switch {
					case !a.Masked && a.CS:
						as, op = st.AtomicCS(raddr, rkey, a.Compare, a.Swap), prm.OpAtomicCS
					case !a.Masked:
						as, op = st.AtomicFA(raddr, rkey, a.Swap), prm.OpAtomicFA
					case a.Size == 4 && a.CS:
						as, op = st.MaskedCS32(raddr, rkey, uint32(a.Compare), uint32(a.Swap), uint32(a.CmpMask), uint32(a.SwpMask)), prm.OpAtomicMaskedCS
					case a.Size == 4:
						as, op = st.MaskedFA32(raddr, rkey, uint32(a.Swap), uint32(a.SwpMask)), prm.OpAtomicMaskedFA
					case a.CS:
						as, op = st.MaskedCS64(raddr, rkey, a.Compare, a.Swap, a.CmpMask, a.SwpMask), prm.OpAtomicMaskedCS
					default:
						as, op = st.MaskedFA64(raddr, rkey, a.Swap, a.SwpMask), prm.OpAtomicMaskedFA
					}
					res := aResult + 8*slot
					err = as.Result(e.Addr(0, res), e.LKey(0)).Finish()
					want := make([]byte, a.Size)
					transporttest.StoreWord(want, a.Size, result)
					checks = append(checks, check{res, want, fmt.Sprintf("%v result", op)})
					stats.atomics++
				default:
					op = prm.OpNop
					err = st.Nop().Finish()
					stats.nops++
				}
			}
			require.NoError(t, err, "%s %v", in.name, op)
			in.fifo = append(in.fifo, posted{wrid: wrid, signaled: signaled, op: op})
			stats.byOp[in.name+" "+op.String()]++
			if signaled {
				stats.signaled++
			}
			ops++
		}
		aRC.RingDoorbell()
		aDCI.RingDoorbell()
		aUD.RingDoorbell()
		e.Run()

		// Memory: every op of the batch has executed.
		for _, c := range checks {
			got := e.Mem(0, c.off, len(c.want))
			if !bytes.Equal(got, c.want) {
				require.Failf(t, "memory differs", "%s at %#x: got %x want %x", c.what, c.off, got[:min(16, len(got))], c.want[:min(16, len(c.want))])
			}
		}
		if !bytes.Equal(mirror, e.Mem(1, bRC, 2*region)) {
			got := e.Mem(1, bRC, 2*region)
			k := 0
			for got[k] == mirror[k] {
				k++
			}
			require.Failf(t, "target memory differs from the reference", "first difference at %#x after %d operations", k, ops)
		}

		// Completions.
		for ap.Poll(64, func(c *transport.Completion) {
			in := ins[c.QPN]
			require.NotNil(t, in, "completion for QPN %#x", c.QPN)
			require.Same(t, in.q, c.Queue)
			in.retire(t, c)
		}) > 0 {
		}
		for bp.Poll(64, func(c *transport.Completion) {
			require.Equal(t, transport.MatchOK, c.Match, "receive: %v", c.Err())
			stats.recvs++
			var m message
			var at int
			switch c.Queue {
			case &bRCQP.Queue:
				require.NotEmpty(t, rcMsgs)
				m, rcMsgs = rcMsgs[0], rcMsgs[1:]
				require.Equal(t, uint64(rcNext)-uint64(bRCQP.RecvOutstanding())-1, c.WRID, "RC receives complete in order")
				at = bRecv + rcSlots[0]*slotSize
				rcSlots = rcSlots[1:]
				require.Equal(t, aRC.QPN(), c.SourceQPN)
			case &bUDQP.Queue:
				require.NotEmpty(t, udMsgs)
				m, udMsgs = udMsgs[0], udMsgs[1:]
				at = bUD + udSlots[0]*(slotSize/2) + ud.GRHSize
				udSlots = udSlots[1:]
				require.Equal(t, aUD.QPN(), c.SourceQPN)
				require.Equal(t, uint32(ud.GRHSize+m.n), c.ByteCount)
				c.ByteCount -= ud.GRHSize
			default:
				require.NotEmpty(t, dcMsgs)
				m, dcMsgs = dcMsgs[0], dcMsgs[1:]
				require.Same(t, &dcts[m.dct].Queue, c.Queue, "the DCT the DCI named")
				slot, ok := srqSlot[c.WRID]
				require.True(t, ok, "SRQ wrid %d", c.WRID)
				delete(srqSlot, c.WRID)
				at = bSRQ + slot*(slotSize/2)
				require.Equal(t, aDCI.QPN(), c.SourceQPN)
			}
			require.Equal(t, m.op, c.Opcode)
			require.Equal(t, uint32(m.n), c.ByteCount)
			if m.op != prm.CQERespSend {
				require.Equal(t, m.imm, c.Immediate)
			}
			if m.data != nil && !bytes.Equal(m.data, e.Mem(1, at, m.n)) {
				require.Failf(t, "received bytes differ", "%v of %d bytes", m.op, m.n)
			}
		}) > 0 {
		}
		require.Empty(t, rcMsgs, "every RC message arrived")
		require.Empty(t, dcMsgs, "every DC message arrived")
		require.Empty(t, udMsgs, "every UD datagram arrived")
		require.NoError(t, ap.Err())
		require.NoError(t, bp.Err())
	}

	// A signaled NOP on each initiator retires what is left: then every
	// WQE ever posted is accounted for.
	for _, in := range ins {
		in.nextWRID++
		var st wqebuilder.OpStage
		var err error
		switch in.q {
		case &aRC.Queue:
			st, err = aRC.Post(in.nextWRID, wqebuilder.Signaled)
		case &aDCI.Queue:
			st, err = aDCI.Post(in.nextWRID, wqebuilder.Signaled, remotes[0])
		default:
			var ds wqebuilder.DatagramStage
			ds, err = aUD.Post(in.nextWRID, wqebuilder.Signaled, udRemote)
			require.NoError(t, err)
			require.NoError(t, ds.Send().FinishBlueFlame())
			in.fifo = append(in.fifo, posted{wrid: in.nextWRID, signaled: true, op: prm.OpSend})
			udMsgs = append(udMsgs, message{op: prm.CQERespSend})
			continue
		}
		require.NoError(t, err)
		require.NoError(t, st.Nop().FinishBlueFlame())
		in.fifo = append(in.fifo, posted{wrid: in.nextWRID, signaled: true, op: prm.OpNop})
	}
	e.Run()
	for ap.Poll(64, func(c *transport.Completion) { ins[c.QPN].retire(t, c) }) > 0 {
	}
	for _, in := range ins {
		require.Empty(t, in.fifo, "%s: every WQE retired", in.name)
		require.Zero(t, in.q.SendQueue().Outstanding(), in.name)
	}
	require.Equal(t, stats.signaled+3, ins[aRC.QPN()].done+ins[aDCI.QPN()].done+ins[aUD.QPN()].done,
		"each signaled WQE completed exactly once")
	require.GreaterOrEqual(t, ops, total)
	t.Logf("%d ops: %d signaled, %d sends, %d writes, %d reads, %d atomics, %d NOPs, %d receives, %d datagrams to a wrong qkey",
		ops, stats.signaled, stats.sends, stats.writes, stats.reads, stats.atomics, stats.nops, stats.recvs, stats.dropped)
	for _, in := range ins {
		sq := in.q.SendQueue()
		t.Logf("%s: %d signaled completions, send ring of %d WQEBBs went round %d times", in.name, in.done,
			in.lim.SendWQEBBs, transporttest.Laps(sq.ProducerIndex(), in.lim.SendWQEBBs))
	}
	require.Greater(t, len(stats.byOp), 20, "the stream used every kind of operation: %v", stats.byOp)
}
