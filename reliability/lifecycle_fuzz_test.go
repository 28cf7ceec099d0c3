package reliability

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// FuzzLifecycle reads its input as a program of public calls on a small
// pool of objects — Contexts, protection domains, memory regions,
// completion queues with their Pollers, shared receive queues, RC and UD
// queue pairs — and runs it on the software HCA: create and close in any
// order (parents before children, twice, use after close), connect,
// post sends, writes, reads, atomics and receives with keys, addresses and
// lengths in and out of range, poll, reset, fail, modify through the
// control-plane handle, and close while another goroutine posts and
// polls. After every call it checks that nothing
// panicked or hung, that a refused call's error wraps a documented
// sentinel (ctx.ErrClosed when the model says the object or a parent is
// closed), that every object reports closed exactly when it or one of its
// parents was closed, that every completion retires a work request that
// was outstanding, once, and that no byte outside the live memory regions
// changed.
//
// The first byte of the input picks the world: a private manual-mode
// Fabric (deterministic: the test runs the model), a private engine-mode
// one (the model runs on its own goroutine), or two engine-mode Fabrics
// joined to one shared fabric as two processes would (Context slots open
// either: the queue pairs of one reach those of the other through the
// shared memory rings), and whether Context slots open the registered
// provider "sim" (ctx.Open) instead. Then each op takes lfOpSize bytes:
// an opcode and its arguments.
func FuzzLifecycle(f *testing.F) {
	for _, seed := range lifecycleSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runLifecycle(t, data)
	})
}

const (
	lfOpSize   = 6
	lfMaxOps   = 40
	lfContexts = 3
	lfPDs      = 4
	lfMRs      = 6
	lfCQs      = 4
	lfSRQs     = 2
	lfQPCount  = 6
	lfArenas   = 2
	// Each arena is one guarded page: lfSlots slots of lfSlotSize bytes,
	// with lfGap canary bytes before, between and after them. Memory
	// regions cover exactly one slot.
	lfSlots    = 4
	lfSlotSize = 512
	lfGap      = 256
	lfPageSize = 4096
)

// The opcodes of a lifecycle program.
const (
	lfOpenContext = iota
	lfCloseContext
	lfAllocPD
	lfClosePD
	lfRegisterMR
	lfCloseMR
	lfCreateCQ
	lfCloseCQ
	lfCreateSRQ
	lfCloseSRQ
	lfNewRC
	lfNewUD
	lfCloseQP
	lfConnect
	lfPostSend
	lfPostRecv
	lfPostSRQRecv
	lfPoll
	lfRun
	lfResetQP
	lfFailQP
	lfCloseWhilePolling
	lfCloseBuffer
	lfPollerAddRemove
	lfCloseHandle
	lfModifyQP
	lfNumOps
)

var lfOpNames = [lfNumOps]string{
	"OpenContext", "CloseContext", "AllocPD", "ClosePD", "RegisterMR", "CloseMR",
	"CreateCQ", "CloseCQ", "CreateSRQ", "CloseSRQ", "NewRC", "NewUD", "CloseQP",
	"Connect", "PostSend", "PostRecv", "PostSRQRecv", "Poll", "Run", "ResetQP",
	"FailQP", "CloseWhilePolling", "CloseBuffer", "PollerAddRemove", "CloseHandle", "ModifyQP",
}

// lfSentinels are the errors the public API documents; every error a call
// returns must wrap one of them.
var lfSentinels = []error{
	ctx.ErrClosed, ctx.ErrNotSupported, ctx.ErrNoDevice, ctx.ErrInvalidArgument,
	ctx.ErrInvalidState, ctx.ErrBusy, ctx.ErrNoMemory, ctx.ErrNotFound, ctx.ErrPortNotActive,
	transport.ErrNotConnected, transport.ErrQPError, transport.ErrNoReceiveQueue,
	transport.ErrReceiveQueueFull, transport.ErrUnmatched, transport.ErrUnexpected,
	transport.ErrTransport,
	wqebuilder.ErrQueueFull, wqebuilder.ErrInlineTooLong, wqebuilder.ErrTooManySGE,
	wqebuilder.ErrWQETooLarge, wqebuilder.ErrSGETooLong, wqebuilder.ErrStaleStage,
	monocq.ErrUnknownQPN, monocq.ErrDuplicateQPN, monocq.ErrOverrun, monocq.ErrCorrupt, endpoint.ErrMalformed,
}

type lfContext struct {
	c      *ctx.Context
	closed bool // closed by the program
}

type lfPD struct {
	pd     *ctx.ProtectionDomain
	ctx    int
	closed bool
}

type lfMR struct {
	mr          *ctx.MemoryRegion
	pd          int
	arena, slot int
	access      ctx.Access
	closed      bool
	addr        uint64
	lkey, rkey  uint32
	length      uint32
}

type lfCQ struct {
	cq     *ctx.CompletionQueue
	p      *transport.Poller
	ctx    int
	closed bool
}

type lfSRQ struct {
	s      *transport.SharedReceiveQueue
	pd     int
	closed bool
	// recvs are the receive WQEs posted and not yet completed.
	recvs map[uint64]bool
}

type lfQP struct {
	rc      *rc.QP
	ud      *ud.QP
	q       *transport.Queue
	pd      int
	cq, rcq int
	srq     int // -1 without
	closed  bool
	// sends and recvs are the work requests posted and not yet completed.
	sends, recvs map[uint64]bool
	// remote is a UD address of another queue pair (ud.Remote), made at
	// Connect.
	remote *ud.Remote
}

type lfArena struct {
	buf    *ctx.Buffer
	mem    []byte
	closed bool // closed by the program: stop reading it
	// snap is the last content of each slot no live region covered.
	snap    [lfSlots][]byte
	covered [lfSlots]bool
}

type lfWorld struct {
	t      *testing.T
	f      *sim.Fabric
	manual bool
	shared bool // Context slots open the registered provider "sim"
	// f2 is a second engine-mode Fabric that joined f's shared fabric
	// (as another process would), or nil; fabric names it.
	f2     *sim.Fabric
	fabric string
	ctxs   [lfContexts]*lfContext
	pds    [lfPDs]*lfPD
	mrs    [lfMRs]*lfMR
	cqs    [lfCQs]*lfCQ
	srqs   [lfSRQs]*lfSRQ
	qps    [lfQPCount]*lfQP
	// dcis and dcts are the DC pools (FuzzDCLifecycle; empty in
	// FuzzLifecycle).
	dcis   [lfDCIs]*lfDCI
	dcts   [lfDCTs]*lfDCT
	arenas [lfArenas]*lfArena
	wrid   uint64
	step   int
	op     string
}

