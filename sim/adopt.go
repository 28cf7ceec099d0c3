package sim

import (
	"math/bits"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
)

// The hooks below let a model of the kernel side (package cgo/emulate)
// create objects over memory the user library allocated, as a real
// device does: libmlx5 allocates a CQ's ring and doorbell record itself
// and tells the kernel where they are.

// protectionDomainNumber returns the PD number of a protection domain of
// the model (what mlx5_ib returns to libmlx5 as pdn); ok is false for a
// protection domain of another provider.
func protectionDomainNumber(p provider.ProtectionDomain) (pdn uint32, ok bool) {
	x, ok := p.(*pd)
	if !ok {
		return 0, false
	}
	return x.pdn, true
}

// adoptCompletionQueue creates a completion queue of dev (a device of the
// model) over the caller's ring and doorbell record: the model writes its
// CQEs there. The memory must stay mapped until the queue is closed; the
// model does not free it. The arm is read from the doorbell record (the
// UAR page the library rings is its own); Descriptor().UAR is a page of
// the model's that nothing watches.
func adoptCompletionQueue(dev provider.Device, cfg simadopt.CQConfig) (provider.CompletionQueue, error) {
	const op = "sim: adopt CQ"
	d, ok := dev.(*device)
	if !ok {
		return nil, provider.Errorf(op, "not a device of the software HCA: %w", ctx.ErrInvalidArgument)
	}
	switch {
	case cfg.Ring == nil || cfg.DBRec == nil:
		return nil, provider.Errorf(op, "nil ring or doorbell record: %w", ctx.ErrInvalidArgument)
	case cfg.Count < 2 || cfg.Count > maxCQE+1 || cfg.Count&(cfg.Count-1) != 0:
		return nil, provider.Errorf(op, "%d CQEs (a power of two from 2 to %d): %w", cfg.Count, maxCQE+1, ctx.ErrInvalidArgument)
	case cfg.CQESize != prm.CQE64Size && cfg.CQESize != prm.CQE128Size:
		return nil, provider.Errorf(op, "CQE size %d: %w", cfg.CQESize, ctx.ErrInvalidArgument)
	case uintptr(cfg.Ring)%uintptr(cfg.CQESize) != 0 || uintptr(cfg.DBRec)%8 != 0:
		return nil, provider.Errorf(op, "ring %p or doorbell record %p misaligned: %w", cfg.Ring, cfg.DBRec, ctx.ErrInvalidArgument)
	case cfg.CompVector >= compVectors:
		return nil, provider.Errorf(op, "completion vector %d of %d: %w", cfg.CompVector, compVectors, ctx.ErrInvalidArgument)
	}
	// The model writes its CQEs into the ring and the arm state into the
	// record: a page of either that is not writable would fault the
	// process at the first write. The kernel pins the ring for writing
	// (ib_umem_get with IB_ACCESS_LOCAL_WRITE: EFAULT); the record the
	// model needs writable as well.
	if err := checkProtection("ibv_create_cq", uint64(uintptr(cfg.Ring)), uint64(cfg.Count)*uint64(cfg.CQESize), true); err != nil {
		return nil, provider.Errorf(op, "ring: %w", err)
	}
	if err := checkProtection("ibv_create_cq", uint64(uintptr(cfg.DBRec)), 8, true); err != nil {
		return nil, provider.Errorf(op, "doorbell record: %w", err)
	}
	c := &cq{f: d.f, dev: d, cnt: cfg.Count, size: cfg.CQESize, evfd: -1, ring: cfg.Ring, db: cfg.DBRec,
		recordArm: true, lastRecArm: armRecordUnarmed, onEvent: cfg.Event, timestamps: cfg.Timestamps}
	uar, err := region(pageSize)
	if err != nil {
		return nil, provider.Errorf(op, "UAR: %w", err)
	}
	c.bufs[2] = uar
	c.uar = uar.Pointer()
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if d.closed {
		freeAll(uar)
		return nil, provider.Errorf(op, "%w", ctx.ErrClosed)
	}
	if d.deadLocked() {
		freeAll(uar)
		return nil, errDeviceFatal(op)
	}
	cqn, _, ok := d.f.cqns.take()
	if !ok {
		freeAll(uar)
		return nil, exhausted(op, "CQNs", &d.f.cqns)
	}
	c.cqn = cqn
	markUnarmed(c.db)
	d.f.addCQ(c)
	c.mem = keepMemory([]*ctx.Buffer{uar})
	return c, nil
}

