package sim

import (
	"errors"
	"fmt"
	"math/bits"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/kerrno"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
)

// region is a piece of mmap'd memory the model owns (a ring, a doorbell
// page, a UAR page), surrounded by guard pages. Before it maps one, it has
// the mappings of closed queues collected when many may wait for it
// (collectIfMany).
func region(size int) (*ctx.Buffer, error) {
	collectIfMany()
	return ctx.AllocBuffer(size, ctx.BufferOptions{Guard: true})
}

func freeAll(bufs ...*ctx.Buffer) {
	for _, b := range bufs {
		if b != nil {
			_ = b.Close()
		}
	}
}

func roundPow2(n uint32) uint32 {
	if n <= 1 {
		return 1
	}
	return 1 << bits.Len32(n-1)
}

func align(n, a int) int { return (n + a - 1) / a * a }

// ---- completion queues ----

// cq is a completion queue.
type cq struct {
	f      *Fabric
	dev    *device
	cqn    uint32
	bufs   [3]*ctx.Buffer
	mem    *queueMemory // owns bufs once created
	ring   unsafe.Pointer
	cnt    uint32
	size   uint32
	db     unsafe.Pointer
	uar    unsafe.Pointer
	pi     uint32 // CQEs written, free-running
	evfd   int
	closed bool
	// timestamps: write the device clock in every CQE
	// (ctx.CompletionQueueConfig.Timestamps).
	timestamps bool

	errored   bool
	errDetail string

	armed        bool
	armSolicited bool
	lastArm      uint32
	// notified is pi just after the last CQE an event reported (the
	// CQ context's last_notified_index, plus one): an arm behind the
	// producer raises an event only for CQEs from here on (armBehind).
	notified uint32
	// eventsRead counts the events ReadEvent consumed (from the user's
	// goroutine): the arm sequence number an arm must carry is its low two
	// bits.
	eventsRead atomic.Uint64
	lastCIRaw  uint32
	// An adopted CQ's arms are read from its doorbell record and its
	// events go to onEvent (see simadopt.CQConfig.Event).
	recordArm  bool
	lastRecArm uint32
	onEvent    func()

	delay   int64
	pending []pendingCQE
}

type pendingCQE struct {
	due     int64
	img     [prm.CQE64Size]byte
	scatter []byte
	q       *qp
}

// errEINVAL is the cause of a refusal the kernel (or libmlx5 above it)
// answers with EINVAL, as a create whose sizes exceed the device's limits
// or a modify the model refuses:
// errors.Is matches syscall.EINVAL and ctx.ErrInvalidArgument, and
// ctx.OpError.Errno finds EINVAL, as from the hardware provider.
var errEINVAL error = &kerrno.Cause{Errno: syscall.EINVAL, Sentinel: ctx.ErrInvalidArgument}