// lfFabricSeq numbers the shared fabrics of the worlds of this process.
var lfFabricSeq atomic.Uint64

// lfTrace logs every op (MLX5KIT_LIFECYCLE_TRACE=1), to read a failing
// input.
var lfTrace = os.Getenv("MLX5KIT_LIFECYCLE_TRACE") != ""

func (w *lfWorld) failf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("op %d (%s): %s", w.step, w.op, fmt.Sprintf(format, args...))
}

// checkErr fails unless err is nil or wraps a documented sentinel; with
// closed set it must wrap ctx.ErrClosed.
func (w *lfWorld) checkErr(what string, err error, closed bool) {
	w.t.Helper()
	if lfTrace {
		w.t.Logf("  %s: %v", what, err)
	}
	if err == nil {
		if closed {
			w.failf("%s: succeeded on a closed object", what)
		}
		return
	}
	if closed {
		if !errors.Is(err, ctx.ErrClosed) {
			w.failf("%s on a closed object: %v does not wrap ctx.ErrClosed", what, err)
		}
		return
	}
	for _, s := range lfSentinels {
		if errors.Is(err, s) {
			return
		}
	}
	var ce *monocq.CompletionError
	if errors.As(err, &ce) {
		return
	}
	w.failf("%s: %v (%T) wraps no documented sentinel", what, err, err)
}

// The model of what is closed: an object is closed when the program closed
// it or one of its parents.
func (w *lfWorld) ctxClosed(i int) bool { return w.ctxs[i] == nil || w.ctxs[i].closed }
func (w *lfWorld) pdClosed(i int) bool {
	p := w.pds[i]
	return p == nil || p.closed || w.ctxClosed(p.ctx)
}
func (w *lfWorld) mrClosed(i int) bool {
	m := w.mrs[i]
	return m == nil || m.closed || w.pdClosed(m.pd)
}
func (w *lfWorld) cqClosed(i int) bool {
	c := w.cqs[i]
	return c == nil || c.closed || w.ctxClosed(c.ctx)
}
func (w *lfWorld) srqClosed(i int) bool {
	s := w.srqs[i]
	return s == nil || s.closed || w.pdClosed(s.pd)
}
func (w *lfWorld) qpClosed(i int) bool {
	q := w.qps[i]
	if q == nil || q.closed || w.pdClosed(q.pd) || w.cqClosed(q.cq) || w.cqClosed(q.rcq) {
		return true
	}
	return q.srq >= 0 && w.srqClosed(q.srq)
}

// checkClosed compares every object's Closed with the model.
func (w *lfWorld) checkClosed() {
	w.t.Helper()
	for i, c := range w.ctxs {
		if c != nil && c.c.Closed() != w.ctxClosed(i) {
			w.failf("context %d: Closed() = %v, the model says %v", i, c.c.Closed(), w.ctxClosed(i))
		}
	}
	for i, p := range w.pds {
		if p != nil && p.pd.Closed() != w.pdClosed(i) {
			w.failf("PD %d: Closed() = %v, the model says %v", i, p.pd.Closed(), w.pdClosed(i))
		}
	}
	for i, m := range w.mrs {
		if m != nil && m.mr.Closed() != w.mrClosed(i) {
			w.failf("MR %d: Closed() = %v, the model says %v", i, m.mr.Closed(), w.mrClosed(i))
		}
	}
	for i, c := range w.cqs {
		if c != nil && c.cq.Closed() != w.cqClosed(i) {
			w.failf("CQ %d: Closed() = %v, the model says %v", i, c.cq.Closed(), w.cqClosed(i))
		}
	}
	for i, s := range w.srqs {
		if s != nil && s.s.Closed() != w.srqClosed(i) {
			w.failf("SRQ %d: Closed() = %v, the model says %v", i, s.s.Closed(), w.srqClosed(i))
		}
	}
	for i, q := range w.qps {
		if q == nil {
			continue
		}
		closed := q.q.Handle().Closed()
		if closed != w.qpClosed(i) {
			w.failf("QP %d: Closed() = %v, the model says %v", i, closed, w.qpClosed(i))
		}
		if closed && q.q.State() != transport.StateClosed {
			w.failf("QP %d: closed but State() = %v", i, q.q.State())
		}
	}
	w.checkClosedDC()
}

// checkMemory checks the canary gaps of every arena and that no slot that
// no live region covers changed since it was last covered.
func (w *lfWorld) checkMemory() {
	w.t.Helper()
	for ai, a := range w.arenas {
		if a.closed {
			continue
		}
		for i := range a.mem {
			if lfSlotOf(i) < 0 && a.mem[i] != canaryByte {
				w.failf("arena %d: canary byte %d changed to %#02x", ai, i, a.mem[i])
			}
		}
		var covered [lfSlots]bool
		for mi, m := range w.mrs {
			if m != nil && m.arena == ai && !w.mrClosed(mi) {
				covered[m.slot] = true
			}
		}
		for s := range lfSlots {
			mem := a.mem[lfSlotStart(s) : lfSlotStart(s)+lfSlotSize]
			switch {
			case covered[s]:
			case a.covered[s] || a.snap[s] == nil:
				a.snap[s] = append(a.snap[s][:0], mem...)
			default:
				for i := range mem {
					if mem[i] != a.snap[s][i] {
						w.failf("arena %d slot %d: byte %d changed to %#02x with no live memory region over it", ai, s, i, mem[i])
					}
				}
			}
		}
		a.covered = covered
	}
}

func lfSlotStart(s int) int { return lfGap + s*(lfSlotSize+lfGap) }

// lfSlotOf returns the slot byte i of an arena lies in, -1 in a gap.
func lfSlotOf(i int) int {
	for s := range lfSlots {
		if i >= lfSlotStart(s) && i < lfSlotStart(s)+lfSlotSize {
			return s
		}
	}
	return -1
}

// lfArgs reads the arguments of one op.
type lfArgs []byte

func (a lfArgs) b(i int) int { return int(a[i]) }

func runLifecycle(t *testing.T, data []byte) {
	runProgram(t, data, lfOpNames[:], (*lfWorld).run)
}