// resizeCompletionQueue moves a CQ adoptCompletionQueue created to a new
// ring (simadopt.ResizeCompletionQueue). The switch is made under the
// fabric's lock, which every CQE write holds: the CQEs written before it
// are in the old ring up to the resize CQE, every later one (a delayed CQE
// falling due included) in the new ring, so that writeCQE itself does not
// change. The producer index goes on counting: the first CQE after the
// resize takes the index after the resize CQE's, in the new ring, with the
// owner bit of that index's lap of the new ring, which is where and how
// libmlx5 looks for it.
func resizeCompletionQueue(q provider.CompletionQueue, cfg simadopt.CQResize) error {
	const op = "sim: resize CQ"
	c, ok := q.(*cq)
	switch {
	case !ok || !c.recordArm:
		return provider.Errorf(op, "not a CQ adopted from the caller's memory: %w", ctx.ErrInvalidArgument)
	case cfg.Ring == nil:
		return provider.Errorf(op, "nil ring: %w", ctx.ErrInvalidArgument)
	case cfg.Count < 2 || cfg.Count > maxCQE+1 || cfg.Count&(cfg.Count-1) != 0:
		return provider.Errorf(op, "%d CQEs (a power of two from 2 to %d): %w", cfg.Count, maxCQE+1, ctx.ErrInvalidArgument)
	case uintptr(cfg.Ring)%uintptr(c.size) != 0:
		return provider.Errorf(op, "ring %p misaligned: %w", cfg.Ring, ctx.ErrInvalidArgument)
	}
	// The model writes CQEs into the new ring, which the kernel pins for
	// writing (EFAULT when a page of it is not writable).
	if err := checkProtection("ibv_resize_cq", uint64(uintptr(cfg.Ring)), uint64(cfg.Count)*uint64(c.size), true); err != nil {
		return provider.Errorf(op, "ring: %w", err)
	}
	f := c.f
	f.mu.Lock()
	defer f.mu.Unlock()
	if c.closed {
		return provider.Errorf(op, "%w", ctx.ErrClosed)
	}
	if c.dev.deadLocked() {
		return errDeviceFatal(op)
	}
	if c.errored {
		// A CQ context in error takes no more CQEs, the resize CQE
		// included, so libmlx5 would find none to stop its copy at.
		return provider.Errorf(op, "CQN %#x in error (%s): %w", c.cqn, c.errDetail, errEINVAL)
	}
	// An arm written before the command is the old context's, as a
	// doorbell that reached the device before it.
	f.takeArm(c)
	used, _ := c.unconsumed()
	if used >= c.cnt {
		return provider.Errorf(op, "CQN %#x: no room for the resize CQE, %d CQEs unconsumed in a ring of %d: %w",
			c.cqn, used, c.cnt, errEINVAL)
	}
	if used >= cfg.Count {
		// The firmware's "bad size, too many outstanding CQEs": the new
		// ring holds the unconsumed CQEs and the resize CQE until the
		// consumer index record passes it.
		return provider.Errorf(op, "CQN %#x: %d CQEs unconsumed and the resize CQE do not fit %d entries: %w",
			c.cqn, used, cfg.Count, errEINVAL)
	}
	// The resize CQE: opcode 5, the rest zero, the owner bit of the old
	// ring's lap, the word with it stored last.
	slot := unsafe.Add(c.ring, (c.pi&(c.cnt-1))*c.size)
	clear(unsafe.Slice((*byte)(slot), c.size-prm.CQE64Size+prm.CQEWQECounter))
	opOwn := prm.OpOwn(prm.CQEResizeCQ, prm.CQEFormatNone, false, uint8(boolBit(c.pi&c.cnt != 0, prm.CQEOwnerMask)))
	storeRelease32((*uint32)(unsafe.Add(slot, c.size-prm.CQE64Size+prm.CQEWQECounter)), uint32(opOwn)<<24)
	// The resize CQE is the library's, not the consumer's: it raises no
	// event, and an arm behind it finds nothing unreported it did not
	// find before.
	if c.notified == c.pi {
		c.notified++
	}
	c.pi++
	c.ring, c.cnt = cfg.Ring, cfg.Count
	return nil
}

// lookupMR returns the live memory region with the given key.
func (f *Fabric) lookupMR(key uint32) (simadopt.MRInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, ok := f.mrs[key]
	if !ok || m.closed {
		return simadopt.MRInfo{}, false
	}
	return simadopt.MRInfo{Key: m.key, Addr: m.addr, Length: m.length, Access: m.access, PDN: m.pd.pdn}, true
}

