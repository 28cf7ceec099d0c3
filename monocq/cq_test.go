package monocq

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

func TestNewRejectsBadConfig(t *testing.T) {
	r := newRing(t, 16, 64)
	good := r.config()
	_, err := New(good)
	require.NoError(t, err)

	misaligned := unsafe.Pointer(&r.buf[8])
	cases := map[string]func(c *Config){
		"nil ring":         func(c *Config) { c.Buf = nil },
		"ring misaligned":  func(c *Config) { c.Buf = misaligned },
		"count 0":          func(c *Config) { c.CQECnt = 0 },
		"count 1":          func(c *Config) { c.CQECnt = 1 },
		"count 12":         func(c *Config) { c.CQECnt = 12 },
		"count too large":  func(c *Config) { c.CQECnt = maxCQECnt << 1 },
		"size 32":          func(c *Config) { c.CQESize = 32 },
		"size 256":         func(c *Config) { c.CQESize = 256 },
		"nil dbrec":        func(c *Config) { c.DBRec = nil },
		"dbrec misaligned": func(c *Config) { c.DBRec = unsafe.Pointer(&r.dbrec[2]) },
		"uar misaligned":   func(c *Config) { c.UAR = unsafe.Pointer(&r.uar[4]) },
		"cqn 25 bits":      func(c *Config) { c.CQN = 1 << 24 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			c := good
			mutate(&c)
			cq, err := New(c)
			require.Nil(t, cq)
			require.ErrorIs(t, err, ctx.ErrInvalidArgument)
			require.Contains(t, err.Error(), "monocq: new CQ 0x")
		})
	}
	c := good
	c.UAR = nil
	_, err = New(c)
	require.NoError(t, err, "a CQ without UAR is valid (it cannot be armed)")
}

func TestEmptyRing(t *testing.T) {
	for _, size := range []uint32{64, 128} {
		r := newRing(t, 8, size)
		cq := r.newCQ(t)
		require.Equal(t, 0, cq.Ready(8))
		require.Nil(t, cq.Next())
		require.Equal(t, 0, cq.Poll(8, func(*CQE) { t.Fatal("CQE from an empty ring") }))
		require.NoError(t, cq.Err())
		require.Equal(t, uint32(8), cq.CQECnt())
		require.Equal(t, size, uint32(1)<<cq.shift)
		require.Equal(t, uint32(0x4d2), cq.CQN())
	}
}

// randomFields returns a requester, responder or error CQE with random
// fields.
func randomFields(rng *rand.Rand, seq uint32) cqeFields {
	f := cqeFields{
		qpn:        rng.Uint32() & 0xffffff,
		wqeCounter: uint16(seq),
		byteCnt:    rng.Uint32(),
		imm:        rng.Uint32(),
		srqn:       rng.Uint32() & 0xffffff,
		sl:         uint8(rng.IntN(16)),
		grh:        uint8(rng.IntN(3)),
		srcQP:      rng.Uint32() & 0xffffff,
		slid:       uint16(rng.Uint32()),
		mlPath:     uint8(rng.IntN(128)),
		timestamp:  rng.Uint64(),
		rxHash:     rng.Uint32(),
		solicited:  rng.IntN(2) == 0,
	}
	switch rng.IntN(4) {
	case 0:
		f.opcode = prm.CQEReq
		f.sendOp = []prm.Opcode{prm.OpRdmaWrite, prm.OpSend, prm.OpRdmaRead, prm.OpAtomicFA}[rng.IntN(4)]
	case 1:
		f.opcode = prm.CQERespSend + prm.CQEOpcode(rng.IntN(3))
	case 2:
		f.opcode = prm.CQERespWrImm
	default:
		f.opcode = []prm.CQEOpcode{prm.CQEReqErr, prm.CQERespErr}[rng.IntN(2)]
		f.syndrome = uint8(rng.Uint32())
		f.vendor = uint8(rng.Uint32())
	}
	return f
}