func (d *device) CreateCompletionQueue(cfg ctx.CompletionQueueConfig) (provider.CompletionQueue, error) {
	const op = "sim: create CQ"
	if d.dead() {
		return nil, errDeviceFatal(op)
	}
	if cfg.Depth == 0 || cfg.Depth > maxCQE {
		return nil, provider.Errorf(op, "depth %d: %w", cfg.Depth, errEINVAL)
	}
	size := cfg.CQESize
	if size == 0 {
		size = prm.CQE64Size
	}
	if size != prm.CQE64Size && size != prm.CQE128Size {
		return nil, provider.Errorf(op, "CQE size %d: %w", size, errEINVAL)
	}
	// The model writes every CQE in full: it refuses compression (its
	// DeviceAttr reports none) rather than accept it and never compress, so
	// that code relying on mini-CQE sessions learns it is not tested here.
	if cfg.Compression != ctx.CQECompressionNone {
		return nil, provider.Errorf(op, "CQE compression (%v mini-CQE format): the software HCA writes full CQEs only: %w", cfg.Compression, ctx.ErrNotSupported)
	}
	// Padding is what the model does anyway: a 128-byte CQE's 64 bytes of
	// content sit in its second half and the whole line is written.
	if cfg.CQEPadding && size != prm.CQE128Size {
		return nil, provider.Errorf(op, "CQE padding needs 128-byte CQEs, not %d: %w", size, errEINVAL)
	}
	if cfg.CompVector >= compVectors {
		return nil, provider.Errorf(op, "completion vector %d of %d: %w", cfg.CompVector, compVectors, errEINVAL)
	}
	// As rdma-core: one more entry than asked for, rounded up to a power of
	// two.
	cnt := roundPow2(cfg.Depth + 1)
	c := &cq{f: d.f, dev: d, cnt: cnt, size: size, evfd: -1, timestamps: cfg.Timestamps}
	var err error
	if c.bufs[0], err = region(int(cnt * size)); err != nil {
		return nil, provider.Errorf(op, "ring: %w", err)
	}
	if c.bufs[1], err = region(pageSize); err != nil {
		freeAll(c.bufs[:]...)
		return nil, provider.Errorf(op, "doorbell record: %w", err)
	}
	if c.bufs[2], err = region(pageSize); err != nil {
		freeAll(c.bufs[:]...)
		return nil, provider.Errorf(op, "UAR: %w", err)
	}
	if cfg.EventChannel {
		// A semaphore: each ReadEvent consumes one event, as
		// ibv_get_cq_event does.
		fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC|unix.EFD_SEMAPHORE)
		if err != nil {
			freeAll(c.bufs[:]...)
			return nil, provider.Errorf(op, "completion channel: %w", err)
		}
		c.evfd = fd
	}
	c.ring = c.bufs[0].Pointer()
	c.db = c.bufs[1].Pointer()
	c.uar = c.bufs[2].Pointer()
	// Every CQE starts INVALID with owner bit 0, as rdma-core's
	// mlx5_alloc_cq_buf initialises the ring of a CQ libmlx5 creates on a
	// NIC (the kernel's mlx5e writes owner bit 1, 0xf1, instead): the
	// ring the kit's poller meets on hardware.
	for i := uint32(0); i < cnt; i++ {
		p := unsafe.Add(c.ring, i*size+size-prm.CQE64Size)
		*(*byte)(unsafe.Add(p, prm.CQEOpOwn)) = prm.CQEInvalidOpOwn
	}
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	cqn, _, ok := d.f.cqns.take()
	if !ok {
		if c.evfd >= 0 {
			_ = unix.Close(c.evfd)
		}
		freeAll(c.bufs[:]...)
		return nil, exhausted(op, "CQNs", &d.f.cqns)
	}
	c.cqn = cqn
	d.f.addCQ(c)
	c.mem = keepMemory(c.bufs[:])
	return c, nil
}

func (c *cq) Descriptor() descriptor.CQ {
	return descriptor.CQ{Buf: c.ring, CQECnt: c.cnt, CQESize: c.size, DBRec: c.db, UAR: c.uar, CQN: c.cqn, Memory: c.mem}
}

func (c *cq) EventFD() int { return c.evfd }

func (c *cq) ReadEvent() (bool, error) {
	if c.evfd < 0 {
		return false, provider.Errorf("sim: read CQ event", "CQ has no completion channel: %w", ctx.ErrInvalidArgument)
	}
	var b [8]byte
	_, err := unix.Read(c.evfd, b[:])
	if err == unix.EAGAIN {
		return false, nil
	}
	if err != nil {
		return false, provider.Errorf("sim: read CQ event", "%w", err)
	}
	c.eventsRead.Add(1)
	return true, nil
}

func (c *cq) Close() error {
	c.f.mu.Lock()
	defer c.f.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	c.f.removeCQ(c)
	c.mem.closed()
	if c.evfd >= 0 {
		_ = unix.Close(c.evfd)
	}
	// The ring, doorbell record and UAR stay mapped while a poller can
	// reach them (see queueMemory).
	return nil
}

// ---- shared receive queues ----