// runProgram sets up a world from the mode byte of data and runs the rest
// of data as a program of ops, each named by names and run by run, checking
// the world after each.
func runProgram(t *testing.T, data []byte, names []string, run func(w *lfWorld, op int, a lfArgs)) {
	if len(data) == 0 {
		return
	}
	mode := data[0]
	data = data[1:]
	w := &lfWorld{t: t, manual: mode&5 == 0, shared: mode&2 != 0}
	opts := sim.Options{Strict: true, MaxRounds: 3000}
	if !w.manual {
		opts.Mode = sim.Engine
	}
	if mode&4 != 0 {
		w.fabric = fmt.Sprintf("lifecycle-%d-%d", os.Getpid(), lfFabricSeq.Add(1))
		opts.Fabric = w.fabric
		w.f2 = sim.New(opts)
	}
	w.f = sim.New(opts)
	t.Cleanup(w.cleanup)
	for i := range w.arenas {
		buf, err := ctx.AllocBuffer(lfPageSize, ctx.BufferOptions{Guard: true})
		if err != nil {
			t.Fatal(err)
		}
		a := &lfArena{buf: buf, mem: buf.Bytes()}
		for j := range a.mem {
			a.mem[j] = canaryByte
		}
		for s := range lfSlots {
			genBytes(a.mem[lfSlotStart(s):lfSlotStart(s)+lfSlotSize], uint64(i*lfSlots+s+1))
		}
		w.arenas[i] = a
	}
	w.checkMemory()
	for n := 0; n < lfMaxOps && len(data) > 0; n++ {
		var args [lfOpSize]byte
		copy(args[:], data)
		data = data[min(len(data), lfOpSize):]
		op := int(args[0]) % len(names)
		w.step, w.op = n, names[op]
		if lfTrace {
			t.Logf("op %d: %s %v", n, w.op, args[1:])
		}
		run(w, op, lfArgs(args[1:]))
		w.checkClosed()
		w.checkMemory()
	}
}

// watchdog fails the process with every goroutine's stack when one op
// takes longer than a few seconds: a hang or a deadlock.
func (w *lfWorld) watchdog() func() {
	step, op := w.step, w.op
	tm := time.AfterFunc(20*time.Second, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("lifecycle: op %d (%s) hangs", step, op))
	})
	return func() { tm.Stop() }
}

func (w *lfWorld) run(op int, a lfArgs) {
	defer w.watchdog()()
	switch op {
	case lfOpenContext:
		w.openContext(a)
	case lfCloseContext:
		i := a.b(0) % lfContexts
		if c := w.ctxs[i]; c != nil {
			w.checkErr("close context", c.c.Close(), false)
			c.closed = true
		}
	case lfAllocPD:
		w.allocPD(a)
	case lfClosePD:
		i := a.b(0) % lfPDs
		if p := w.pds[i]; p != nil {
			w.checkErr("close PD", p.pd.Close(), false)
			p.closed = true
		}
	case lfRegisterMR:
		w.registerMR(a)
	case lfCloseMR:
		i := a.b(0) % lfMRs
		if m := w.mrs[i]; m != nil {
			w.checkErr("deregister MR", m.mr.Close(), false)
			m.closed = true
		}
	case lfCreateCQ:
		w.createCQ(a)
	case lfCloseCQ:
		i := a.b(0) % lfCQs
		if c := w.cqs[i]; c != nil {
			w.checkErr("close CQ", c.cq.Close(), false)
			c.closed = true
		}
	case lfCreateSRQ:
		w.createSRQ(a)
	case lfCloseSRQ:
		i := a.b(0) % lfSRQs
		if s := w.srqs[i]; s != nil {
			w.checkErr("close SRQ", s.s.Close(), false)
			s.closed = true
		}
	case lfNewRC, lfNewUD:
		w.newQP(op == lfNewUD, a)
	case lfCloseQP:
		i := a.b(0) % lfQPCount
		if q := w.qps[i]; q != nil {
			w.checkErr("close QP", q.q.Close(), false)
			q.closed = true
		}
	case lfCloseHandle:
		i := a.b(0) % lfQPCount
		if q := w.qps[i]; q != nil {
			w.checkErr("close QP handle", q.q.Handle().Close(), false)
			q.closed = true
		}
	case lfConnect:
		w.connect(a)
	case lfPostSend:
		w.postSend(a)
	case lfPostRecv:
		w.postRecv(a)
	case lfPostSRQRecv:
		w.postSRQRecv(a)
	case lfPoll:
		w.poll(a.b(0)%lfCQs, 1+a.b(1)%16)
	case lfRun:
		w.settle()
	case lfResetQP:
		w.resetQP(a)
	case lfFailQP:
		i := a.b(0) % lfQPCount
		if q := w.qps[i]; q != nil {
			w.checkErr("fail QP", q.q.Fail(), w.qpClosed(i))
		}
	case lfCloseWhilePolling:
		w.closeWhilePolling(a)
	case lfCloseBuffer:
		i := a.b(0) % lfArenas
		ar := w.arenas[i]
		if !ar.closed {
			w.checkErr("close buffer", ar.buf.Close(), false)
			ar.closed = true
		}
		if ar.buf.Bytes() != nil {
			w.failf("buffer %d: Bytes after Close is not nil", i)
		}
	case lfPollerAddRemove:
		w.pollerAddRemove(a)
	case lfModifyQP:
		w.modifyQP(a)
	}
}

// modifyQP moves a queue pair through its control-plane handle to a state
// other than RESET (after which the rings must be rebuilt: rc.QP.Reset
// does that): RTS→RTS, to ERR (the outstanding work requests flush as
// after Fail), or a transition the kernel's table refuses.
func (w *lfWorld) modifyQP(a lfArgs) {
	i := a.b(0) % lfQPCount
	q := w.qps[i]
	if q == nil {
		return
	}
	states := []ctx.QPState{ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS, ctx.QPStateSQD, ctx.QPStateError}
	err := q.q.Handle().Modify(ctx.QPAttr{State: states[a.b(1)%len(states)]})
	w.checkErr("modify QP handle", err, w.qpClosed(i))
}

func (w *lfWorld) openContext(a lfArgs) {
	i := a.b(0) % lfContexts
	if w.ctxs[i] != nil && !w.ctxs[i].closed {
		return // keep the slot's objects reachable
	}
	var c *ctx.Context
	var err error
	dev := []string{"sim0", "sim1"}[a.b(1)%2]
	if w.shared && a.b(2)%2 == 1 {
		c, err = ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware, Device: dev})
	} else if w.f2 != nil && a.b(3)%2 == 1 {
		c, err = w.f2.Open(dev)
	} else {
		c, err = w.f.Open(dev)
	}
	w.checkErr("open", err, false)
	if err != nil {
		return
	}
	if old := w.ctxs[i]; old != nil {
		w.forgetContext(i)
	}
	w.ctxs[i] = &lfContext{c: c}
}