// lookupCQ returns the live completion queue with the given number.
func (f *Fabric) lookupCQ(cqn uint32) (simadopt.CQInfo, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.cqs[cqn]
	if !ok || c.closed {
		return simadopt.CQInfo{}, false
	}
	return simadopt.CQInfo{CQN: c.cqn, Ring: c.ring, Count: c.cnt, CQESize: c.size, DBRec: c.db, Timestamps: c.timestamps}, true
}

// adoptQueuePair creates a queue pair of pd (a protection domain of the
// model) over the caller's rings and doorbell record: the
// engine reads the WQEs the caller writes there and follows the counters
// of the doorbell record, as it does for a queue pair of its own. The
// memory must stay mapped until the queue pair is closed; the model does
// not free it. The doorbell record is what the engine reads; strict mode
// also watches the register the caller names (cfg.Register, see
// checkRung), which must stay mapped until forgetRegister or Close.
// Descriptor().BlueFlame is a register of the model's own that nothing
// watches.
func adoptQueuePair(p provider.ProtectionDomain, cfg simadopt.QPConfig) (provider.QueuePair, error) {
	op := "sim: adopt " + cfg.Type.String() + " QP"
	bad := func(format string, args ...any) error {
		return provider.Errorf(op, format+": %w", append(args, ctx.ErrInvalidArgument)...)
	}
	pr, ok := p.(*pd)
	if !ok {
		return nil, bad("not a protection domain of the software HCA")
	}
	if pr.dev.dead() {
		return nil, errDeviceFatal(op)
	}
	sendCQ, ok1 := cfg.SendCQ.(*cq)
	recvCQ, ok2 := cfg.RecvCQ.(*cq)
	var sr *srq
	if cfg.SRQ != nil {
		var ok bool
		if sr, ok = cfg.SRQ.(*srq); !ok {
			return nil, bad("SRQ of another provider")
		}
	}
	if cfg.Type == ctx.QPTypeDCT {
		return adoptDCT(pr, sendCQ, recvCQ, sr, cfg, op)
	}
	switch {
	case !ok1 || !ok2:
		return nil, bad("CQ of another provider")
	case cfg.Type != ctx.QPTypeRC && cfg.Type != ctx.QPTypeUD && cfg.Type != ctx.QPTypeDCI:
		return nil, bad("type %v (RC, UD, DCI or DCT)", cfg.Type)
	case cfg.Unreliable && cfg.Type != ctx.QPTypeRC:
		return nil, bad("unreliable %v (UC is an RC QP with Unreliable)", cfg.Type)
	case cfg.Type == ctx.QPTypeDCI && (cfg.RQCount > 0 || sr != nil):
		return nil, bad("a DCI has no receive queue")
	case sr != nil && cfg.RQCount > 0:
		return nil, bad("a receive ring and an SRQ")
	case cfg.SQ == nil || cfg.DBRec == nil:
		return nil, bad("nil send ring or doorbell record")
	case cfg.SQCount == 0 || cfg.SQCount > maxSendWQEBB || cfg.SQCount&(cfg.SQCount-1) != 0:
		return nil, bad("%d send WQEBBs (a power of two up to %d)", cfg.SQCount, maxSendWQEBB)
	case uintptr(cfg.SQ)%prm.WQEBBSize != 0 || uintptr(cfg.DBRec)%8 != 0:
		return nil, bad("send ring %p or doorbell record %p misaligned", cfg.SQ, cfg.DBRec)
	case cfg.Caps.MaxRecvSGE > maxSGE:
		return nil, bad("more than %d receive SGEs", maxSGE)
	}
	// The model clears the doorbell record when the QP goes to RESET (as
	// rdma-core does): a record that is not writable would fault the
	// process there. The kernel pins it read-only (mlx5_ib_db_map_user)
	// and leaves the writes to the library, which would fault on its
	// first post; the model refuses it as a pin for writing would.
	if err := checkProtection("ibv_create_qp", uint64(uintptr(cfg.DBRec)), 8, true); err != nil {
		return nil, provider.Errorf(op, "doorbell record: %w", err)
	}
	if cfg.RQCount > 0 {
		s := cfg.RQStride
		switch {
		case cfg.RQ == nil:
			return nil, bad("nil receive ring")
		case cfg.RQCount > maxRecvWR || cfg.RQCount&(cfg.RQCount-1) != 0:
			return nil, bad("%d receive WQEs (a power of two up to %d)", cfg.RQCount, maxRecvWR)
		case s < prm.DataSize || s > maxSGE*prm.DataSize || s&(s-1) != 0:
			return nil, bad("receive stride %d", s)
		case uintptr(cfg.RQ)%uintptr(s) != 0:
			return nil, bad("receive ring %p misaligned", cfg.RQ)
		}
	}
	caps := cfg.Caps
	if caps.SendDepth == 0 {
		caps.SendDepth = 1
	}
	// An inline size libmlx5 granted beyond what a WQE expresses is taken
	// at the limit (sqsize.Granted).
	_, g, err := sqsize.Plan(cfg.Type, sqsize.Granted(cfg.Type, caps, sendQueueDevice), sendQueueDevice)
	if err != nil {
		return nil, provider.Errorf(op, "%w", err)
	}
	// mlx5_ib does not size a user QP's WQEs: set_user_buf_size takes the
	// library's ring as it comes, and libmlx5 sizes it for the send
	// operations the QP was created with (send_ops_flags), which the
	// kernel never learns. So a ring smaller than the kernel's own sizing
	// of the largest WQE is accepted, and its size bounds the WQEs the
	// model executes.
	maxWQEBBs := min(g.WQEBBs(), cfg.SQCount)
	q := &qp{f: pr.f, dev: pr.dev, pd: pr, typ: cfg.Type, sendCQ: sendCQ, recvCQ: recvCQ, srq: sr, state: ctx.QPStateReset,
		scatterToCQE: cfg.ScatterToCQE, uc: cfg.Unreliable, sq: cfg.SQ, sqCnt: cfg.SQCount, db: cfg.DBRec,
		maxWQEBBs: maxWQEBBs, maxInline: g.MaxInline, maxSendSGE: g.MaxSGE}
	if cfg.RQCount > 0 {
		q.rq, q.rqCnt, q.rqStride, q.rqMaxSGE = cfg.RQ, cfg.RQCount, cfg.RQStride, cfg.RQStride/prm.DataSize
	}
	pr.f.mu.Lock()
	defer pr.f.mu.Unlock()
	if pr.closed || sendCQ.closed || recvCQ.closed || (sr != nil && sr.closed) {
		return nil, provider.Errorf(op, "PD, CQ or SRQ: %w", ctx.ErrClosed)
	}
	qpn, _, ok := pr.f.qpns.take()
	if !ok {
		return nil, exhausted(op, "QPNs", &pr.f.qpns)
	}
	q.qpn = qpn
	if err := pr.dev.attachBlueFlameLocked(q); err != nil {
		pr.f.qpns.give(qpn)
		return nil, provider.Errorf(op, "BlueFlame page: %w", err)
	}
	// Strict mode watches the register the caller rings, not the
	// model's own, which nothing writes.
	q.watchRegister(cfg.Register, cfg.RegisterSize)
	pr.f.addQP(q)
	q.mem = keepMemory(q.bufs[:])
	return q, nil
}