type srq struct {
	f      *Fabric
	pd     *pd
	srqn   uint32
	bufs   [2]*ctx.Buffer
	mem    *queueMemory // owns bufs once created
	ring   unsafe.Pointer
	cnt    uint32
	stride uint32
	maxSGE uint32
	db     unsafe.Pointer

	counter  uint16 // doorbell value last accepted
	consumed uint16
	hwHead   uint16
	lastRaw  uint32
	// limit is the armed SRQ limit, 0 when disarmed (ArmLimit).
	limit  uint32
	closed bool
}

func (p *pd) CreateSRQ(cfg ctx.SRQConfig) (provider.SRQ, error) {
	const op = "sim: create SRQ"
	if p.dev.dead() {
		return nil, errDeviceFatal(op)
	}
	if cfg.Depth == 0 || cfg.Depth >= maxRecvWR {
		return nil, provider.Errorf(op, "depth %d: %w", cfg.Depth, errEINVAL)
	}
	if cfg.MaxSGE > maxSRQSGE {
		return nil, provider.Errorf(op, "max SGE %d above %d: %w", cfg.MaxSGE, maxSRQSGE, errEINVAL)
	}
	sge := max(cfg.MaxSGE, 1)
	stride := roundPow2(max(32, prm.SRQNextSize+sge*prm.DataSize))
	cnt := roundPow2(cfg.Depth + 1)
	s := &srq{f: p.f, pd: p, cnt: cnt, stride: stride, maxSGE: (stride - prm.SRQNextSize) / prm.DataSize}
	var err error
	if s.bufs[0], err = region(int(cnt * stride)); err != nil {
		return nil, provider.Errorf(op, "ring: %w", err)
	}
	if s.bufs[1], err = region(pageSize); err != nil {
		freeAll(s.bufs[:]...)
		return nil, provider.Errorf(op, "doorbell record: %w", err)
	}
	s.ring = s.bufs[0].Pointer()
	s.db = s.bufs[1].Pointer()
	// The free list: each WQE links to the next; the last is the tail.
	for i := uint32(0); i+1 < cnt; i++ {
		prm.Store16(unsafe.Add(s.ring, i*stride+prm.SRQNextWQEIndex), uint16(i+1))
	}
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	if p.closed {
		freeAll(s.bufs[:]...)
		return nil, provider.Errorf(op, "PD: %w", ctx.ErrClosed)
	}
	srqn, _, ok := p.f.srqns.take()
	if !ok {
		freeAll(s.bufs[:]...)
		return nil, exhausted(op, "SRQNs", &p.f.srqns)
	}
	s.srqn = srqn
	p.f.addSRQ(s)
	s.mem = keepMemory(s.bufs[:])
	return s, nil
}

func (s *srq) Descriptor() descriptor.SRQ {
	return descriptor.SRQ{Buf: s.ring, DBRec: s.db, Stride: s.stride, WQECnt: s.cnt,
		Head: 0, Tail: s.cnt - 1, SRQN: s.srqn, MaxRecvSGE: s.maxSGE, Memory: s.mem}
}

func (s *srq) Close() error {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	if s.closed {
		return nil
	}
	s.closed = true
	s.f.removeSRQ(s)
	s.mem.closed()
	// The ring and doorbell record stay mapped while a receive ring can
	// reach them (see queueMemory).
	return nil
}

// ---- queue pairs ----