// forgetContext drops the objects of a closed Context whose slot is
// reused: every one of them is closed with it.
func (w *lfWorld) forgetContext(i int) {
	for pi, p := range w.pds {
		if p != nil && p.ctx == i {
			for mi, m := range w.mrs {
				if m != nil && m.pd == pi {
					w.mrs[mi] = nil
				}
			}
			for si, s := range w.srqs {
				if s != nil && s.pd == pi {
					w.dropSRQ(si)
				}
			}
			for qi, q := range w.qps {
				if q != nil && q.pd == pi {
					w.qps[qi] = nil
				}
			}
			w.forgetDC(func(pd, _, _ int) bool { return pd == pi })
			w.pds[pi] = nil
		}
	}
	for ci, c := range w.cqs {
		if c != nil && c.ctx == i {
			for qi, q := range w.qps {
				if q != nil && (q.cq == ci || q.rcq == ci) {
					w.qps[qi] = nil
				}
			}
			w.forgetDC(func(_, cq, _ int) bool { return cq == ci })
			w.cqs[ci] = nil
		}
	}
}

func (w *lfWorld) allocPD(a lfArgs) {
	i, ci := a.b(0)%lfPDs, a.b(1)%lfContexts
	if w.pds[i] != nil && !w.pdClosed(i) {
		return
	}
	c := w.ctxs[ci]
	if c == nil {
		return
	}
	pd, err := c.c.AllocProtectionDomain()
	w.checkErr("alloc PD", err, w.ctxClosed(ci))
	if err != nil {
		return
	}
	w.dropPD(i)
	w.pds[i] = &lfPD{pd: pd, ctx: ci}
}

// dropPD forgets a closed PD's slot and its (closed) children.
func (w *lfWorld) dropPD(pi int) {
	if w.pds[pi] == nil {
		return
	}
	for mi, m := range w.mrs {
		if m != nil && m.pd == pi {
			w.mrs[mi] = nil
		}
	}
	for si, s := range w.srqs {
		if s != nil && s.pd == pi {
			w.dropSRQ(si)
		}
	}
	for qi, q := range w.qps {
		if q != nil && q.pd == pi {
			w.qps[qi] = nil
		}
	}
	w.forgetDC(func(pd, _, _ int) bool { return pd == pi })
	w.pds[pi] = nil
}

// dropSRQ forgets a closed SRQ's slot and the (closed) queue pairs that
// receive from it, whatever their PD: a new SRQ in the slot is not theirs.
func (w *lfWorld) dropSRQ(si int) {
	if w.srqs[si] == nil {
		return
	}
	for qi, q := range w.qps {
		if q != nil && q.srq == si {
			w.qps[qi] = nil
		}
	}
	w.forgetDC(func(_, _, srq int) bool { return srq == si })
	w.srqs[si] = nil
}

var lfAccesses = []ctx.Access{
	allAccess,
	ctx.AccessLocalWrite,
	0,
	ctx.AccessLocalWrite | ctx.AccessRemoteWrite,
	ctx.AccessLocalWrite | ctx.AccessRemoteRead,
	ctx.AccessRemoteRead,
	ctx.AccessRemoteWrite, // refused: remote write needs local write
	ctx.AccessLocalWrite | ctx.AccessRemoteAtomic,
}

func (w *lfWorld) registerMR(a lfArgs) {
	i, pi := a.b(0)%lfMRs, a.b(1)%lfPDs
	ai, s := a.b(2)%lfArenas, (a.b(2)/lfArenas)%lfSlots
	access := lfAccesses[a.b(3)%len(lfAccesses)]
	if w.mrs[i] != nil && !w.mrClosed(i) {
		return
	}
	p := w.pds[pi]
	if p == nil {
		return
	}
	ar := w.arenas[ai]
	if ar.closed {
		// Refused after the buffer's Close, as every registration on
		// it; its memory may be unmapped, so nothing else touches it.
		_, err := p.pd.RegisterBuffer(ar.buf, access)
		w.checkErr("register buffer", err, true)
		return
	}
	mr, err := p.pd.RegisterMemory(ar.mem[lfSlotStart(s):lfSlotStart(s)+lfSlotSize], access)
	if access&(ctx.AccessRemoteWrite|ctx.AccessRemoteAtomic) != 0 && access&ctx.AccessLocalWrite == 0 {
		// The access is checked before the PD.
		if !errors.Is(err, ctx.ErrInvalidArgument) {
			w.failf("register MR with access %v: %v, want ctx.ErrInvalidArgument", access, err)
		}
		return
	}
	w.checkErr("register MR", err, w.pdClosed(pi))
	if err != nil {
		return
	}
	w.mrs[i] = &lfMR{mr: mr, pd: pi, arena: ai, slot: s, access: access,
		addr: uint64(mr.Addr()), lkey: mr.LKey(), rkey: mr.RKey(), length: uint32(mr.Len())}
}

func (w *lfWorld) createCQ(a lfArgs) {
	i, ci := a.b(0)%lfCQs, a.b(1)%lfContexts
	if w.cqs[i] != nil && !w.cqClosed(i) {
		return
	}
	c := w.ctxs[ci]
	if c == nil {
		return
	}
	depth := uint32(a.b(2) % 20) // 0 is refused
	cq, err := c.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: depth})
	w.checkErr("create CQ", err, w.ctxClosed(ci) && depth != 0)
	if err != nil {
		return
	}
	p, err := transport.NewPoller(cq)
	w.checkErr("new poller", err, false)
	if err != nil {
		return
	}
	if old := w.cqs[i]; old != nil {
		for qi, q := range w.qps {
			if q != nil && (q.cq == i || q.rcq == i) {
				w.qps[qi] = nil
			}
		}
		w.forgetDC(func(_, cq, _ int) bool { return cq == i })
	}
	w.cqs[i] = &lfCQ{cq: cq, p: p, ctx: ci}
}

