package sim

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// The tests drive the model with their own tiny WQE/CQE encoder written
// against the prm offsets, independent of the kit's builder and poller.

var be = binary.BigEndian

// host is the byte order of the word an 8-byte atomic works on and of the
// value it returns (4-byte masked atomics use be).
var host = binary.NativeEndian

type env struct {
	t    testing.TB
	f    *Fabric
	c    *ctx.Context
	c2   *ctx.Context // a second HCA
	pd   *ctx.ProtectionDomain
	pd2  *ctx.ProtectionDomain
	buf  *ctx.Buffer
	mr   *ctx.MemoryRegion // all access, on pd
	buf2 *ctx.Buffer
	mr2  *ctx.MemoryRegion // all access, on pd2
	// allowViolations lets a test expect strict-mode violations.
	allowViolations bool
}

const allAccess = ctx.AccessLocalWrite | ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic

func newEnv(t testing.TB, opts Options) *env {
	t.Helper()
	opts.Strict = true
	e := &env{t: t}
	e.f = New(opts)
	var err error
	e.c, err = e.f.Open("sim0")
	require.NoError(t, err)
	e.c2, err = e.f.Open("sim1")
	require.NoError(t, err)
	e.pd, err = e.c.AllocProtectionDomain()
	require.NoError(t, err)
	e.pd2, err = e.c2.AllocProtectionDomain()
	require.NoError(t, err)
	e.buf, err = ctx.AllocBuffer(1<<20, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	e.mr, err = e.pd.RegisterBuffer(e.buf, allAccess)
	require.NoError(t, err)
	e.buf2, err = ctx.AllocBuffer(1<<20, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	e.mr2, err = e.pd2.RegisterBuffer(e.buf2, allAccess)
	require.NoError(t, err)
	t.Cleanup(func() {
		if !e.allowViolations {
			require.Empty(t, e.f.Violations(), "strict-mode violations")
		}
		require.NoError(t, e.c.Close())
		require.NoError(t, e.c2.Close())
		require.NoError(t, e.f.Close())
		require.NoError(t, e.buf.Close())
		require.NoError(t, e.buf2.Close())
	})
	return e
}

func (e *env) run() {
	e.t.Helper()
	require.NoError(e.t, e.f.RunUntilIdle())
}

// addr returns the address of byte off of the first (or second) buffer.
func (e *env) addr(off int) uint64    { return uint64(e.mr.Addr()) + uint64(off) }
func (e *env) addr2(off int) uint64   { return uint64(e.mr2.Addr()) + uint64(off) }
func (e *env) mem(off, n int) []byte  { return e.buf.Bytes()[off : off+n] }
func (e *env) mem2(off, n int) []byte { return e.buf2.Bytes()[off : off+n] }

// ---- completion queues ----

type testCQ struct {
	cq *ctx.CompletionQueue
	d  descriptor.CQ
	ci uint32
}

type cqe struct {
	op        prm.CQEOpcode
	format    uint8
	solicited bool
	synd      prm.Syndrome
	vendor    uint8 // vendor_err_synd of an error CQE
	counter   uint16
	qpn       uint32
	sendOp    prm.Opcode
	byteCnt   uint32
	imm       uint32
	srcQPN    uint32
	grh       bool
	flagsRQPN uint32 // the whole word: GRH, SL or RoCE L3 type, source QP
	srqn      uint32
	slid      uint16
	scatter   []byte
}

func (e *env) newCQ(c *ctx.Context, depth uint32, size uint32) *testCQ {
	e.t.Helper()
	return e.newCQConfig(c, ctx.CompletionQueueConfig{Depth: depth, CQESize: size})
}

func (e *env) newCQConfig(c *ctx.Context, cfg ctx.CompletionQueueConfig) *testCQ {
	e.t.Helper()
	cq, err := c.CreateCompletionQueue(cfg)
	require.NoError(e.t, err)
	return &testCQ{cq: cq, d: provider.CQDescriptor(cq)}
}

func (c *testCQ) poll() (cqe, bool) {
	slot := unsafe.Add(c.d.Buf, (c.ci&(c.d.CQECnt-1))*c.d.CQESize)
	p := unsafe.Add(slot, c.d.CQESize-prm.CQE64Size)
	b := unsafe.Slice((*byte)(p), prm.CQE64Size)
	opOwn := b[prm.CQEOpOwn]
	if prm.OpOwnOpcode(opOwn) == prm.CQEInvalid || opOwn&1 != byte(c.ci/c.d.CQECnt)&1 {
		return cqe{}, false
	}
	x := cqe{
		op:        prm.OpOwnOpcode(opOwn),
		format:    prm.OpOwnFormat(opOwn),
		solicited: opOwn&prm.CQESolicitedMask != 0,
		counter:   be.Uint16(b[prm.CQEWQECounter:]),
		qpn:       be.Uint32(b[prm.CQESopDropQPN:]) & 0xffffff,
		sendOp:    prm.Opcode(b[prm.CQESopDropQPN]),
		byteCnt:   be.Uint32(b[prm.CQEByteCnt:]),
		imm:       be.Uint32(b[prm.CQEImmInvalPkey:]),
		srcQPN:    be.Uint32(b[prm.CQEFlagsRQPN:]) & 0xffffff,
		grh:       (be.Uint32(b[prm.CQEFlagsRQPN:])>>28)&3 != 0,
		flagsRQPN: be.Uint32(b[prm.CQEFlagsRQPN:]),
		srqn:      be.Uint32(b[prm.CQESRQNUIdx:]) & 0xffffff,
		slid:      be.Uint16(b[prm.CQESLID:]),
	}
	if x.op.IsError() {
		x.synd = prm.Syndrome(b[prm.ErrCQESyndrome])
		x.vendor = b[prm.ErrCQEVendorSyndrome]
	}
	switch x.format {
	case prm.CQEFormatScatter32:
		x.scatter = append([]byte(nil), b[:x.byteCnt]...)
	case prm.CQEFormatScatter64:
		x.scatter = append([]byte(nil), unsafe.Slice((*byte)(slot), x.byteCnt)...)
	}
	c.ci++
	prm.Store32(c.d.DBRec, c.ci&prm.CQConsumerIndexMask)
	return x, true
}

// pollImm is poll for the round-trip loops of the benchmarks: it reads
// only the opcode and the immediate of the next CQE.
func (c *testCQ) pollImm() (prm.CQEOpcode, uint32, bool) {
	p := unsafe.Add(c.d.Buf, (c.ci&(c.d.CQECnt-1))*c.d.CQESize+c.d.CQESize-prm.CQE64Size)
	opOwn := *(*byte)(unsafe.Add(p, prm.CQEOpOwn))
	if prm.OpOwnOpcode(opOwn) == prm.CQEInvalid || opOwn&1 != byte(c.ci/c.d.CQECnt)&1 {
		return 0, 0, false
	}
	imm := prm.Load32(unsafe.Add(p, prm.CQEImmInvalPkey))
	c.ci++
	prm.Store32(c.d.DBRec, c.ci&prm.CQConsumerIndexMask)
	return prm.OpOwnOpcode(opOwn), imm, true
}

// drain returns every CQE available now.
func (c *testCQ) drain() []cqe {
	var out []cqe
	for {
		x, ok := c.poll()
		if !ok {
			return out
		}
		out = append(out, x)
	}
}

// one polls exactly one CQE and fails otherwise.
func (c *testCQ) one(t testing.TB) cqe {
	t.Helper()
	got := c.drain()
	require.Len(t, got, 1, "CQEs: %+v", got)
	return got[0]
}

// ---- queue pairs ----

type testQP struct {
	e      *env
	qp     *ctx.QueuePair
	d      descriptor.QP
	scq    *testCQ
	rcq    *testCQ
	pi     uint16
	rqHead uint16
	// last is the index of the last WQE written, bfOff the offset of the
	// register buffer the next doorbell goes to (ring).
	last  uint16
	bfOff uint32
}

type qpOpts struct {
	typ          ctx.QPType
	sendDepth    uint32
	recvDepth    uint32
	sendSGE      uint32
	recvSGE      uint32
	inline       uint32
	srq          *testSRQ
	dcKey        uint64
	scatterToCQE bool
	cqeSize      uint32
	cqDepth      uint32
	timestamps   bool // CQs with ctx.CompletionQueueConfig.Timestamps
}

func (e *env) newQP(pd *ctx.ProtectionDomain, o qpOpts) *testQP {
	e.t.Helper()
	if o.sendDepth == 0 && o.typ != ctx.QPTypeDCT {
		o.sendDepth = 16
	}
	if o.recvDepth == 0 && o.srq == nil && o.typ != ctx.QPTypeDCI && o.typ != ctx.QPTypeDCT {
		o.recvDepth = 16
	}
	if o.sendSGE == 0 {
		o.sendSGE = 4
	}
	if o.recvSGE == 0 {
		o.recvSGE = 4
	}
	if o.inline == 0 {
		o.inline = 128
	}
	if o.cqDepth == 0 {
		o.cqDepth = 256
	}
	c := pd.Context()
	cqCfg := ctx.CompletionQueueConfig{Depth: o.cqDepth, CQESize: o.cqeSize, Timestamps: o.timestamps}
	scq := e.newCQConfig(c, cqCfg)
	rcq := e.newCQConfig(c, cqCfg)
	cfg := ctx.QueuePairConfig{Type: o.typ, SendCQ: scq.cq, RecvCQ: rcq.cq, DCKey: o.dcKey, ScatterToCQE: o.scatterToCQE,
		Caps: ctx.QueuePairCaps{SendDepth: o.sendDepth, RecvDepth: o.recvDepth, MaxSendSGE: o.sendSGE, MaxRecvSGE: o.recvSGE, MaxInline: o.inline}}
	if o.srq != nil {
		cfg.SRQ = o.srq.srq
	}
	qp, err := pd.CreateQueuePair(cfg)
	require.NoError(e.t, err)
	return &testQP{e: e, qp: qp, d: provider.QPDescriptor(qp), scq: scq, rcq: rcq}
}

func lidOf(t testing.TB, c *ctx.Context) uint16 {
	pa, err := c.QueryPort(1)
	require.NoError(t, err)
	return pa.LID
}

// connectRC brings two RC QPs to RTS, connected to each other.
func (e *env) connectRC(a, b *testQP, rnrRetry, minRNR uint8) {
	e.t.Helper()
	for _, x := range []struct{ q, peer *testQP }{{a, b}, {b, a}} {
		require.NoError(e.t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
		require.NoError(e.t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: x.peer.qp.QPN(), PathMTU: ctx.MTU4096,
			Path: ctx.AddressAttr{DLID: lidOf(e.t, x.peer.qp.ProtectionDomain().Context())}, MinRNRTimer: minRNR, MaxDestRdAtomic: 16}))
		require.NoError(e.t, x.q.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: rnrRetry, MaxRdAtomic: 16}))
	}
}

