package reliability

import (
	"errors"
	"fmt"
	"runtime/debug"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// FuzzDCLifecycle is FuzzLifecycle for the DC transport: the same worlds
// (Contexts, protection domains, memory regions over canary-guarded
// arenas, CQs with Pollers, SRQs) with pools of DC initiators, DC targets
// on the SRQs and the DCIs' Remotes in place of RC and UD queue pairs. A
// program creates and closes them in any order (parents first, twice, use
// after close), makes Remotes with the right DC access key, a wrong one or
// a malformed endpoint, posts every operation with Post,
// fails and modifies DCIs and DCTs, and closes a DCI, its target, the
// target's SRQ, a CQ, a PD or a Context while another goroutine streams to
// the target and polls both sides. The invariants are FuzzLifecycle's:
// nothing panics or hangs, every error wraps a documented sentinel
// (ctx.ErrClosed when a parent is closed), Closed follows the model, every
// completion retires one outstanding work request once, no byte outside
// the live regions changes. Besides, a request that reaches no DCT with
// its key — a wrong DC access key, or a DCT closed before the post — never
// completes successfully, a DCI never completes a receive and a DCT never
// completes a send, and double closes return nil.
func FuzzDCLifecycle(f *testing.F) {
	for _, seed := range dcLifecycleSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runProgram(t, data, dcOpNames[:], (*lfWorld).runDC)
	})
}

const (
	lfDCIs    = 3
	lfDCTs    = 3
	lfRemotes = 3 // per DCI
	// lfBadKeyBits turn a DCT's key into one no DCT of the program has.
	lfBadKeyBits = 0xbad0_0000_0000
)

// lfDCTKeys are the DC access keys the program's DCTs are created with.
var lfDCTKeys = []uint64{0x1234, 0x5678, 0}

// The opcodes of a DC lifecycle program. The first ones are
// FuzzLifecycle's, on the shared pools (dcShared).
const (
	dcOpenContext = iota
	dcCloseContext
	dcAllocPD
	dcClosePD
	dcRegisterMR
	dcCloseMR
	dcCreateCQ
	dcCloseCQ
	dcCreateSRQ
	dcCloseSRQ
	dcPostSRQRecv
	dcPoll
	dcRun
	dcCloseBuffer
	dcNewDCI
	dcNewDCT
	dcCloseDCI
	dcCloseDCT
	dcNewRemote
	dcCloseRemote
	dcPost
	dcFail
	dcModify
	dcCloseWhileStreaming
	dcPollerAddRemove
	dcBeginSRQRecv
	dcQueueRecv
	dcNumOps
)

var dcOpNames = [dcNumOps]string{
	"OpenContext", "CloseContext", "AllocPD", "ClosePD", "RegisterMR", "CloseMR",
	"CreateCQ", "CloseCQ", "CreateSRQ", "CloseSRQ", "PostSRQRecv", "Poll", "Run", "CloseBuffer",
	"NewDCI", "NewDCT", "CloseDCI", "CloseDCT", "NewRemote", "CloseRemote", "Post", "Fail",
	"Modify", "CloseWhileStreaming", "PollerAddRemove", "BeginSRQRecv",
	"QueueRecv",
}

// dcShared maps the DC opcodes below dcNewDCI to FuzzLifecycle's.
var dcShared = [dcNewDCI]int{
	lfOpenContext, lfCloseContext, lfAllocPD, lfClosePD, lfRegisterMR, lfCloseMR,
	lfCreateCQ, lfCloseCQ, lfCreateSRQ, lfCloseSRQ, lfPostSRQRecv, lfPoll, lfRun, lfCloseBuffer,
}

type lfDCI struct {
	d      *dc.DCI
	pd, cq int
	closed bool
	// sends are the work requests posted and not yet completed.
	sends map[uint64]bool
	// mustFail are the sends (by WRID) posted when no live DCT had the
	// number and key of their Remote, with that number: none may
	// complete successfully.
	mustFail map[uint64]uint32
	remotes  [lfRemotes]*lfRemote
}

type lfRemote struct {
	r *dc.Remote
	// dct is the target it was made from.
	dct *lfDCT
}

type lfDCT struct {
	t           *dc.DCT
	pd, cq, srq int
	key         uint64
	closed      bool
}

func (w *lfWorld) dciClosed(i int) bool {
	d := w.dcis[i]
	return d == nil || d.closed || w.pdClosed(d.pd) || w.cqClosed(d.cq)
}

func (w *lfWorld) dctClosed(i int) bool {
	t := w.dcts[i]
	return t == nil || t.closed || w.pdClosed(t.pd) || w.cqClosed(t.cq) || w.srqClosed(t.srq)
}