func (w *lfWorld) createSRQ(a lfArgs) {
	i, pi := a.b(0)%lfSRQs, a.b(1)%lfPDs
	if w.srqs[i] != nil && !w.srqClosed(i) {
		return
	}
	p := w.pds[pi]
	if p == nil {
		return
	}
	depth := uint32(a.b(2) % 10)
	s, err := transport.NewSharedReceiveQueue(p.pd, ctx.SRQConfig{Depth: depth, MaxSGE: uint32(a.b(3) % 4)})
	w.checkErr("new SRQ", err, w.pdClosed(pi) && depth != 0)
	if err != nil {
		return
	}
	w.dropSRQ(i)
	w.srqs[i] = &lfSRQ{s: s, pd: pi, recvs: map[uint64]bool{}}
}

func (w *lfWorld) newQP(isUD bool, a lfArgs) {
	i, pi := a.b(0)%lfQPCount, a.b(1)%lfPDs
	ci, rci := a.b(2)%lfCQs, (a.b(2)/lfCQs)%lfCQs
	cfgb := a.b(3)
	srqi := -1
	if cfgb&1 != 0 {
		srqi = (cfgb >> 1) % lfSRQs
	}
	if w.qps[i] != nil && !w.qpClosed(i) {
		return
	}
	p, c, rcq := w.pds[pi], w.cqs[ci], w.cqs[rci]
	if p == nil || c == nil || rcq == nil || (srqi >= 0 && w.srqs[srqi] == nil) {
		return
	}
	var srq *transport.SharedReceiveQueue
	recvDepth := uint32(1 + (cfgb>>2)%8)
	if srqi >= 0 {
		srq, recvDepth = w.srqs[srqi].s, 0
	}
	sendDepth := uint32(1 + (a.b(4) % 8))
	inline := uint32(a.b(4)/8) % 4 * 32
	closed := w.pdClosed(pi) || w.cqClosed(ci) || w.cqClosed(rci) || (srqi >= 0 && w.srqClosed(srqi))
	sameCtx := p.ctx == c.ctx && p.ctx == rcq.ctx && (srqi < 0 || w.pds[w.srqs[srqi].pd].ctx == p.ctx)
	q := &lfQP{pd: pi, cq: ci, rcq: rci, srq: srqi, sends: map[uint64]bool{}, recvs: map[uint64]bool{}}
	var err error
	if isUD {
		q.ud, err = ud.New(p.pd, c.cq, ud.Config{SendDepth: sendDepth, RecvDepth: recvDepth, MaxInline: inline,
			SRQ: srq, RecvCQ: rcq.cq, QKey: 0x11})
		if err == nil {
			q.q = &q.ud.Queue
		}
	} else {
		q.rc, err = rc.New(p.pd, c.cq, rc.Config{SendDepth: sendDepth, RecvDepth: recvDepth, MaxInline: inline,
			SRQ: srq, RecvCQ: rcq.cq, Timeout: 1 + cfgb>>7*13, RetryCount: -1, RNRRetry: (cfgb >> 5) % 3, MinRNRTimer: 1})
		if err == nil {
			q.q = &q.rc.Queue
		}
	}
	what := "rc.New"
	if isUD {
		what = "ud.New"
	}
	if !sameCtx {
		if err == nil || !errors.Is(err, ctx.ErrInvalidArgument) && !errors.Is(err, ctx.ErrClosed) {
			w.failf("%s across Contexts: %v, want ctx.ErrInvalidArgument", what, err)
		}
		return
	}
	// A closed parent may be refused with another sentinel when a
	// Context's query fails first; both wrap ErrClosed.
	w.checkErr(what, err, closed)
	if err != nil {
		return
	}
	w.qps[i] = q
	w.checkErr("poller add", c.p.Add(q.q), false)
	if rci != ci {
		w.checkErr("poller add (receive CQ)", rcq.p.Add(q.q), false)
	}
}

// lfQueuePair returns the transport queue pair behind q for Poller.Add.
func (q *lfQP) pair() transport.QueuePair {
	if q.rc != nil {
		return q.rc
	}
	return q.ud
}

func (w *lfWorld) connect(a lfArgs) {
	i, j := a.b(0)%lfQPCount, a.b(1)%lfQPCount
	q, r := w.qps[i], w.qps[j]
	if q == nil || r == nil {
		return
	}
	switch {
	case q.rc != nil && r.rc != nil:
		err := q.rc.Connect(r.rc.Endpoint())
		if err != nil && !w.qpClosed(i) {
			// Connecting twice or after an error is refused.
			w.checkErr("rc connect", err, false)
			return
		}
		w.checkErr("rc connect", err, w.qpClosed(i))
	case q.ud != nil && r.ud != nil:
		rem, err := q.ud.NewRemote(r.ud.Endpoint())
		w.checkErr("ud new remote", err, false)
		if err == nil {
			if q.remote != nil {
				w.checkErr("ud remote close", q.remote.Close(), false)
			}
			q.remote = rem
		}
	case q.rc != nil && r.ud != nil:
		err := q.rc.Connect(r.ud.Endpoint())
		if err == nil {
			w.failf("rc connect to a UD endpoint succeeded")
		}
		w.checkErr("rc connect to UD", err, false)
	}
}

// sge picks a local buffer for a work request: a region's slot, a piece
// of it, a range that runs past it, or a bad key.
func (w *lfWorld) sge(sel, off int) (addr uint64, length, lkey uint32) {
	mi := sel % (lfMRs + 1)
	if mi == lfMRs {
		return 0xdead0000, 64, 0x1234567
	}
	m := w.mrs[mi]
	if m == nil {
		return 0, 8, 0
	}
	addr, lkey = m.addr, m.lkey
	switch (sel / (lfMRs + 1)) % 5 {
	case 0:
		length = m.length
	case 1:
		addr += uint64(off % int(m.length))
		length = uint32(1 + off%64)
	case 2: // runs past the region into the canary gap
		addr += uint64(m.length) - 8
		length = 16 + uint32(off)
	case 3: // before the region
		addr -= 8
		length = 16
	case 4: // an empty entry
		length = 0
	}
	return addr, length, lkey
}

// remote picks a remote address and key: a region's, in range or not.
func (w *lfWorld) remote(sel, off int) (addr uint64, rkey uint32) {
	mi := sel % (lfMRs + 1)
	if mi == lfMRs {
		return 0xbeef000, 0x7654321
	}
	m := w.mrs[mi]
	if m == nil {
		return 0, 0
	}
	addr, rkey = m.addr, m.rkey
	switch (sel / (lfMRs + 1)) % 3 {
	case 1:
		addr += uint64(off) * 8
	case 2:
		addr += uint64(m.length) - 4
	}
	return addr, rkey
}