type qp struct {
	f      *Fabric
	dev    *device
	pd     *pd
	qpn    uint32
	typ    ctx.QPType
	sendCQ *cq
	recvCQ *cq
	srq    *srq
	bufs   [4]*ctx.Buffer
	mem    *queueMemory // owns bufs once created

	sq         unsafe.Pointer
	sqCnt      uint32 // WQEBBs
	rq         unsafe.Pointer
	rqCnt      uint32
	rqStride   uint32
	rqMaxSGE   uint32
	db         unsafe.Pointer
	bf         unsafe.Pointer
	maxInline  uint32
	maxSendSGE uint32
	maxWQEBBs  uint32

	dcKey        uint64
	scatterToCQE bool
	// uc: an RC QP that is a UC QP (simadopt.QPConfig.Unreliable): its
	// requests are not acknowledged and its responder drops what it
	// cannot take (ucDrop).
	uc bool
	// commEst: an RC or UC QP that entered RTR and has not yet received
	// a packet there; the first one raises COMM_EST (receivedInRTR).
	// It is true only in RTR: the modify to RTR sets it, and every other
	// change of state clears it.
	commEst bool

	state ctx.QPState
	attr  ctx.QPAttr // accumulated attributes

	sqPI, sqCI   uint16
	rqHead, rqCI uint16
	lastSQRaw    uint32
	lastRQRaw    uint32

	bfSnap []byte // BlueFlame buffers as last seen (strict, Manual)
	// reg is the doorbell register strict mode watches for the send
	// queue (checkRung): bf for a QP of the model's own, the adopter's
	// register for an adopted one (nil: not watched). Its buffers are at
	// reg and reg+regSize; regSeen holds their first 8 bytes as last seen.
	reg     unsafe.Pointer
	regSize uintptr
	regSeen [2]uint64
	// unrung: the doorbell record moved the producer index past rungPI,
	// the index of the last register write seen, with no register write
	// since; reportedPI is the index up to which that was reported, and
	// unrungAt when the model first saw the advance not yet reported.
	unrung             bool
	rungPI, reportedPI uint16
	unrungAt           int64
	// sharedBF: bf is the device's shared doorbell-only register, not a
	// register of the QP's own (Options.BlueFlameRegisters).
	sharedBF bool

	blockedUntil int64
	// udWaitSince is when the UD SEND at the consumer index first found
	// its destination's ring full (0: it has not; wireSendUD).
	udWaitSince int64
	rnrCount    int
	retryCount  int
	// rnrRetries and transportRetries count every resend scheduled after
	// an RNR NAK and after an ACK timeout, over the QP's life.
	rnrRetries       uint64
	transportRetries uint64
	closed           bool

	wire wireQP // the state of requests to and from other processes
}

func (q *qp) sqPending() uint16 { return q.sqPI - q.sqCI }