// checkClosedDC compares the DC objects' Closed with the model.
func (w *lfWorld) checkClosedDC() {
	w.t.Helper()
	for i, d := range w.dcis {
		if d == nil {
			continue
		}
		if got := d.d.Handle().Closed(); got != w.dciClosed(i) {
			w.failf("DCI %d: Closed() = %v, the model says %v", i, got, w.dciClosed(i))
		}
		if w.dciClosed(i) && d.d.State() != transport.StateClosed {
			w.failf("DCI %d: closed but State() = %v", i, d.d.State())
		}
	}
	for i, t := range w.dcts {
		if t == nil {
			continue
		}
		if got := t.t.Handle().Closed(); got != w.dctClosed(i) {
			w.failf("DCT %d: Closed() = %v, the model says %v", i, got, w.dctClosed(i))
		}
		if w.dctClosed(i) && t.t.State() != transport.StateClosed {
			w.failf("DCT %d: closed but State() = %v", i, t.t.State())
		}
		if s := w.srqs[t.srq]; s != nil && t.t.SRQ() != s.s {
			w.failf("DCT %d: SRQ() is not the SRQ it was created with", i)
		}
	}
}

// forgetDC drops the DC objects whose PD, CQ or SRQ slot drop names (a
// DCI has no SRQ: -1): their parent's slot is reused, and they are closed.
func (w *lfWorld) forgetDC(drop func(pd, cq, srq int) bool) {
	for i, d := range w.dcis {
		if d != nil && drop(d.pd, d.cq, -1) {
			w.dcis[i] = nil
		}
	}
	for i, t := range w.dcts {
		if t != nil && drop(t.pd, t.cq, t.srq) {
			w.dcts[i] = nil
		}
	}
}

// completeDC checks a completion of a DCI or a DCT; ok is false when c is
// of neither.
func (w *lfWorld) completeDC(c *transport.Completion) (msg string, ok bool) {
	for _, d := range w.dcis {
		if d == nil || &d.d.Queue != c.Queue {
			continue
		}
		if c.Opcode != prm.CQEReq && c.Opcode != prm.CQEReqErr {
			return fmt.Sprintf("DCI %#x: receive completion opcode %v WRID %d", c.QPN, c.Opcode, c.WRID), true
		}
		if !d.sends[c.WRID] {
			return fmt.Sprintf("DCI %#x: completion opcode %v WRID %d: no such work request outstanding (match %v, syndrome %v)",
				c.QPN, c.Opcode, c.WRID, c.Match, c.Syndrome), true
		}
		delete(d.sends, c.WRID)
		if n, bad := d.mustFail[c.WRID]; bad {
			delete(d.mustFail, c.WRID)
			if c.Match == transport.MatchOK {
				return fmt.Sprintf("DCI %#x: WRID %d (%v) to DCT %#x succeeded, but no live DCT had its number and key when it was posted",
					c.QPN, c.WRID, c.SendOpcode, n), true
			}
		}
		return "", true
	}
	for _, t := range w.dcts {
		if t == nil || &t.t.Queue != c.Queue {
			continue
		}
		switch c.Opcode {
		case prm.CQEReq, prm.CQEReqErr:
			return fmt.Sprintf("DCT %#x: send completion opcode %v WRID %d", c.QPN, c.Opcode, c.WRID), true
		}
		s := w.srqs[t.srq]
		if s == nil || !s.recvs[c.WRID] {
			return fmt.Sprintf("DCT %#x: completion opcode %v WRID %d: no such receive outstanding on its SRQ (match %v, syndrome %v)",
				c.QPN, c.Opcode, c.WRID, c.Match, c.Syndrome), true
		}
		delete(s.recvs, c.WRID)
		return "", true
	}
	return "", false
}

func (w *lfWorld) runDC(op int, a lfArgs) {
	if op < dcNewDCI {
		w.run(dcShared[op], a)
		return
	}
	defer w.watchdog()()
	switch op {
	case dcNewDCI:
		w.newDCI(a)
	case dcNewDCT:
		w.newDCT(a)
	case dcCloseDCI:
		i := a.b(0) % lfDCIs
		if d := w.dcis[i]; d != nil {
			err := d.d.Close()
			if a.b(1)%2 == 1 {
				err = d.d.Handle().Close()
			}
			w.checkNil("close DCI", err)
			d.closed = true
		}
	case dcCloseDCT:
		i := a.b(0) % lfDCTs
		if t := w.dcts[i]; t != nil {
			err := t.t.Close()
			if a.b(1)%2 == 1 {
				err = t.t.Handle().Close()
			}
			w.checkNil("close DCT", err)
			t.closed = true
		}
	case dcNewRemote:
		w.newRemote(a)
	case dcCloseRemote:
		d := w.dcis[a.b(0)%lfDCIs]
		if d == nil {
			return
		}
		ri := a.b(1) % lfRemotes
		if r := d.remotes[ri]; r != nil {
			w.checkNil("close remote", r.r.Close())
			w.checkNil("close remote again", r.r.Close())
			d.remotes[ri] = nil
		}
	case dcPost:
		w.postDC(a)
	case dcFail:
		w.failDC(a)
	case dcModify:
		w.modifyDC(a)
	case dcCloseWhileStreaming:
		w.closeWhileStreaming(a)
	case dcPollerAddRemove:
		w.dcPollerAddRemove(a)
	case dcBeginSRQRecv:
		w.beginSRQRecv(a)
	case dcQueueRecv:
		w.queueRecv(a)
	}
}