func (w *lfWorld) postSend(a lfArgs) {
	i := a.b(0) % lfQPCount
	q := w.qps[i]
	if q == nil {
		return
	}
	kind := a.b(1) % 8
	laddr, llen, lkey := w.sge(a.b(2), a.b(4))
	raddr, rkey := w.remote(a.b(3), a.b(4))
	w.wrid++
	wrid := w.wrid
	flags := wqebuilder.Signaled
	if a.b(4)&0x80 != 0 {
		flags |= wqebuilder.Fence
	}
	closed := w.qpClosed(i)
	var post, fin error
	if q.ud != nil {
		if q.remote == nil {
			return
		}
		st, err := q.ud.Post(wrid, flags, q.remote)
		post = err
		if kind%2 == 0 {
			fin = st.Send().SGE(laddr, llen, lkey).FinishBlueFlame()
		} else {
			fin = st.SendImm(7).Inline(lfPayload[:a.b(4)%len(lfPayload)]).Finish()
			q.q.RingDoorbell()
		}
	} else {
		st, err := q.rc.Post(wrid, flags)
		post = err
		switch kind {
		case 0:
			fin = st.Send().SGE(laddr, llen, lkey).FinishBlueFlame()
		case 1:
			fin = st.SendImm(uint32(wrid)).Inline(lfPayload[:a.b(4)%len(lfPayload)]).FinishBlueFlame()
		case 2:
			fin = st.RdmaWrite(raddr, rkey).SGE(laddr, llen, lkey).FinishBlueFlame()
		case 3:
			fin = st.RdmaWriteImm(raddr, rkey, 9).SGE(laddr, llen, lkey).Finish()
			q.q.RingDoorbell()
		case 4:
			fin = st.RdmaRead(raddr, rkey).SGE(laddr, llen, lkey).FinishBlueFlame()
		case 5:
			fin = st.AtomicFA(raddr&^7, rkey, 1).Result(laddr, lkey).FinishBlueFlame()
		case 6:
			fin = st.AtomicCS(raddr&^7, rkey, 0, wrid).Result(laddr, lkey).FinishBlueFlame()
		case 7:
			fin = st.Send().SGE(laddr, llen, lkey).SGE(laddr, llen, lkey).FinishBlueFlame()
		}
	}
	if post != nil {
		w.checkErr("post send", post, closed)
		if fin == nil {
			w.failf("post send refused (%v) but its Finish succeeded", post)
		}
		w.checkErr("finish of a refused post", fin, closed)
		return
	}
	if closed && fin == nil {
		w.failf("post send on a closed QP succeeded")
	}
	w.checkErr("finish send", fin, closed)
	if fin == nil {
		q.sends[wrid] = true
	}
}

var lfPayload = []byte("0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789abcdefghijklmnopqrstuvwxyz!")

func (w *lfWorld) postRecv(a lfArgs) {
	i := a.b(0) % lfQPCount
	q := w.qps[i]
	if q == nil {
		return
	}
	addr, length, lkey := w.sge(a.b(1), a.b(2))
	w.wrid++
	err := q.q.PostRecv(w.wrid, addr, length, lkey)
	w.checkErr("post receive", err, w.qpClosed(i))
	if err == nil {
		q.recvs[w.wrid] = true
	}
}

func (w *lfWorld) postSRQRecv(a lfArgs) {
	i := a.b(0) % lfSRQs
	s := w.srqs[i]
	if s == nil {
		return
	}
	addr, length, lkey := w.sge(a.b(1), a.b(2))
	w.wrid++
	err := s.s.PostRecv(w.wrid, addr, length, lkey)
	w.checkErr("post SRQ receive", err, w.srqClosed(i))
	if err == nil {
		s.recvs[w.wrid] = true
	}
}

// settle lets the model run: in manual mode until it is idle (or its round
// limit), in engine mode for a moment.
func (w *lfWorld) settle() {
	if w.manual {
		if err := w.f.RunUntilIdle(); err != nil && !errors.Is(err, sim.ErrNotIdle) {
			w.failf("run until idle: %v", err)
		}
		return
	}
	time.Sleep(200 * time.Microsecond)
}

// complete checks one completion against the work requests outstanding.
// It runs on whichever goroutine polls; it reports instead of failing.
func (w *lfWorld) complete(c *transport.Completion) string {
	if lfTrace {
		w.t.Logf("  completion QPN %#x opcode %v WRID %d match %v syndrome %v bytes %d", c.QPN, c.Opcode, c.WRID, c.Match, c.Syndrome, c.ByteCount)
	}
	switch c.Match {
	case transport.MatchUnknownQPN:
		return ""
	case transport.MatchUnmatched, transport.MatchUnexpected:
		return fmt.Sprintf("completion QPN %#x opcode %v counter %d: match %v", c.QPN, c.Opcode, c.WQECounter, c.Match)
	}
	var q *lfQP
	for _, x := range w.qps {
		if x != nil && x.q == c.Queue {
			q = x
		}
	}
	if q == nil {
		if msg, ok := w.completeDC(c); ok {
			return msg
		}
		return "" // a queue pair of a slot reused since
	}
	var set map[uint64]bool
	switch c.Opcode {
	case prm.CQEReq, prm.CQEReqErr:
		set = q.sends
	default:
		set = q.recvs
		if q.srq >= 0 && w.srqs[q.srq] != nil {
			set = w.srqs[q.srq].recvs
		}
	}
	if !set[c.WRID] {
		return fmt.Sprintf("completion QPN %#x opcode %v WRID %d: no such work request outstanding (match %v, syndrome %v)",
			c.QPN, c.Opcode, c.WRID, c.Match, c.Syndrome)
	}
	delete(set, c.WRID)
	return ""
}

func (w *lfWorld) poll(ci, n int) {
	c := w.cqs[ci]
	if c == nil {
		return
	}
	deadline := time.Now().Add(5 * time.Millisecond)
	got, idle := 0, 0
	for got < n {
		if w.manual {
			_, _ = w.f.Step()
		}
		k := c.p.Poll(n-got, func(wc *transport.Completion) {
			if msg := w.complete(wc); msg != "" {
				w.failf("%s", msg)
			}
		})
		if w.cqClosed(ci) && k != 0 {
			w.failf("poll of a closed CQ returned %d", k)
		}
		got += k
		if k == 0 {
			if time.Now().After(deadline) {
				break
			}
			if w.manual {
				w.settle()
				idle++
				if idle > 2 {
					break
				}
				continue
			}
			w.ctxs[c.ctx].c.Idle()
		}
	}
	if err := c.p.Err(); err != nil {
		w.checkErr("poller", err, false)
	}
}