// rcPair returns two connected RC QPs, a on HCA sim0 and b on sim1.
func (e *env) rcPair(o qpOpts) (*testQP, *testQP) {
	o.typ = ctx.QPTypeRC
	a := e.newQP(e.pd, o)
	b := e.newQP(e.pd2, o)
	e.connectRC(a, b, 7, 1)
	return a, b
}

// ---- WQE encoding ----

func ctrlSeg(op prm.Opcode, opmod uint8, idx uint16, qpn uint32, ds int, fm uint8, imm uint32) []byte {
	b := make([]byte, 16)
	be.PutUint32(b[0:], uint32(opmod)<<24|uint32(idx)<<8|uint32(op))
	be.PutUint32(b[4:], qpn<<8|uint32(ds))
	b[11] = fm
	be.PutUint32(b[12:], imm)
	return b
}

func raddrSeg(addr uint64, rkey uint32) []byte {
	b := make([]byte, 16)
	be.PutUint64(b[0:], addr)
	be.PutUint32(b[8:], rkey)
	return b
}

func atomicSeg(a, b uint64) []byte {
	s := make([]byte, 16)
	be.PutUint64(s[0:], a)
	be.PutUint64(s[8:], b)
	return s
}

func dataSeg(n uint32, lkey uint32, addr uint64) []byte {
	b := make([]byte, 16)
	be.PutUint32(b[0:], n)
	be.PutUint32(b[4:], lkey)
	be.PutUint64(b[8:], addr)
	return b
}