// checkNil fails unless err is nil: Close is idempotent, also after a
// parent's Close.
func (w *lfWorld) checkNil(what string, err error) {
	w.t.Helper()
	if lfTrace {
		w.t.Logf("  %s: %v", what, err)
	}
	if err != nil {
		w.failf("%s: %v, want nil (Close is idempotent)", what, err)
	}
}

func (w *lfWorld) newDCI(a lfArgs) {
	i, pi, ci := a.b(0)%lfDCIs, a.b(1)%lfPDs, a.b(2)%lfCQs
	if w.dcis[i] != nil && !w.dciClosed(i) {
		return
	}
	p, c := w.pds[pi], w.cqs[ci]
	if p == nil || c == nil {
		return
	}
	cfgb := a.b(3)
	cfg := dc.DCIConfig{
		SendDepth:  uint32(1 + cfgb%8),
		MaxSendSGE: uint32(1 + (cfgb>>3)%2),
		MaxInline:  uint32((cfgb>>4)%4) * 32,
		// A short ACK timeout fails requests to a closed target at
		// once; a longer one lets a target on the other member of a
		// shared fabric answer.
		Timeout:    []int{1, 10, 14}[a.b(4)%3],
		RetryCount: -1,
		RNRRetry:   (cfgb >> 6) % 3,
	}
	d, err := dc.NewDCI(p.pd, c.cq, cfg)
	closed := w.pdClosed(pi) || w.cqClosed(ci)
	if p.ctx != c.ctx {
		if err == nil || !errors.Is(err, ctx.ErrInvalidArgument) && !errors.Is(err, ctx.ErrClosed) {
			w.failf("dc.NewDCI across Contexts: %v, want ctx.ErrInvalidArgument", err)
		}
		return
	}
	w.checkErr("dc.NewDCI", err, closed)
	if err != nil {
		return
	}
	w.dcis[i] = &lfDCI{d: d, pd: pi, cq: ci, sends: map[uint64]bool{}, mustFail: map[uint64]uint32{}}
	w.checkErr("poller add DCI", c.p.Add(d), false)
}

var lfDCTAccess = []ctx.Access{
	0, // everything
	ctx.AccessRemoteWrite,
	ctx.AccessRemoteRead,
	ctx.AccessRemoteAtomic,
	ctx.AccessRemoteWrite | ctx.AccessRemoteRead,
}

func (w *lfWorld) newDCT(a lfArgs) {
	i, pi, ci := a.b(0)%lfDCTs, a.b(1)%lfPDs, a.b(2)%lfCQs
	si := a.b(3) % (lfSRQs + 1) // lfSRQs: none
	if w.dcts[i] != nil && !w.dctClosed(i) {
		return
	}
	p, c := w.pds[pi], w.cqs[ci]
	if p == nil || c == nil || si < lfSRQs && w.srqs[si] == nil {
		return
	}
	key := lfDCTKeys[a.b(4)%len(lfDCTKeys)]
	cfg := dc.DCTConfig{Key: key, RemoteAccess: lfDCTAccess[(a.b(4)/len(lfDCTKeys))%len(lfDCTAccess)], MinRNRTimer: 1}
	if si < lfSRQs {
		cfg.SRQ = w.srqs[si].s
	}
	t, err := dc.NewDCT(p.pd, c.cq, cfg)
	if si == lfSRQs {
		if err == nil {
			w.failf("dc.NewDCT without an SRQ succeeded")
		}
		w.checkErr("dc.NewDCT without an SRQ", err, false)
		return
	}
	closed := w.pdClosed(pi) || w.cqClosed(ci) || w.srqClosed(si)
	if p.ctx != c.ctx || w.pds[w.srqs[si].pd].ctx != p.ctx {
		if err == nil || !errors.Is(err, ctx.ErrInvalidArgument) && !errors.Is(err, ctx.ErrClosed) {
			w.failf("dc.NewDCT across Contexts: %v, want ctx.ErrInvalidArgument", err)
		}
		return
	}
	w.checkErr("dc.NewDCT", err, closed)
	if err != nil {
		return
	}
	w.dcts[i] = &lfDCT{t: t, pd: pi, cq: ci, srq: si, key: key}
	// A DCT of another fabric may have the number of a closed one a
	// Remote still names: such sends may reach it.
	for _, d := range w.dcis {
		if d == nil {
			continue
		}
		for wrid, n := range d.mustFail {
			if n == t.QPN() {
				delete(d.mustFail, wrid)
			}
		}
	}
	w.checkErr("poller add DCT", c.p.Add(t), false)
}