func (w *lfWorld) resetQP(a lfArgs) {
	i := a.b(0) % lfQPCount
	q := w.qps[i]
	if q == nil || q.rc == nil {
		return
	}
	err := q.rc.Reset()
	w.checkErr("rc reset", err, w.qpClosed(i))
	if err == nil {
		// RESET discards the outstanding work requests without a
		// completion; the poll must not hand any of them over.
		clear(q.sends)
		clear(q.recvs)
	}
}

func (w *lfWorld) pollerAddRemove(a lfArgs) {
	i, ci := a.b(0)%lfQPCount, a.b(1)%lfCQs
	q, c := w.qps[i], w.cqs[ci]
	if q == nil || c == nil {
		return
	}
	if a.b(2)%2 == 0 {
		err := c.p.Add(q.pair())
		w.checkErr("poller add", err, w.qpClosed(i))
	} else {
		err := c.p.Remove(q.pair())
		w.checkErr("poller remove", err, false)
	}
}

// closeWhilePolling runs the owner of a queue pair and its CQ's Poller on
// another goroutine — posting sends and receives and polling — while this
// one closes the queue pair, its CQ, its PD or its Context.
func (w *lfWorld) closeWhilePolling(a lfArgs) {
	i := a.b(0) % lfQPCount
	q := w.qps[i]
	if q == nil {
		return
	}
	c := w.cqs[q.cq]
	p := w.pds[q.pd]
	m := w.mrs[a.b(2)%lfMRs]
	owner := w.ctxs[c.ctx].c
	var msgs []string
	stop := make(chan struct{})
	done := make(chan struct{})
	started := make(chan struct{})
	go func() {
		defer close(done)
		close(started)
		var wrid uint64 = 1 << 40
		for n := 0; ; n++ {
			select {
			case <-stop:
				if n > 8 {
					return
				}
			default:
			}
			wrid++
			var addr uint64
			var lkey uint32
			if m != nil {
				addr, lkey = m.addr, m.lkey
			}
			if q.rc != nil {
				if st, err := q.rc.Post(wrid, wqebuilder.Signaled); err == nil {
					if st.Send().SGE(addr, 16, lkey).FinishBlueFlame() == nil {
						q.sends[wrid] = true
					}
				}
			} else if q.remote != nil {
				if st, err := q.ud.Post(wrid, wqebuilder.Signaled, q.remote); err == nil {
					if st.Send().SGE(addr, 16, lkey).FinishBlueFlame() == nil {
						q.sends[wrid] = true
					}
				}
			}
			wrid++
			if q.q.PostRecv(wrid, addr, 32, lkey) == nil {
				q.recvs[wrid] = true
			}
			c.p.Poll(8, func(wc *transport.Completion) {
				if msg := w.complete(wc); msg != "" {
					msgs = append(msgs, msg)
				}
			})
			if w.manual {
				_, _ = w.f.Step()
			} else {
				owner.Idle()
			}
		}
	}()
	<-started
	var err error
	switch a.b(1) % 5 {
	case 0:
		err = q.q.Close()
		q.closed = true
	case 1:
		err = c.cq.Close()
		c.closed = true
	case 2:
		err = p.pd.Close()
		p.closed = true
	case 3:
		err = w.ctxs[p.ctx].c.Close()
		w.ctxs[p.ctx].closed = true
	case 4:
		if m != nil {
			err = m.mr.Close()
			m.closed = true
		}
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		debug.SetTraceback("all")
		panic("lifecycle: the owner goroutine did not stop after a close")
	}
	w.checkErr("close while polling", err, false)
	for _, msg := range msgs {
		w.failf("owner goroutine: %s", msg)
	}
}

func (w *lfWorld) cleanup() {
	for i := len(w.ctxs) - 1; i >= 0; i-- {
		if c := w.ctxs[i]; c != nil {
			if err := c.c.Close(); err != nil {
				w.t.Errorf("cleanup: close context %d: %v", i, err)
			}
		}
	}
	for i, c := range w.ctxs {
		if c != nil {
			c.closed = true
			_ = i
		}
	}
	for ai, a := range w.arenas {
		if a == nil {
			continue
		}
		if !a.closed {
			for i := range a.mem {
				if lfSlotOf(i) < 0 && a.mem[i] != canaryByte {
					w.t.Errorf("arena %d: canary byte %d changed to %#02x", ai, i, a.mem[i])
					break
				}
			}
		}
		_ = a.buf.Close()
	}
	if err := w.f.Close(); err != nil {
		w.t.Errorf("cleanup: close fabric: %v", err)
	}
	if w.f2 != nil {
		if err := w.f2.Close(); err != nil {
			w.t.Errorf("cleanup: close the second fabric: %v", err)
		}
		files, _ := filepath.Glob(filepath.Join("/dev/shm", "mlx5kit-"+w.fabric+"-*"))
		for _, f := range files {
			_ = os.Remove(f)
		}
	}
	if v := w.f.Violations(); len(v) > 0 && w.manual {
		w.t.Errorf("strict-mode violations: %v", v)
	}
}

// lfProgram encodes ops for the seeds.
func lfProgram(mode byte, ops ...[]byte) []byte {
	b := []byte{mode}
	for _, op := range ops {
		var x [lfOpSize]byte
		copy(x[:], op)
		b = append(b, x[:]...)
	}
	return b
}

func lfOp(op int, args ...byte) []byte { return append([]byte{byte(op)}, args...) }

// lfPair is a connected RC pair: contexts 0 and 1 on sim0 and sim1, PDs 0
// and 1, CQs 0 and 1, MRs 0 (arena 0 slot 0) and 1 (arena 1 slot 0) with
// every access, QPs 0 and 1 connected.
func lfPair() [][]byte {
	return [][]byte{
		lfOp(lfOpenContext, 0, 0), lfOp(lfOpenContext, 1, 1),
		lfOp(lfAllocPD, 0, 0), lfOp(lfAllocPD, 1, 1),
		lfOp(lfRegisterMR, 0, 0, 0, 0, 1), lfOp(lfRegisterMR, 1, 1, 1, 0, 1),
		lfOp(lfCreateCQ, 0, 0, 16), lfOp(lfCreateCQ, 1, 1, 16),
		lfOp(lfNewRC, 0, 0, 0, 2, 7), lfOp(lfNewRC, 1, 1, 1|1<<2, 2, 7),
		lfOp(lfConnect, 0, 1), lfOp(lfConnect, 1, 0),
	}
}