// requireDecodes checks every accessor of c against the fields the producer
// wrote.
func requireDecodes(t testing.TB, f cqeFields, c *CQE) {
	t.Helper()
	require.Equal(t, f.opcode, c.Opcode())
	require.Equal(t, f.opcode == prm.CQEReqErr || f.opcode == prm.CQERespErr, c.IsError())
	require.Equal(t, f.format, c.Format())
	require.Equal(t, f.solicited, c.Solicited())
	require.Equal(t, f.qpn, c.QPN())
	require.Equal(t, f.sendOp, c.SendOpcode())
	require.Equal(t, f.wqeCounter, c.WQECounter())
	require.Equal(t, f.srqn, c.SRQN())
	if f.format != prm.CQEFormatScatter32 { // the payload overlays these
		require.Equal(t, f.rxHash, c.RxHash())
		require.Equal(t, f.sl, c.SL())
		require.Equal(t, f.sl&3, c.RoCEL3Type(), "the RoCE L3 type shares bits 25..24 with SL")
		require.Equal(t, f.grh, c.grh())
		require.Equal(t, f.grh != 0, c.HasGRH())
		require.Equal(t, f.srcQP, c.SourceQP())
		require.Equal(t, f.slid, c.SLID())
		require.Equal(t, f.mlPath, c.PathBits())
	}
	if c.IsError() {
		require.Equal(t, prm.Syndrome(f.syndrome), c.Syndrome())
		require.Equal(t, f.vendor, c.VendorSyndrome())
		require.Error(t, c.Err())
	} else {
		require.Equal(t, f.timestamp, c.Timestamp()) // an error CQE's syndromes overlay it
		require.Equal(t, f.byteCnt, c.ByteCount())
		require.Equal(t, f.imm, c.Immediate())
		require.Equal(t, f.imm, c.InvalidatedRkey())
		require.Equal(t, uint16(f.imm), c.PKeyIndex())
		require.NoError(t, c.Err())
	}
}

// TestOwnershipManyLaps runs a producer and the poller through many laps with
// random batch sizes, checking every CQE, its order, the owner bit and the
// consumer index record.
func TestOwnershipManyLaps(t *testing.T) {
	for _, size := range []uint32{64, 128} {
		for _, cnt := range []uint32{2, 16, 64} {
			r := newRing(t, cnt, size)
			cq := r.newCQ(t)
			rng := rand.New(rand.NewPCG(uint64(cnt), uint64(size)))
			var queue []cqeFields
			var seq, taken uint32
			everFull := false
			laps := 200
			if testing.Short() {
				laps = 40
			}
			for taken < uint32(laps)*cnt {
				// The device may fill what software released.
				free := cnt - (r.pi - r.consumerIndexRecord())
				for k := rng.IntN(int(free) + 1); k > 0; k-- {
					f := randomFields(rng, seq)
					seq++
					r.put(f)
					queue = append(queue, f)
				}
				everFull = everFull || r.pi-r.consumerIndexRecord() == cnt
				switch rng.IntN(3) {
				case 0:
					cq.Poll(1+rng.IntN(int(cnt)), func(c *CQE) {
						require.NotEmpty(t, queue)
						require.Equal(t, r.owner(taken), c.owner())
						requireDecodes(t, queue[0], c)
						queue = queue[1:]
						taken++
					})
				case 1:
					for c := range cq.All(1 + rng.IntN(int(cnt))) {
						require.NotEmpty(t, queue)
						requireDecodes(t, queue[0], c)
						queue = queue[1:]
						taken++
					}
				default:
					n := cq.Ready(1 + rng.IntN(int(cnt)))
					require.LessOrEqual(t, n, len(queue))
					for c := cq.Next(); c != nil; c = cq.Next() {
						requireDecodes(t, queue[0], c)
						queue = queue[1:]
						taken++
					}
					cq.Release()
				}
				require.Equal(t, taken, cq.ConsumerIndex())
				require.Equal(t, taken&0xffffff, r.consumerIndexRecord())
				if everFull {
					require.ErrorIs(t, cq.Err(), ErrOverrun)
				} else {
					require.NoError(t, cq.Err(), "the ring was never full")
				}
			}
		}
	}
}