func (p *pd) CreateQueuePair(cfg provider.QueuePairConfig) (provider.QueuePair, error) {
	op := "sim: create " + cfg.Type.String() + " QP"
	if p.dev.dead() {
		return nil, errDeviceFatal(op)
	}
	bad := func(format string, args ...any) error {
		return provider.Errorf(op, format+": %w", append(args, errEINVAL)...)
	}
	sendCQ, ok1 := cfg.SendCQ.(*cq)
	recvCQ, ok2 := cfg.RecvCQ.(*cq)
	if !ok1 || !ok2 {
		return nil, bad("CQ of another provider")
	}
	var sr *srq
	if cfg.SRQ != nil {
		var ok bool
		if sr, ok = cfg.SRQ.(*srq); !ok {
			return nil, bad("SRQ of another provider")
		}
	}
	caps := cfg.Caps
	q := &qp{f: p.f, dev: p.dev, pd: p, typ: cfg.Type, sendCQ: sendCQ, recvCQ: recvCQ, srq: sr,
		dcKey: cfg.DCKey, scatterToCQE: scatterToCQE(cfg.Type, cfg.ScatterToCQE, recvCQ), state: ctx.QPStateReset}
	hasSQ := cfg.Type != ctx.QPTypeDCT
	hasRQ := sr == nil && (cfg.Type == ctx.QPTypeRC || cfg.Type == ctx.QPTypeUD) && caps.RecvDepth > 0
	if cfg.Type == ctx.QPTypeDCT && sr == nil {
		return nil, bad("a DCT needs an SRQ")
	}
	if caps.MaxRecvSGE > maxSGE {
		return nil, bad("more than %d receive SGEs", maxSGE)
	}
	if hasSQ {
		if caps.SendDepth == 0 {
			return nil, bad("send depth 0")
		}
		// The ring rdma-core would allocate for the kit's request, refused
		// where the type's limits are exceeded.
		_, g, err := sqsize.Plan(cfg.Type, caps, sendQueueDevice)
		if le := (*sqsize.LimitError)(nil); errors.As(err, &le) {
			// What mlx5_calc_sq_size refuses, with its errno.
			return nil, provider.Errorf(op, "%s: %w", le.Msg, errEINVAL)
		}
		if err != nil {
			return nil, provider.Errorf(op, "%w", err)
		}
		q.sqCnt = g.WQECnt
		q.maxWQEBBs = g.WQEBBs()
		q.maxInline = g.MaxInline
		q.maxSendSGE = g.MaxSGE
	}
	if hasRQ {
		if caps.RecvDepth > maxRecvWR {
			return nil, bad("receive depth %d", caps.RecvDepth)
		}
		stride := roundPow2(max(caps.MaxRecvSGE, 1) * prm.DataSize)
		total := max(roundPow2(caps.RecvDepth)*stride, prm.WQEBBSize)
		q.rqStride = stride
		q.rqCnt = total / stride
		q.rqMaxSGE = stride / prm.DataSize
	}
	var err error
	fail := func(what string, e error) (provider.QueuePair, error) {
		freeAll(q.bufs[:]...)
		return nil, provider.Errorf(op, "%s: %w", what, e)
	}
	if q.sqCnt > 0 {
		if q.bufs[0], err = region(int(q.sqCnt * prm.WQEBBSize)); err != nil {
			return fail("send ring", err)
		}
		q.sq = q.bufs[0].Pointer()
	}
	if q.rqCnt > 0 {
		if q.bufs[1], err = region(int(q.rqCnt * q.rqStride)); err != nil {
			return fail("receive ring", err)
		}
		q.rq = q.bufs[1].Pointer()
	}
	if q.bufs[2], err = region(pageSize); err != nil {
		return fail("doorbell record", err)
	}
	q.db = q.bufs[2].Pointer()
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	if p.closed || sendCQ.closed || recvCQ.closed || (sr != nil && sr.closed) {
		freeAll(q.bufs[:]...)
		return nil, provider.Errorf(op, "PD, CQ or SRQ: %w", ctx.ErrClosed)
	}
	qpn, _, ok := p.f.qpns.take()
	if !ok {
		freeAll(q.bufs[:]...)
		return nil, exhausted(op, "QPNs", &p.f.qpns)
	}
	q.qpn = qpn
	if q.sqCnt > 0 {
		if err := p.dev.attachBlueFlameLocked(q); err != nil {
			p.f.qpns.give(qpn)
			freeAll(q.bufs[:]...)
			return nil, provider.Errorf(op, "BlueFlame page: %w", err)
		}
	}
	p.f.addQP(q)
	q.mem = keepMemory(q.bufs[:])
	return q, nil
}

func (q *qp) Descriptor() descriptor.QP {
	d := descriptor.QP{
		QPN:        q.qpn,
		DBRec:      q.db,
		SQ:         descriptor.Ring{Buf: q.sq, WQECnt: q.sqCnt, Stride: prm.WQEBBSize},
		RQ:         descriptor.Ring{Buf: q.rq, WQECnt: q.rqCnt, Stride: q.rqStride},
		BlueFlame:  q.bf,
		MaxInline:  q.maxInline,
		MaxSendSGE: q.maxSendSGE,
		MaxRecvSGE: q.rqMaxSGE,
		Memory:     q.mem,
	}
	if q.sqCnt > 0 && !q.sharedBF {
		d.BlueFlameSize = bfSize
	}
	if q.sqCnt == 0 {
		d.SQ.Stride = 0
	}
	if q.srq != nil {
		d.MaxRecvSGE = q.srq.maxSGE
	}
	return d
}

func (q *qp) State() (ctx.QPState, error) {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	return q.state, nil
}

// Modify applies the transition to a.State if the kernel's table accepts
// it for the QP's type (package qpstate: a DCT goes RESET→INIT→RTR only, a
// DCI never to RESET, no QP to SQD, none from RESET to ERR) and refuses it
// otherwise with the table's error, which carries EINVAL as ibv_modify_qp
// does. The mask is the one the kit sends (qpstate.Derive): State and the
// transition's required attributes. It then refuses, with the kernel's
// EINVAL, the attribute values the kernel refuses against the model's
// device and port (qpstate.CheckAttr: port, address vector, P_Key index,
// read/atomic depths, path MTU), and applies the attributes of the mask.
// A refused modify changes nothing.
func (q *qp) Modify(a ctx.QPAttr) error {
	return q.modify(a, 0, true)
}