// inlineSeg encodes an inline segment; no bytes make no segment.
func inlineSeg(data []byte) []byte {
	if len(data) == 0 {
		return nil
	}
	n := (4 + len(data) + 15) / 16 * 16
	b := make([]byte, n)
	be.PutUint32(b[0:], uint32(len(data))|0x80000000)
	copy(b[4:], data)
	return b
}

// udAV builds a UD address vector towards an IB LID.
func udAV(qkey, qpn uint32, dlid uint16) []byte {
	b := make([]byte, 48)
	be.PutUint32(b[0:], qkey)
	be.PutUint32(b[8:], qpn|0x80000000)
	be.PutUint16(b[14:], dlid)
	return b
}

// dcAV builds a DC address vector towards an IB LID.
func dcAV(key uint64, dctn uint32, dlid uint16) []byte {
	b := make([]byte, 48)
	be.PutUint64(b[0:], key)
	be.PutUint32(b[8:], dctn|0x80000000)
	be.PutUint16(b[14:], dlid)
	return b
}

// write copies a WQE (no larger than the ring) into the ring at the
// producer index, wrapping at the ring end, and advances the producer
// index (no doorbell).
func (q *testQP) write(w []byte) uint16 {
	ringBytes := int(q.d.SQ.WQECnt) * prm.WQEBBSize
	ring := unsafe.Slice((*byte)(q.d.SQ.Buf), ringBytes)
	start := int(uint32(q.pi)&(q.d.SQ.WQECnt-1)) * prm.WQEBBSize
	// Up to the ring's end, then from its start (a WQE wraps in whole
	// 16-byte segments: the ring is a multiple of them).
	n := copy(ring[start:], w)
	copy(ring, w[n:])
	idx := q.pi
	q.pi += uint16((len(w) + 63) / 64)
	q.last = idx
	return idx
}