func TestConsumerIndexWrittenOncePerBatch(t *testing.T) {
	r := newRing(t, 16, 64)
	cq := r.newCQ(t)
	for i := 0; i < 5; i++ {
		r.put(cqeFields{opcode: prm.CQEReq, wqeCounter: uint16(i)})
	}
	seen := 0
	n := cq.Poll(16, func(c *CQE) {
		require.Equal(t, uint32(0), r.consumerIndexRecord(), "consumer index moved inside the batch")
		seen++
	})
	require.Equal(t, 5, n)
	require.Equal(t, 5, seen)
	require.Equal(t, uint32(5), r.consumerIndexRecord())

	// The cursor: nothing is written until Release.
	r.put(cqeFields{opcode: prm.CQEReq})
	r.put(cqeFields{opcode: prm.CQEReq})
	require.Equal(t, 2, cq.Ready(16))
	require.NotNil(t, cq.Next())
	require.NotNil(t, cq.Next())
	require.Nil(t, cq.Next())
	require.Equal(t, uint32(5), r.consumerIndexRecord())
	cq.Release()
	require.Equal(t, uint32(7), r.consumerIndexRecord())
}

func TestConsumerIndexRecordIs24Bits(t *testing.T) {
	r := newRing(t, 4, 64)
	cq := r.newCQ(t)
	// Start both sides just below 2^24 and 2^32 to cross both wraps.
	for _, start := range []uint32{1<<24 - 2, 1<<32 - 2} {
		r.pi = start
		cq.startAt(start)
		for i := uint32(0); i < 4; i++ {
			r.put(cqeFields{opcode: prm.CQEReq, wqeCounter: uint16(start + i)})
		}
		var got []uint16
		cq.Poll(4, func(c *CQE) { got = append(got, c.WQECounter()) })
		require.Equal(t, []uint16{uint16(start), uint16(start + 1), uint16(start + 2), uint16(start + 3)}, got)
		require.Equal(t, (start+4)&0xffffff, r.consumerIndexRecord())
	}
}

func TestReadyStopsAtOwnerOrInvalid(t *testing.T) {
	r := newRing(t, 8, 64)
	cq := r.newCQ(t)
	r.put(cqeFields{opcode: prm.CQEReq})
	r.put(cqeFields{opcode: prm.CQEReq})
	// Slot 2 has this lap's owner bit (0) but opcode INVALID: not software's.
	r.cqe64(2)[prm.CQEOpOwn] = 0xf0
	// Slot 3 looks like a valid CQE, but Ready must stop at slot 2.
	r.cqe64(3)[prm.CQEOpOwn] = 0x00
	require.Equal(t, 2, cq.Ready(8))
	require.Equal(t, 2, cq.Ready(8), "a second Ready counts the same CQEs")
	require.Equal(t, 2, cq.Ready(1), "Ready never shrinks what it found")
	// Slot 2 with the previous lap's owner bit (1) is the device's too.
	r.cqe64(2)[prm.CQEOpOwn] = 0x01
	require.Equal(t, 2, cq.Ready(8))
}

func TestRingFullReportsOverrunAndStaysInWindow(t *testing.T) {
	r := newRing(t, 8, 64)
	cq := r.newCQ(t)
	for i := 0; i < 8; i++ {
		r.put(cqeFields{opcode: prm.CQEReq, wqeCounter: uint16(i)})
	}
	require.Equal(t, 8, cq.Ready(100))
	require.ErrorIs(t, cq.Err(), ErrOverrun)
	for i := 0; i < 8; i++ {
		require.NotNil(t, cq.Next())
	}
	require.Nil(t, cq.Next())
	// Slot 0 now looks valid for the next lap, but nothing was released:
	// the device cannot have written it, so the poller must not take it.
	r.put(cqeFields{opcode: prm.CQEReq, wqeCounter: 8})
	require.Equal(t, 0, cq.Ready(8))
	cq.Release()
	require.Equal(t, 1, cq.Ready(8))
	require.Equal(t, uint16(8), cq.Next().WQECounter())
}