// modify is Modify with the mask qpstate.Derive returns (derive), or with
// the caller's mask, as the kernel's modify_qp takes one
// (simadopt.ModifyQueuePair): the caller checked that mask against the
// transition table (a mask without State moves to the state the QP is in,
// a.State), and only the attributes it names are checked and applied.
func (q *qp) modify(a ctx.QPAttr, mask qpstate.Mask, derive bool) error {
	op := "sim: modify " + q.typ.String() + " QP to " + a.State.String()
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	if q.closed {
		return provider.Errorf(op, "%w", ctx.ErrClosed)
	}
	// The answers held go first, as a NIC has sent them: one may move
	// this QP to error (a READ whose region is gone since), and the
	// transition is then judged from there.
	q.f.wireFlushAcks()
	if q.dev.deadLocked() && a.State != ctx.QPStateReset && a.State != ctx.QPStateError {
		return errDeviceFatal(op)
	}
	if derive {
		m, err := qpstate.Derive(q.typ, q.state, a.State)
		if err != nil {
			return provider.Errorf(op, "%w", err)
		}
		mask = m
	} else {
		r := qpstate.Lookup(q.typ, q.state, a.State)
		if q.uc {
			r = qpstate.LookupUC(q.state, a.State)
		}
		if !r.Legal {
			return provider.Errorf(op, "%w", &qpstate.Error{Type: q.typ, From: q.state, To: a.State, Mask: mask,
				Errno: syscall.EINVAL, Transition: true, Reason: r.Why})
		}
	}
	return q.modifyLocked(op, a, mask)
}

// modifyQueuePair is simadopt.ModifyQueuePair.
func modifyQueuePair(p provider.QueuePair, a ctx.QPAttr, mask qpstate.Mask) error {
	q, ok := p.(*qp)
	if !ok {
		return fmt.Errorf("sim: modify QP: a queue pair of another provider: %w", ctx.ErrInvalidArgument)
	}
	return q.modify(a, mask, false)
}