// queuePairAttributes returns the state of a queue pair of the model and
// the attributes its transitions applied, as the QP context holds them
// (what a kernel answers to QUERY_QP: query_qp_attr reads the context
// back); ok is false for a queue pair of another provider. The access
// flags are the context's remote enables (remoteAccess), the read and
// atomic depths the context's (contextDepth), and a UD QP's path MTU the
// 4096 bytes __mlx5_ib_modify_qp writes into its context at every modify.
func queuePairAttributes(p provider.QueuePair) (state ctx.QPState, attr ctx.QPAttr, ok bool) {
	q, ok := p.(*qp)
	if !ok {
		return 0, ctx.QPAttr{}, false
	}
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	attr = q.attr
	attr.Access = q.remoteAccess()
	attr.MaxRdAtomic = contextDepth(q.attr.MaxRdAtomic)
	attr.MaxDestRdAtomic = contextDepth(q.attr.MaxDestRdAtomic)
	if q.typ == ctx.QPTypeUD && q.state != ctx.QPStateReset {
		attr.PathMTU = ctx.MTU4096
	}
	return q.state, attr, true
}

// contextDepth is a read or atomic depth as the QP context keeps it:
// __mlx5_ib_modify_qp writes a depth d > 0 as log_sra_max (log_rra_max)
// = fls(d - 1) into a 3-bit field and leaves it 0 for d = 0 or a QP that
// never set one, and query_qp_attr answers 1 << field: d rounded up to a
// power of two, 1 for 0.
func contextDepth(d uint8) uint8 {
	if d == 0 {
		return 1
	}
	return 1 << (bits.Len8(d-1) & 7)
}

// forgetRegister stops the watch of the doorbell register an adopted queue
// pair was created with (simadopt.ForgetRegister): the caller is about to
// unmap it. The QP goes on with its doorbell record alone.
func forgetRegister(p provider.QueuePair) {
	q, ok := p.(*qp)
	if !ok {
		return
	}
	q.f.mu.Lock()
	defer q.f.mu.Unlock()
	if q.reg != nil {
		q.watchRegister(nil, 0)
	}
}