func TestDecodeKinds(t *testing.T) {
	for _, size := range []uint32{64, 128} {
		r := newRing(t, 8, size)
		cq := r.newCQ(t)
		req := cqeFields{opcode: prm.CQEReq, sendOp: prm.OpRdmaWriteImm, qpn: 0xabcdef, wqeCounter: 0xfffe, byteCnt: 0}
		resp := cqeFields{opcode: prm.CQERespSendImm, qpn: 0x000102, wqeCounter: 7, byteCnt: 4096,
			imm: 0xdeadbeef, srqn: 0x123456, sl: 5, grh: prm.CQEGRHInData, srcQP: 0xfedcba, slid: 0x1234,
			mlPath: 0x7f, solicited: true, timestamp: 0x0102030405060708, rxHash: 0xcafef00d}
		errCQE := cqeFields{opcode: prm.CQEReqErr, sendOp: prm.OpRdmaRead, qpn: 0x42, wqeCounter: 3,
			syndrome: uint8(prm.SyndromeRemoteAccess), vendor: 0x88}
		for _, f := range []cqeFields{req, resp, errCQE} {
			r.put(f)
		}
		var got []*CQE
		cq.Poll(8, func(c *CQE) { got = append(got, c) })
		require.Len(t, got, 3)
		requireDecodes(t, req, got[0])
		requireDecodes(t, resp, got[1])
		requireDecodes(t, errCQE, got[2])
		// The view is the CQE64: the second half of a 128-byte slot.
		require.Equal(t, unsafe.Pointer(&r.cqe64(1)[0]), unsafe.Pointer(got[1]))
		require.Equal(t, r.cqe64(1), got[1][:])

		err := got[2].Err()
		var ce *CompletionError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, CompletionError{Status: statusRemoteAccess, CQEOpcode: prm.CQEReqErr, Syndrome: prm.SyndromeRemoteAccess,
			VendorSyndrome: 0x88, QPN: 0x42, WQECounter: 3, Opcode: prm.OpRdmaRead}, *ce)
		require.ErrorIs(t, err, ErrRemoteAccess)
		require.ErrorIs(t, err, ErrCompletion)
		require.False(t, errors.Is(err, ErrUnknownSyndrome))
		require.Contains(t, err.Error(), "REMOTE_ACCESS_ERR")
	}
}

// TestRoCEL3Type decodes the network header type from bits 25..24 of
// flags_rqpn, leaving the GRH field and the source QP alone.
func TestRoCEL3Type(t *testing.T) {
	for _, l3 := range []uint8{prm.CQERoCEL3GRH, prm.CQERoCEL3IPv6, prm.CQERoCEL3IPv4} {
		var c CQE
		c[prm.CQEOpOwn] = uint8(prm.CQERespSend) << prm.CQEOpcodeShift
		// GRH in data (bit 28), the type in bits 25..24, source QP 0xabcdef.
		binary.BigEndian.PutUint32(c[prm.CQEFlagsRQPN:], 1<<28|uint32(l3)<<24|0xabcdef)
		require.Equal(t, l3, c.RoCEL3Type())
		require.Equal(t, uint8(prm.CQEGRHInData), c.grh())
		require.Equal(t, uint32(0xabcdef), c.SourceQP())
	}
	var c CQE
	c[prm.CQEFlagsRQPN] = 0x0c // bits 27..26: SL bits on InfiniBand, not part of the type
	require.Equal(t, uint8(prm.CQERoCEL3GRH), c.RoCEL3Type())
}