// modifyLocked checks the attributes of mask and applies the transition
// (f.mu held; the transition is legal for the QP's type, and the device
// alive or the move to RESET or ERR).
func (q *qp) modifyLocked(op string, a ctx.QPAttr, mask qpstate.Mask) error {
	bad := func(format string, args ...any) error {
		return provider.Errorf(op, format+": %w", append(args, errEINVAL)...)
	}
	from := q.state
	limits := q.dev.qpLimits()
	// uverbs modify_qp checks the ports, then refuses a controlled Q_Key
	// (bit 31) without CAP_NET_RAW, then hands the rest on.
	if err := qpstate.CheckPorts(q.typ, from, a.State, mask, &a, q.attr.Port, limits); err != nil {
		return provider.Errorf(op, "%w", err)
	}
	if mask&qpstate.QKey != 0 && a.QKey&0x80000000 != 0 && !kerrno.HasRawCap() {
		return provider.Errorf(op, "%w", kerrno.New("ibv_modify_qp",
			fmt.Sprintf("controlled Q_Key %#x (bit 31 set) without CAP_NET_RAW", a.QKey),
			syscall.EPERM, nil))
	}
	if q.uc {
		// A UC QP has none of RC's attributes of acknowledgement,
		// retry and READ/atomic depth: the values a modify carries for
		// them are not in its mask (qpstate.CheckUC), and not kept.
		mask &^= qpstate.MaxDestRdAtomic | qpstate.MinRNRTimer | qpstate.Timeout | qpstate.RetryCount |
			qpstate.RNRRetry | qpstate.MaxQPRdAtomic
	}
	if err := qpstate.CheckAttr(q.typ, from, a.State, mask, &a, q.attr.Port, limits); err != nil {
		return provider.Errorf(op, "%w", err)
	}
	switch a.State {
	case ctx.QPStateReset:
		q.reset()
		return nil
	case ctx.QPStateError:
		q.f.qpErrorLocked(q, "moved to error")
		return nil
	case ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS:
	default:
		// The table has no legal transition to SQD or SQE.
		return provider.Errorf(op, "%w", ctx.ErrNotSupported)
	}
	// The checks the kernel does not make, the model's own: then the
	// attributes, all or none.
	if mask&qpstate.PKeyIndex != 0 && a.PKeyIndex != 0 {
		// The port's P_Key index was checked against the kernel's
		// limits above, but for a DCT: mlx5_ib_modify_dct passes it to
		// the device unchecked; the model, with a single P_Key, refuses
		// any other.
		return bad("pkey index %d", a.PKeyIndex)
	}
	if mask&qpstate.PathMTU != 0 && q.typ != ctx.QPTypeUD && (a.PathMTU < ctx.MTU256 || a.PathMTU > portMTU) {
		// An RC or DCI path MTU was checked against the kernel's
		// limits above; a DCT's mlx5_ib_modify_dct does not check, the
		// model does, and none beyond the port's.
		return bad("path MTU %v", a.PathMTU)
	}
	if mask&qpstate.AV != 0 && q.typ == ctx.QPTypeRC && a.Path.GlobalRoute {
		// _ib_modify_qp resolves the destination MAC of a connected
		// QP's path on RoCE (ib_resolve_eth_dmac), and with it the
		// hop limit.
		if err := q.dev.h.roceFamilies(a.Path.SGIDIndex, a.Path.DGID); err != nil {
			return provider.Errorf(op, "%w", err)
		}
		if h := q.dev.h; h.link == ctx.LinkLayerEthernet && int(a.Path.SGIDIndex) < len(h.gids) {
			a.Path.HopLimit = addrvec.ResolvedHopLimit(h.gids[a.Path.SGIDIndex], a.Path.DGID, a.Path.HopLimit)
		}
	}
	if mask&qpstate.DestQPN != 0 && a.RemoteQPN > prm.CtrlQPNMask {
		// __mlx5_ib_modify_qp writes dest_qp_num into a 24-bit field
		// unchecked (0 too: what the firmware makes of QPN 0 is not
		// published; docs/hardware.md).
		return bad("remote QPN %#x", a.RemoteQPN)
	}
	rc, dct := q.typ == ctx.QPTypeRC, q.typ == ctx.QPTypeDCT
	if mask&qpstate.Port != 0 {
		q.attr.Port = a.Port
	}
	if mask&qpstate.PKeyIndex != 0 {
		q.attr.PKeyIndex = a.PKeyIndex
	}
	if mask&qpstate.QKey != 0 && q.typ == ctx.QPTypeUD {
		q.attr.QKey = a.QKey
	}
	if mask&qpstate.AccessFlags != 0 && (rc || dct) {
		q.attr.Access = a.Access
	}
	if mask&qpstate.PathMTU != 0 && q.typ != ctx.QPTypeUD {
		q.attr.PathMTU = a.PathMTU
	}
	if mask&qpstate.AV != 0 && (rc || dct) {
		// A DCI keeps no path: each of its WQEs carries an address.
		q.attr.Path = a.Path
		if rc {
			// What mlx5_set_path leaves in the QP context for
			// QUERY_QP to read back.
			q.attr.Path.StaticRate = qpstate.StaticRateKept(a.Path.StaticRate)
		}
	}
	if rc {
		if mask&qpstate.DestQPN != 0 {
			q.attr.RemoteQPN = a.RemoteQPN
		}
		if mask&qpstate.RQPSN != 0 {
			// next_rcv_psn and next_send_psn are 24-bit fields of
			// the QP context, which __mlx5_ib_modify_qp writes
			// unchecked (MLX5_SET keeps the low bits).
			q.attr.RQPSN = a.RQPSN & ctx.MaxPSN
		}
		if mask&qpstate.MaxDestRdAtomic != 0 {
			q.attr.MaxDestRdAtomic = a.MaxDestRdAtomic
		}
	}
	if mask&qpstate.MinRNRTimer != 0 && (rc || dct) {
		q.attr.MinRNRTimer = a.MinRNRTimer & 31
	}
	if mask&qpstate.SQPSN != 0 {
		q.attr.SQPSN = a.SQPSN & ctx.MaxPSN
	}
	// The acknowledgement timeout, retry counts and read depth: fields of
	// 5 and 3 bits in the QP context, where __mlx5_ib_modify_qp writes
	// them unchecked (MLX5_SET keeps the low bits).
	if mask&qpstate.Timeout != 0 {
		q.attr.Timeout = a.Timeout & 31
	}
	if mask&qpstate.RetryCount != 0 {
		q.attr.RetryCount = a.RetryCount & 7
	}
	if mask&qpstate.RNRRetry != 0 {
		q.attr.RNRRetry = a.RNRRetry & 7
	}
	if mask&qpstate.MaxQPRdAtomic != 0 {
		q.attr.MaxRdAtomic = a.MaxRdAtomic
	}
	q.wireTransition(from, a.State)
	q.state = a.State
	q.commEst = a.State == ctx.QPStateRTR && q.typ == ctx.QPTypeRC
	return nil
}