// dcTargetLive reports whether a live DCT of the program has r's number and
// key.
func (w *lfWorld) dcTargetLive(r *dc.Remote) bool {
	for i, t := range w.dcts {
		if t != nil && !w.dctClosed(i) && t.t.QPN() == r.DCTNumber() && t.key == r.Key() {
			return true
		}
	}
	return false
}

func (w *lfWorld) newRemote(a lfArgs) {
	di, ri := a.b(0)%lfDCIs, a.b(1)%lfRemotes
	d := w.dcis[di]
	if d == nil {
		return
	}
	sel := a.b(2) % (lfDCTs + 3)
	var ep endpoint.Endpoint
	var t *lfDCT
	switch {
	case sel < lfDCTs:
		if t = w.dcts[sel]; t == nil {
			return
		}
		ep = t.t.Endpoint()
		if a.b(3)%3 == 2 {
			ep.DCAccessKey |= lfBadKeyBits
		}
	case sel == lfDCTs: // another transport's endpoint
		if t = w.dcts[a.b(3)%lfDCTs]; t == nil {
			return
		}
		ep = t.t.Endpoint()
		ep.Transport = endpoint.TransportRC
	case sel == lfDCTs+1: // the zero endpoint
	default: // a DCT number wider than 24 bits
		ep = endpoint.Endpoint{Transport: endpoint.TransportDC, MTU: ctx.MTU1024, LID: 1, DCTNumber: 1 << 24}
	}
	r, err := d.d.NewRemote(ep)
	if sel >= lfDCTs {
		if err == nil {
			w.failf("NewRemote of a bad endpoint %+v succeeded", ep)
		}
		w.checkErr("NewRemote of a bad endpoint", err, false)
		return
	}
	w.checkErr("NewRemote", err, w.pdClosed(d.pd))
	if err != nil {
		return
	}
	if old := d.remotes[ri]; old != nil {
		w.checkNil("close remote", old.r.Close())
	}
	d.remotes[ri] = &lfRemote{r: r, dct: t}
}

func (w *lfWorld) postDC(a lfArgs) {
	di := a.b(0) % lfDCIs
	d := w.dcis[di]
	if d == nil {
		return
	}
	ri := a.b(1) % lfRemotes
	kind := (a.b(1) / lfRemotes) % 13
	laddr, llen, lkey := w.sge(a.b(2), a.b(4))
	raddr, rkey := w.remote(a.b(3), a.b(4))
	w.wrid++
	wrid := w.wrid
	flags := wqebuilder.Signaled
	if a.b(4)&0x80 != 0 {
		flags |= wqebuilder.Fence
	}
	closed := w.dciClosed(di)
	var r *dc.Remote
	if rem := d.remotes[ri]; rem != nil {
		r = rem.r
	}
	st, post := d.d.Post(wrid, flags, r)
	var fin error
	switch kind {
	case 0:
		fin = st.Send().SGE(laddr, llen, lkey).FinishBlueFlame()
	case 1:
		fin = st.SendImm(uint32(wrid)).Inline(lfPayload[:a.b(4)%len(lfPayload)]).FinishBlueFlame()
	case 2:
		fin = st.RdmaWrite(raddr, rkey).SGE(laddr, llen, lkey).FinishBlueFlame()
	case 3:
		fin = st.RdmaWriteImm(raddr, rkey, 9).SGE(laddr, llen, lkey).Finish()
		d.d.RingDoorbell()
	case 4:
		fin = st.RdmaRead(raddr, rkey).SGE(laddr, llen, lkey).FinishBlueFlame()
	case 5:
		fin = st.AtomicFA(raddr&^7, rkey, 1).Result(laddr, lkey).FinishBlueFlame()
	case 6:
		fin = st.AtomicCS(raddr&^7, rkey, 0, wrid).Result(laddr, lkey).FinishBlueFlame()
	case 7:
		fin = st.Send().SGE(laddr, llen, lkey).SGE(laddr, llen, lkey).FinishBlueFlame()
	case 8:
		fin = st.RdmaWrite(raddr, rkey).Inline(lfPayload[:a.b(4)%len(lfPayload)]).Finish()
		d.d.RingDoorbell()
	case 9:
		fin = st.Nop().FinishBlueFlame()
	case 10:
		fin = st.SendInv(rkey).SGE(laddr, llen, lkey).FinishBlueFlame()
	case 11:
		fin = st.MaskedFA64(raddr&^7, rkey, 3, 1<<32).Result(laddr, lkey).FinishBlueFlame()
	case 12:
		fin = st.MaskedCS32(raddr&^3, rkey, 0, uint32(wrid), 0xffff, 0xffffffff).Result(laddr, lkey).FinishBlueFlame()
	}
	if r == nil {
		if post == nil || fin == nil {
			w.failf("post with a nil Remote: %v, its Finish %v; want both refused", post, fin)
		}
		w.checkErr("post with a nil Remote", post, false)
		return
	}
	if post != nil {
		w.checkErr("DC post", post, closed)
		if fin == nil {
			w.failf("DC post refused (%v) but its Finish succeeded", post)
		}
		w.checkErr("finish of a refused DC post", fin, closed)
		return
	}
	if closed && fin == nil {
		w.failf("DC post on a closed DCI succeeded")
	}
	w.checkErr("finish DC post", fin, closed)
	if fin != nil {
		return
	}
	d.sends[wrid] = true
	if kind != 9 && !w.dcTargetLive(r) {
		d.mustFail[wrid] = r.DCTNumber()
	}
}