func TestUnknownSyndromeIsReported(t *testing.T) {
	r := newRing(t, 4, 64)
	cq := r.newCQ(t)
	r.put(cqeFields{opcode: prm.CQERespErr, qpn: 9, syndrome: 0x77, vendor: 0x01})
	var err error
	require.NotPanics(t, func() { cq.Poll(4, func(c *CQE) { err = c.Err() }) })
	require.ErrorIs(t, err, ErrCompletion)
	require.ErrorIs(t, err, ErrUnknownSyndrome)
	require.Contains(t, err.Error(), "SYNDROME(0x77)")
	require.Contains(t, err.Error(), "receive on QPN 0x9 failed: GENERAL_ERR")
}

func TestScatter(t *testing.T) {
	payload := make([]byte, 64)
	for i := range payload {
		payload[i] = byte(0xa0 + i)
	}
	for _, size := range []uint32{64, 128} {
		limit := 32
		if size == 128 {
			limit = 64
		}
		r := newRing(t, 8, size)
		cq := r.newCQ(t)
		lengths := []int{0, 1, 20, limit}
		for _, n := range lengths {
			r.putScatter(cqeFields{opcode: prm.CQERespSend, qpn: 5}, payload[:n])
		}
		// A byte_cnt beyond what fits (the rest went to the buffer).
		r.putScatter(cqeFields{opcode: prm.CQERespSend, qpn: 5}, payload[:limit])
		binary.BigEndian.PutUint32(r.cqe64(4)[prm.CQEByteCnt:], 1000)
		// A plain CQE has no scatter data.
		r.put(cqeFields{opcode: prm.CQERespSend, byteCnt: 12})

		var got [][]byte
		cq.Poll(8, func(c *CQE) {
			got = append(got, append([]byte(nil), c.ScatterData()...))
			if c.Format() != prm.CQEFormatNone {
				require.Equal(t, uint32(5), c.QPN())
			}
		})
		require.Len(t, got, 6)
		for i, n := range lengths {
			require.True(t, bytes.Equal(payload[:n], got[i]), "size %d length %d: %x", size, n, got[i])
		}
		require.Equal(t, payload[:limit], got[4])
		require.Empty(t, got[5])
		require.NoError(t, cq.Err())
	}
}

func TestScatter64InSmallRingIsCorrupt(t *testing.T) {
	r := newRing(t, 8, 64)
	cq := r.newCQ(t)
	r.put(cqeFields{opcode: prm.CQERespSend, wqeCounter: 1})
	r.put(cqeFields{opcode: prm.CQERespSend, format: prm.CQEFormatScatter64, byteCnt: 64})
	r.put(cqeFields{opcode: prm.CQERespSend, wqeCounter: 3})
	var got []uint16
	cq.Poll(8, func(c *CQE) { got = append(got, c.WQECounter()) })
	require.Equal(t, []uint16{1}, got, "the CQE before the corrupt slot is delivered, nothing after")
	require.ErrorIs(t, cq.Err(), ErrCorrupt)
	require.Contains(t, cq.Err().Error(), "scatter-64")
	require.Equal(t, 0, cq.Ready(8), "the poller stays stopped")
}

func TestArm(t *testing.T) {
	r := newRing(t, 16, 64)
	cq := r.newCQ(t)
	for i := 0; i < 3; i++ {
		r.put(cqeFields{opcode: prm.CQEReq})
	}
	require.Equal(t, 3, cq.Ready(16))
	cq.Next()
	cq.Next()
	cq.Next()
	// The expected words, built from the PRM description: sn in 29..28,
	// the solicited command in bit 24, the 24-bit consumer index below.
	want := func(sn, cmd, ci uint32) (dbrec1 []byte, uar []byte) {
		w := sn<<28 | cmd<<24 | ci
		dbrec1 = binary.BigEndian.AppendUint32(nil, w)
		uar = binary.BigEndian.AppendUint64(nil, uint64(w)<<32|0x4d2)
		return
	}
	require.NoError(t, cq.Arm(false))
	d, u := want(0, 0, 3)
	require.Equal(t, d, r.dbrec[4:8])
	require.Equal(t, u, r.uar[0x20:0x28])
	require.Equal(t, uint32(3), r.consumerIndexRecord(), "arming releases what was taken")
	require.Equal(t, make([]byte, 0x20), r.uar[:0x20], "nothing written before the doorbell")
	require.Equal(t, make([]byte, 8), r.uar[0x28:0x30], "nothing written after the doorbell")

	for i := uint32(1); i <= 5; i++ {
		cq.AcknowledgeEvent()
		require.NoError(t, cq.Arm(i%2 == 1))
		d, u := want(i&3, i%2, 3)
		require.Equal(t, d, r.dbrec[4:8], "event %d", i)
		require.Equal(t, u, r.uar[0x20:0x28], "event %d", i)
	}

	c := r.config()
	c.UAR = nil
	noUAR, err := New(c)
	require.NoError(t, err)
	require.ErrorIs(t, noUAR.Arm(false), ErrNoUAR)
}