func lifecycleSeeds() [][]byte {
	pair := lfPair()
	with := func(mode byte, ops ...[]byte) []byte {
		return lfProgram(mode, append(append([][]byte{}, pair...), ops...)...)
	}
	return [][]byte{
		// A SEND, an RDMA WRITE, READ and atomic, polled.
		with(0, lfOp(lfPostRecv, 1, 1, 0), lfOp(lfPostSend, 0, 0, 0, 0, 5),
			lfOp(lfPostSend, 0, 2, 0, 1, 3), lfOp(lfPostSend, 0, 4, 7, 8, 2),
			lfOp(lfPostSend, 0, 5, 0, 1, 0), lfOp(lfRun), lfOp(lfPoll, 0, 8), lfOp(lfPoll, 1, 8)),
		// Out of range: past the region, a bad key; then polls.
		with(0, lfOp(lfPostSend, 0, 2, 14, 15, 9), lfOp(lfPostSend, 0, 4, 6, 6, 1),
			lfOp(lfRun), lfOp(lfPoll, 0, 8), lfOp(lfPostSend, 0, 0, 0, 0, 0), lfOp(lfPoll, 0, 8)),
		// Parents first: the PD, then the Context, then the children.
		with(0, lfOp(lfPostRecv, 1, 1, 0), lfOp(lfClosePD, 0), lfOp(lfPostSend, 0, 0, 0, 0, 1),
			lfOp(lfCloseQP, 0), lfOp(lfCloseMR, 0), lfOp(lfCloseContext, 1), lfOp(lfPoll, 1, 4),
			lfOp(lfCloseCQ, 1), lfOp(lfCloseQP, 1), lfOp(lfCloseContext, 1)),
		// Close while the owner posts and polls, each kind of close.
		with(1, lfOp(lfCloseWhilePolling, 0, 0, 0), lfOp(lfCloseWhilePolling, 1, 1, 1),
			lfOp(lfPoll, 0, 4)),
		with(0, lfOp(lfCloseWhilePolling, 0, 2, 0), lfOp(lfCloseWhilePolling, 1, 3, 1)),
		with(0, lfOp(lfCloseWhilePolling, 0, 4, 0), lfOp(lfPoll, 0, 4)),
		// Reset and reconnect, fail and poll the flushes.
		with(0, lfOp(lfPostRecv, 1, 1, 0), lfOp(lfPostSend, 0, 0, 0, 0, 5), lfOp(lfResetQP, 0),
			lfOp(lfResetQP, 1), lfOp(lfConnect, 0, 1), lfOp(lfConnect, 1, 0), lfOp(lfPostSend, 0, 0, 0, 0, 5),
			lfOp(lfPostRecv, 1, 1, 0), lfOp(lfFailQP, 1), lfOp(lfPoll, 1, 8), lfOp(lfPoll, 0, 8)),
		// SRQ and UD; the buffer closed under its regions.
		lfProgram(2, lfOp(lfOpenContext, 0, 0, 1), lfOp(lfAllocPD, 0, 0), lfOp(lfCreateCQ, 0, 0, 8),
			lfOp(lfCreateSRQ, 0, 0, 4), lfOp(lfRegisterMR, 0, 0, 0, 0, 1),
			lfOp(lfNewUD, 0, 0, 0, 1, 3), lfOp(lfNewUD, 1, 0, 0, 0, 3), lfOp(lfConnect, 0, 1),
			lfOp(lfPostRecv, 1, 0, 0), lfOp(lfPostSRQRecv, 0, 0, 0), lfOp(lfPostSend, 0, 0, 0, 0, 1),
			lfOp(lfPoll, 0, 4), lfOp(lfCloseBuffer, 0), lfOp(lfPostSend, 0, 0, 0, 0, 1),
			lfOp(lfCloseSRQ, 0), lfOp(lfPoll, 0, 4), lfOp(lfCloseMR, 0), lfOp(lfRegisterMR, 1, 0, 0, 0, 0)),
		// The pair across the two members of a shared fabric (an ACK
		// timeout long enough for the other engine to answer).
		lfProgram(5, lfOp(lfOpenContext, 0, 0), lfOp(lfOpenContext, 1, 1, 0, 1),
			lfOp(lfAllocPD, 0, 0), lfOp(lfAllocPD, 1, 1),
			lfOp(lfRegisterMR, 0, 0, 0, 0, 1), lfOp(lfRegisterMR, 1, 1, 1, 0, 1),
			lfOp(lfCreateCQ, 0, 0, 16), lfOp(lfCreateCQ, 1, 1, 16),
			lfOp(lfNewRC, 0, 0, 0, 2|1<<7, 7), lfOp(lfNewRC, 1, 1, 1|1<<2, 2|1<<7, 7),
			lfOp(lfConnect, 0, 1), lfOp(lfConnect, 1, 0),
			lfOp(lfPostRecv, 1, 1, 0), lfOp(lfPostSend, 0, 0, 0, 0, 5), lfOp(lfPostSend, 0, 4, 7, 8, 2),
			lfOp(lfPoll, 0, 8), lfOp(lfPoll, 1, 8), lfOp(lfCloseWhilePolling, 0, 0, 0), lfOp(lfPoll, 1, 8)),
		// A tiny CQ overrun, then Poller add and remove.
		lfProgram(0, lfOp(lfOpenContext, 0, 0), lfOp(lfAllocPD, 0, 0), lfOp(lfCreateCQ, 0, 0, 1),
			lfOp(lfRegisterMR, 0, 0, 0, 0, 1), lfOp(lfNewRC, 0, 0, 0, 2, 7), lfOp(lfNewRC, 1, 0, 0, 2, 7),
			lfOp(lfConnect, 0, 1), lfOp(lfConnect, 1, 0), lfOp(lfPostSend, 0, 2, 0, 0, 1),
			lfOp(lfPostSend, 0, 2, 0, 0, 1), lfOp(lfPostSend, 0, 2, 0, 0, 1), lfOp(lfRun),
			lfOp(lfPollerAddRemove, 0, 0, 1), lfOp(lfPoll, 0, 8), lfOp(lfPollerAddRemove, 0, 0, 0),
			lfOp(lfCloseHandle, 1), lfOp(lfPoll, 0, 8)),
	}
}