// beginSRQRecv posts a receive of one to three entries to an SRQ through
// its receive stage (the last one maybe empty), finished with or without
// the doorbell, or finished twice.
func (w *lfWorld) beginSRQRecv(a lfArgs) {
	i := a.b(0) % lfSRQs
	s := w.srqs[i]
	if s == nil {
		return
	}
	w.wrid++
	st := s.s.BeginRecv(w.wrid)
	for k := range 1 + a.b(3)%3 {
		addr, length, lkey := w.sge(a.b(1+k%2)+k, a.b(2)+k*7)
		st = st.SGE(addr, length, lkey)
	}
	var err error
	if a.b(3)/3%2 == 0 {
		err = st.Finish()
		s.s.RingRecvDoorbell()
	} else {
		err = st.FinishDoorbell()
	}
	w.checkErr("SRQ receive stage", err, w.srqClosed(i))
	if err != nil {
		return
	}
	s.recvs[w.wrid] = true
	if a.b(3)/6%2 == 1 {
		if err := st.Finish(); !errors.Is(err, wqebuilder.ErrStaleStage) {
			w.failf("SRQ receive stage finished twice: %v, want wqebuilder.ErrStaleStage", err)
		}
	}
}

// queueRecv posts a receive to the own receive queue of a DCI or a DCT,
// which neither has: refused (ctx.ErrClosed once closed), with the
// doorbell a no-op.
func (w *lfWorld) queueRecv(a lfArgs) {
	var q *transport.Queue
	var closed bool
	if a.b(0)%2 == 0 {
		i := a.b(1) % lfDCIs
		if w.dcis[i] == nil {
			return
		}
		q, closed = &w.dcis[i].d.Queue, w.dciClosed(i)
	} else {
		i := a.b(1) % lfDCTs
		if w.dcts[i] == nil {
			return
		}
		q, closed = &w.dcts[i].t.Queue, w.dctClosed(i)
	}
	addr, length, lkey := w.sge(a.b(2), a.b(3))
	w.wrid++
	err := q.PostRecv(w.wrid, addr, length, lkey)
	if err == nil {
		w.failf("receive posted to a DC queue's own receive queue")
	}
	w.checkErr("DC queue receive", err, closed)
	q.RingRecvDoorbell()
	if n := q.RecvOutstanding(); n != 0 {
		w.failf("DC queue: %d receives outstanding on its own receive queue", n)
	}
}

func (w *lfWorld) failDC(a lfArgs) {
	if a.b(1)%2 == 0 {
		i := a.b(0) % lfDCIs
		if d := w.dcis[i]; d != nil {
			w.checkErr("fail DCI", d.d.Fail(), w.dciClosed(i))
		}
		return
	}
	if t := w.dcts[a.b(0)%lfDCTs]; t != nil {
		// A DCT has no error state: refused with ErrTransport.
		if err := t.t.Fail(); !errors.Is(err, transport.ErrTransport) {
			w.failf("fail DCT: %v, want transport.ErrTransport", err)
		}
	}
}