func TestPollAllocatesNothing(t *testing.T) {
	r := newRing(t, 64, 64)
	cq := r.newCQ(t)
	var sum uint64
	fill := func() {
		for i := 0; i < 32; i++ {
			r.put(cqeFields{opcode: prm.CQEReq, byteCnt: 1})
		}
	}
	require.Zero(t, testing.AllocsPerRun(100, func() {
		fill()
		cq.Poll(32, func(c *CQE) { sum += uint64(c.ByteCount()) })
	}), "Poll")
	require.Zero(t, testing.AllocsPerRun(100, func() {
		fill()
		for c := range cq.All(32) {
			sum += uint64(c.ByteCount())
		}
	}), "All")
	require.Zero(t, testing.AllocsPerRun(100, func() {
		fill()
		cq.Ready(32)
		for c := cq.Next(); c != nil; c = cq.Next() {
			sum += uint64(c.ByteCount())
			if c.Err() != nil {
				panic("error CQE")
			}
		}
		cq.Release()
	}), "cursor")
	require.Equal(t, uint64(3*101*32), sum)
	require.NoError(t, cq.Err())
}

func TestPollAndAllRespectMaxAfterReady(t *testing.T) {
	r := newRing(t, 16, 64)
	cq := r.newCQ(t)
	for i := 0; i < 10; i++ {
		r.put(cqeFields{opcode: prm.CQEReq, wqeCounter: uint16(i)})
	}
	require.Equal(t, 10, cq.Ready(16))
	var got []uint16
	require.Equal(t, 3, cq.Poll(3, func(c *CQE) { got = append(got, c.WQECounter()) }))
	for c := range cq.All(2) {
		got = append(got, c.WQECounter())
	}
	require.Equal(t, []uint16{0, 1, 2, 3, 4}, got)
	require.Equal(t, uint32(5), r.consumerIndexRecord())
	require.Equal(t, 5, cq.Ready(0), "the rest stays ready")
	require.Equal(t, 0, cq.Poll(0, func(*CQE) { t.Fatal("max 0") }))
	require.Equal(t, 0, cq.Poll(-1, func(*CQE) { t.Fatal("max -1") }))

	// A body that breaks leaves the CQEs it did not reach ready.
	for c := range cq.All(16) {
		got = append(got, c.WQECounter())
		if c.WQECounter() == 6 {
			break
		}
	}
	require.Equal(t, uint32(7), cq.ConsumerIndex())
	require.Equal(t, uint32(7), r.consumerIndexRecord())
	// Inside a batch, Next has nothing to hand out.
	cq.Poll(16, func(c *CQE) {
		got = append(got, c.WQECounter())
		require.Nil(t, cq.Next())
	})
	require.Equal(t, []uint16{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, got)
}

func TestCQEString(t *testing.T) {
	r := newRing(t, 4, 64)
	cq := r.newCQ(t)
	r.put(cqeFields{opcode: prm.CQEReqErr, qpn: 0x2a, syndrome: uint8(prm.SyndromeWRFlush)})
	var s string
	cq.Poll(4, func(c *CQE) { s = c.String() })
	require.Contains(t, s, "REQ_ERR")
	require.Contains(t, s, "WR_FLUSH_ERR")
}