// build assembles ctrl + segments with the right ds for the QP.
func (q *testQP) build(op prm.Opcode, opmod uint8, fm uint8, imm uint32, segs ...[]byte) []byte {
	n := 16
	for _, s := range segs {
		n += len(s)
	}
	w := ctrlSeg(op, opmod, q.pi, q.qp.QPN(), n/16, fm, imm)
	for _, s := range segs {
		w = append(w, s...)
	}
	return w
}

// post writes a WQE and rings the doorbell record.
func (q *testQP) post(op prm.Opcode, opmod uint8, fm uint8, imm uint32, segs ...[]byte) uint16 {
	idx := q.write(q.build(op, opmod, fm, imm, segs...))
	q.ring()
	return idx
}

// ring publishes the WQEs written since the last ring as a program
// posts them: the doorbell record, then the doorbell register (ringRegister).
func (q *testQP) ring() {
	q.ringRecord()
	q.ringRegister()
}

// ringRecord writes the producer index into the send doorbell record only:
// a ConnectX fetches nothing until the register is written
// (ViolationDoorbellRecordOnly).
func (q *testQP) ringRecord() {
	prm.Store32(unsafe.Add(q.d.DBRec, prm.DoorbellRecordSendB), uint32(q.pi))
}

// ringRegister stores the first 8 bytes of the last WQE written into the
// QP's doorbell register, as rdma-core's post_send_db does for a post
// without BlueFlame, and moves to the register's other buffer.
func (q *testQP) ringRegister() {
	slot := unsafe.Add(q.d.SQ.Buf, int(uint32(q.last)&(q.d.SQ.WQECnt-1))*prm.WQEBBSize)
	*(*uint64)(unsafe.Add(q.d.BlueFlame, q.bfOff)) = *(*uint64)(slot)
	q.bfOff ^= q.d.BlueFlameSize
}

// postRecv posts one receive WQE with the given SGEs to the QP's RQ.
func (q *testQP) postRecv(sges ...[]byte) uint16 {
	stride := int(q.d.RQ.Stride)
	slot := unsafe.Slice((*byte)(unsafe.Add(q.d.RQ.Buf, int(uint32(q.rqHead)&(q.d.RQ.WQECnt-1))*stride)), stride)
	for i := range slot {
		slot[i] = 0
	}
	for i, s := range sges {
		copy(slot[i*16:], s)
	}
	if len(sges)*16 < stride {
		copy(slot[len(sges)*16:], dataSeg(0, prm.InvalidLKey, 0))
	}
	idx := q.rqHead
	q.rqHead++
	prm.Store32(q.d.DBRec, uint32(q.rqHead))
	return idx
}

// ---- SRQ ----

type testSRQ struct {
	srq        *ctx.SharedReceiveQueue
	d          descriptor.SRQ
	head, tail uint16
	counter    uint16
}

func (e *env) newSRQ(pd *ctx.ProtectionDomain, depth, sge uint32) *testSRQ {
	e.t.Helper()
	s, err := pd.CreateSRQ(ctx.SRQConfig{Depth: depth, MaxSGE: sge})
	require.NoError(e.t, err)
	d := provider.SRQDescriptor(s)
	return &testSRQ{srq: s, d: d, head: uint16(d.Head), tail: uint16(d.Tail)}
}

func (s *testSRQ) wqe(i uint16) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(s.d.Buf, int(i)*int(s.d.Stride))), s.d.Stride)
}

// post posts one receive WQE at the free-list head.
func (s *testSRQ) post(sges ...[]byte) uint16 {
	idx := s.head
	w := s.wqe(idx)
	s.head = be.Uint16(w[prm.SRQNextWQEIndex:])
	for i, g := range sges {
		copy(w[16+i*16:], g)
	}
	if 16+len(sges)*16 < len(w) {
		copy(w[16+len(sges)*16:], dataSeg(0, prm.InvalidLKey, 0))
	}
	s.counter++
	prm.Store32(s.d.DBRec, uint32(s.counter))
	return idx
}

// free returns a completed WQE to the free list tail.
func (s *testSRQ) free(idx uint16) {
	be.PutUint16(s.wqe(s.tail)[prm.SRQNextWQEIndex:], idx)
	s.tail = idx
}