// modifyDC moves a DCI or a DCT through its control-plane handle. The
// kernel's table refuses RESET for both and every move of a DCT after
// RTR; a DCI may go RTS→RTS and to ERR.
func (w *lfWorld) modifyDC(a lfArgs) {
	states := []ctx.QPState{ctx.QPStateReset, ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS, ctx.QPStateError}
	s := states[a.b(2)%len(states)]
	var h *ctx.QueuePair
	var closed, dct bool
	if a.b(1)%2 == 0 {
		i := a.b(0) % lfDCIs
		if w.dcis[i] == nil {
			return
		}
		h, closed = w.dcis[i].d.Handle(), w.dciClosed(i)
	} else {
		i := a.b(0) % lfDCTs
		if w.dcts[i] == nil {
			return
		}
		h, closed, dct = w.dcts[i].t.Handle(), w.dctClosed(i), true
	}
	err := h.Modify(ctx.QPAttr{State: s})
	if err == nil && (dct || s == ctx.QPStateReset) {
		w.failf("modify %v to %v succeeded", h.Type(), s)
	}
	w.checkErr("modify "+h.Type().String(), err, closed)
}

func (w *lfWorld) dcPollerAddRemove(a lfArgs) {
	c := w.cqs[a.b(1)%lfCQs]
	if c == nil {
		return
	}
	var qp transport.QueuePair
	var closed bool
	if a.b(2)%2 == 0 {
		i := a.b(0) % lfDCIs
		if w.dcis[i] == nil {
			return
		}
		qp, closed = w.dcis[i].d, w.dciClosed(i)
	} else {
		i := a.b(0) % lfDCTs
		if w.dcts[i] == nil {
			return
		}
		qp, closed = w.dcts[i].t, w.dctClosed(i)
	}
	if a.b(2)/2%2 == 0 {
		w.checkErr("poller add", c.p.Add(qp), closed)
	} else {
		w.checkErr("poller remove", c.p.Remove(qp), false)
	}
}

// closeWhileStreaming runs the owner of a DCI, of the target of one of its
// Remotes and of that target's SRQ on another goroutine — posting to the
// target with Post, posting receives to the SRQ and
// polling the Pollers of both CQs — while this one closes the DCI, the
// DCT, the SRQ, a CQ, a PD, a Context or a memory region.
func (w *lfWorld) closeWhileStreaming(a lfArgs) {
	di := a.b(0) % lfDCIs
	d := w.dcis[di]
	if d == nil {
		return
	}
	var r *dc.Remote
	var t *lfDCT
	if rem := d.remotes[a.b(2)%lfRemotes]; rem != nil {
		r, t = rem.r, rem.dct
		if t != nil && !w.liveSlot(t) {
			t = nil // its slot was reused: the target is closed
		}
	}
	var srq *lfSRQ
	var tc *lfCQ
	if t != nil {
		srq, tc = w.srqs[t.srq], w.cqs[t.cq]
	}
	dcq := w.cqs[d.cq]
	m := w.mrs[a.b(3)%lfMRs]
	owner := w.ctxs[dcq.ctx].c
	var msgs []string
	stop := make(chan struct{})
	done := make(chan struct{})
	started := make(chan struct{})
	handle := func(wc *transport.Completion) {
		if msg := w.complete(wc); msg != "" {
			msgs = append(msgs, msg)
		}
	}
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
			var addr uint64
			var lkey, rkey uint32
			if m != nil {
				addr, lkey, rkey = m.addr, m.lkey, m.rkey
			}
			if r != nil {
				wrid++
				st, err := d.d.Post(wrid, wqebuilder.Signaled, r)
				if err == nil {
					var fin error
					if n%3 == 2 {
						fin = st.RdmaWrite(addr, rkey).SGE(addr, 16, lkey).FinishBlueFlame()
					} else {
						fin = st.Send().SGE(addr, 16, lkey).FinishBlueFlame()
					}
					if fin == nil {
						d.sends[wrid] = true
					}
				}
			}
			if srq != nil {
				wrid++
				if srq.s.PostRecv(wrid, addr+64, 32, lkey) == nil {
					srq.recvs[wrid] = true
				}
			}
			dcq.p.Poll(8, handle)
			if tc != nil && tc != dcq {
				tc.p.Poll(8, handle)
			}
			if w.manual {
				_, _ = w.f.Step()
			} else {
				owner.Idle()
			}
		}
	}()
	<-started
	var err error
	switch a.b(1) % 9 {
	case 0:
		err = d.d.Close()
		d.closed = true
	case 1:
		if t != nil {
			err = t.t.Close()
			t.closed = true
		}
	case 2:
		if srq != nil {
			err = srq.s.Close()
			srq.closed = true
		}
	case 3:
		err = dcq.cq.Close()
		dcq.closed = true
	case 4:
		if tc != nil {
			err = tc.cq.Close()
			tc.closed = true
		}
	case 5:
		p := w.pds[d.pd]
		err = p.pd.Close()
		p.closed = true
	case 6:
		if t != nil {
			p := w.pds[t.pd]
			err = p.pd.Close()
			p.closed = true
		}
	case 7:
		ci := dcq.ctx
		if tc != nil && a.b(4)%2 == 1 {
			ci = tc.ctx
		}
		err = w.ctxs[ci].c.Close()
		w.ctxs[ci].closed = true
	case 8:
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
		panic("lifecycle: the DC owner goroutine did not stop after a close")
	}
	w.checkErr("close while streaming", err, false)
	for _, msg := range msgs {
		w.failf("owner goroutine: %s", msg)
	}
}