// qpLimits are the limits the kernel would check a modify against on the
// model's device: those it reports in Query and QueryPort (f.mu held).
func (d *device) qpLimits() qpstate.Limits {
	dev := d.attr()
	port := d.portAttrLocked(1)
	return qpstate.LimitsOf(dev, port)
}

// reset returns the QP to RESET: every queued WQE is discarded and the
// doorbell record cleared, as rdma-core does on the way to RESET.
func (q *qp) reset() {
	q.state = ctx.QPStateReset
	q.commEst = false
	q.attr = ctx.QPAttr{}
	q.sqPI, q.sqCI, q.rqHead, q.rqCI = 0, 0, 0, 0
	q.lastSQRaw, q.lastRQRaw = 0, 0
	q.unrung = false
	q.blockedUntil, q.rnrCount, q.retryCount, q.udWaitSince = 0, 0, 0, 0
	q.f.wireForget(q)
	q.wire = wireQP{}
	// A QP in RESET gets no more CQEs and takes no more messages, as a
	// closed one.
	q.dropHeld()
	prm.Store32(q.db, 0)
	prm.Store32(unsafe.Add(q.db, prm.DoorbellRecordSendB), 0)
}

func (q *qp) Close() error {
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	if q.closed {
		return nil
	}
	q.f.wireFlushAcks() // those of requests it executed: a NIC has sent them
	q.closed = true
	q.f.wireForget(q)
	q.f.removeQP(q)
	q.mem.closed()
	q.dev.detachBlueFlameLocked(q)
	q.dropHeld()
	// The rings, doorbell record and BlueFlame page stay mapped while a
	// send queue, a stage or a receive ring can reach them (see
	// queueMemory).
	return nil
}

// dropHeld drops the messages held for q and the CQEs its delaying CQs
// still hold for it (f.mu held): q takes and completes nothing more.
func (q *qp) dropHeld() {
	q.f.dropHeldFor(q)
	for _, c := range []*cq{q.sendCQ, q.recvCQ} {
		if c != nil {
			c.dropPendingFor(q)
		}
	}
}

func (q *qp) String() string { return fmt.Sprintf("%v QP %#x", q.typ, q.qpn) }

// scatterToCQE says whether a QP of type t asking for scatter-to-CQE gets
// it: a DCT only over 128-byte CQEs, as mlx5_ib's create_dct turns it on
// (in a 64-byte CQE the 32 bytes of payload would cover flags_rqpn, which
// carries the DCI's QPN); any other type whatever its CQE size.
func scatterToCQE(t ctx.QPType, asked bool, recvCQ *cq) bool {
	return asked && (t != ctx.QPTypeDCT || recvCQ.size == prm.CQE128Size)
}