// liveSlot reports whether t is still in the DCT pool.
func (w *lfWorld) liveSlot(t *lfDCT) bool {
	for _, x := range w.dcts {
		if x == t {
			return true
		}
	}
	return false
}

// lfDCWorld is a DC world for the seeds: contexts 0 and 1 on sim0 and
// sim1, PDs 0 and 1, MRs 0 (arena 0 slot 0, PD 0) and 1 (arena 1 slot 0,
// PD 1) with every access, CQs 0 and 1, SRQ 0 in PD 1 (3 scatter
// entries); DCI 0 in PD 0 on
// CQ 0; DCTs 0 (key 0x1234) and 1 (key 0x5678) in PD 1 on CQ 1 and SRQ 0;
// DCI 0's Remote 0 reaches DCT 0, Remote 1 DCT 1, Remote 2 DCT 0 with a
// wrong key.
func lfDCWorld() [][]byte {
	return [][]byte{
		lfOp(dcOpenContext, 0, 0), lfOp(dcOpenContext, 1, 1),
		lfOp(dcAllocPD, 0, 0), lfOp(dcAllocPD, 1, 1),
		lfOp(dcRegisterMR, 0, 0, 0, 0), lfOp(dcRegisterMR, 1, 1, 1, 0),
		lfOp(dcCreateCQ, 0, 0, 16), lfOp(dcCreateCQ, 1, 1, 16),
		lfOp(dcCreateSRQ, 0, 1, 8, 3),
		lfOp(dcNewDCI, 0, 0, 0, 7), lfOp(dcNewDCT, 0, 1, 1, 0, 0), lfOp(dcNewDCT, 1, 1, 1, 0, 1),
		lfOp(dcNewRemote, 0, 0, 0, 0), lfOp(dcNewRemote, 0, 1, 1, 0), lfOp(dcNewRemote, 0, 2, 0, 2),
	}
}

// dcPostOp posts kind with DCI 0 through Remote ri: local SGE of MR 0,
// remote address of MR 1 (sel, which chose between Post and a post with
// a DCI stream id, is kept so that the corpus's programs stay valid).
func dcPostOp(ri, kind, sel byte) []byte {
	return lfOp(dcPost, sel*lfDCIs, ri+kind*lfRemotes, 0, 1, 5)
}

func dcLifecycleSeeds() [][]byte {
	world := lfDCWorld()
	with := func(mode byte, ops ...[]byte) []byte {
		return lfProgram(mode, append(append([][]byte{}, world...), ops...)...)
	}
	// The world with context 1 on the second member of a shared fabric
	// and a DCI whose ACK timeout lets it answer.
	shmWorld := append([][]byte{}, world...)
	shmWorld[1] = lfOp(dcOpenContext, 1, 1, 0, 1)
	shmWorld[9] = lfOp(dcNewDCI, 0, 0, 0, 7, 1)
	var every [][]byte
	for k := range byte(13) {
		every = append(every, dcPostOp(byte(k%2), k, k))
	}
	return [][]byte{
		// Every operation to both targets, with receives, polled.
		with(0, append(append([][]byte{lfOp(dcPostSRQRecv, 0, 1, 0), lfOp(dcPostSRQRecv, 0, 1, 0),
			lfOp(dcPostSRQRecv, 0, 1, 0), lfOp(dcPostSRQRecv, 0, 1, 0)}, every...),
			lfOp(dcRun), lfOp(dcPoll, 0, 16), lfOp(dcPoll, 1, 16))...),
		// Receives of several entries, finished in each way, and twice.
		with(0, lfOp(dcBeginSRQRecv, 0, 1, 1, 2), lfOp(dcBeginSRQRecv, 0, 8, 1, 7), lfOp(dcBeginSRQRecv, 0, 1, 0, 9),
			dcPostOp(0, 0, 1), dcPostOp(1, 1, 0), dcPostOp(0, 3, 0), lfOp(dcRun), lfOp(dcPoll, 0, 8), lfOp(dcPoll, 1, 8)),
		// The wrong key: the DCI fails, the DCT carries on.
		with(0, lfOp(dcPostSRQRecv, 0, 1, 0), dcPostOp(2, 0, 0), dcPostOp(0, 2, 0), lfOp(dcRun),
			lfOp(dcPoll, 0, 8), lfOp(dcNewDCI, 1, 0, 0, 7), lfOp(dcNewRemote, 1, 0, 0, 0),
			lfOp(dcPost, 1, 0, 0, 1, 5), lfOp(dcRun), lfOp(dcPoll, 0, 8), lfOp(dcPoll, 1, 8)),
		// The DCT closed while requests to it are outstanding, then after.
		with(0, lfOp(dcPostSRQRecv, 0, 1, 0), dcPostOp(0, 0, 0), dcPostOp(0, 2, 1), lfOp(dcCloseDCT, 0),
			dcPostOp(0, 2, 0), lfOp(dcRun), lfOp(dcPoll, 0, 8), lfOp(dcPoll, 1, 8),
			lfOp(dcCloseDCT, 0, 1), lfOp(dcNewDCT, 0, 1, 1, 0, 0), dcPostOp(1, 0, 0), lfOp(dcPoll, 0, 8)),
		// Fail and modify; the parents closed under them.
		with(0, dcPostOp(0, 2, 0), lfOp(dcFail, 0, 0), lfOp(dcFail, 0, 1), lfOp(dcModify, 0, 0, 0),
			lfOp(dcModify, 0, 1, 4), lfOp(dcModify, 0, 0, 3), lfOp(dcPoll, 0, 8), lfOp(dcCloseSRQ, 0),
			lfOp(dcPost, 0, 0, 0, 1, 5), lfOp(dcClosePD, 0), lfOp(dcCloseRemote, 0, 0), lfOp(dcCloseDCI, 0),
			lfOp(dcCloseCQ, 1), lfOp(dcCloseDCT, 1, 1), lfOp(dcCloseContext, 1), lfOp(dcPoll, 1, 4)),
		// Close while streaming, each kind of close.
		with(1, lfOp(dcCloseWhileStreaming, 0, 1, 0, 0), lfOp(dcCloseWhileStreaming, 0, 2, 1, 0),
			lfOp(dcPoll, 0, 8), lfOp(dcPoll, 1, 8)),
		with(0, lfOp(dcCloseWhileStreaming, 0, 0, 0, 0), lfOp(dcPoll, 1, 8)),
		with(0, lfOp(dcCloseWhileStreaming, 0, 4, 1, 0), lfOp(dcCloseWhileStreaming, 0, 6, 0, 1)),
		with(1, lfOp(dcCloseWhileStreaming, 0, 7, 0, 0, 1), lfOp(dcCloseWhileStreaming, 0, 8, 1, 0)),
		with(0, lfOp(dcCloseWhileStreaming, 0, 3, 0, 0), lfOp(dcCloseWhileStreaming, 0, 5, 1, 0)),
		// Across the two members of a shared fabric: a long ACK timeout,
		// then a target closed while the DCI streams to it.
		lfProgram(5, append(append([][]byte{}, shmWorld...), lfOp(dcPostSRQRecv, 0, 1, 0), dcPostOp(0, 0, 0),
			dcPostOp(0, 2, 1), dcPostOp(2, 0, 0), lfOp(dcPoll, 0, 8), lfOp(dcPoll, 1, 8),
			lfOp(dcCloseWhileStreaming, 0, 1, 1, 0), lfOp(dcPoll, 0, 8))...),
		// Bad endpoints, no SRQ, across Contexts, poller add and remove.
		with(2, lfOp(dcNewRemote, 0, 0, 3, 0), lfOp(dcNewRemote, 0, 0, 4), lfOp(dcNewRemote, 0, 0, 5),
			lfOp(dcNewDCT, 2, 1, 1, 2, 0), lfOp(dcNewDCT, 2, 0, 1, 0, 0), lfOp(dcNewDCI, 1, 0, 1, 0),
			lfOp(dcPollerAddRemove, 0, 0, 2), lfOp(dcPost, 0, 0, 0, 1, 5), lfOp(dcPoll, 0, 8),
			lfOp(dcPollerAddRemove, 0, 0, 0), lfOp(dcPollerAddRemove, 0, 1, 3), lfOp(dcPoll, 1, 8)),
	}
}
