package reliability

import (
	"encoding/binary"
	"math/rand"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// EnvSoak sizes the soak (see the package documentation).
const EnvSoak = "MLX5KIT_SOAK"

// soakOps returns the number of send work requests the soak posts.
func soakOps(t testing.TB) int {
	switch v := os.Getenv(EnvSoak); {
	case v == "full":
		return 1_000_000
	case v != "":
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "%s=%q", EnvSoak, v)
		return n
	case testing.Short():
		return 6_000
	}
	return 60_000
}

func soakSeed(t testing.TB) int64 {
	if v := os.Getenv("MLX5KIT_SOAK_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 0, 64)
		require.NoError(t, err)
		return n
	}
	return 1
}

// Sizes of the lanes.
const (
	sendDepth   = 64
	recvDepth   = 64
	srqDepth    = 128
	udRecvDepth = 128
	maxInline   = 64
	maxBatch    = 24 // send work requests per lane and batch
	targetSize  = 16 << 10
	srcSize     = 16 << 10
	sinkSize    = 8 << 10
	stageSlot   = 2048 // a SEND's payload is staged here; up to 2 KiB
	stageSlots  = sendDepth
	recvSlot    = 1024 // RC and DC receive buffers
	udRecvSlot  = ud.GRHSize + 600
	maxSend     = recvSlot // the largest SEND that fits a receive buffer
	maxUDSend   = 512
)

// counts is what the soak did; it is printed at the end.
type counts struct {
	sendWRs, recvWRs            int
	rcWRs, dcWRs, udWRs         int
	signaled, implicit, flushed int
	succeeded                   int
	errorCQEs, recvErrors       map[prm.Syndrome]int
	received, recvFlushed       int
	batches, rebuilds           int
	failQP, failResponder       int
	failAPI, delays             int
	rnrBatches, lateRecvs       int
	udSent, udReceived          int
	faults                      map[string]int
}

// soak is the world of the soak test: two HCAs, their memory, a send and
// a receive CQ on each with a poller, and the lanes.
type soak struct {
	t     testing.TB
	x     *fabric
	f     *sim.Fabric
	rng   *rand.Rand
	ar    [2]*arena
	scq   [2]*ctx.CompletionQueue
	rcq   [2]*ctx.CompletionQueue
	polls []*transport.Poller
	lanes []*lane
	n     counts
	seq   uint64

	owner map[*transport.Queue]any // *sqModel or *rqModel
	bySeq map[uint64]*message
	byImm map[uint32]*message
	batch []*message // the messages of the current batch
}

type laneKind int

const (
	laneRC laneKind = iota
	laneDC
	laneUD
)

// lane is one stream of traffic: an RC pair, a DCI with two DCTs behind
// an SRQ, or a UD sender and receiver. The requester is on HCA side, the
// responder on the other.
type lane struct {
	s    *soak
	name string
	kind laneKind
	side int

	a, b    *rc.QP
	dci     *dc.DCI
	dct     [2]*dc.DCT
	remote  [2]*dc.Remote
	badKey  [2]*dc.Remote // the DCTs with a wrong DC access key
	srq     *transport.SharedReceiveQueue
	ua, ub  *ud.QP
	uremote *ud.Remote
	badQKey *ud.Remote // the receiver with a qkey it does not accept

	src, stage, sink *region // requester side
	target           [2]*region
	recv             *region // responder side
	slotSize, slots  int
	nextSlot         int

	sq   *sqModel
	rq   *rqModel
	wrid uint64
	rwid uint64

	avail    int  // receives posted and not yet consumed by this batch's plan
	noRecv   bool // this batch does not post the receives its SENDs need
	late     int  // receives to post after the RNR NAK (late mode)
	lateMode bool
	active   bool
}

func TestSoak(t *testing.T) {
	ops := soakOps(t)
	seed := soakSeed(t)
	s := newSoak(t, seed)
	start := time.Now()
	for s.n.sendWRs < ops {
		s.runBatch()
	}
	s.teardown()
	el := time.Since(start)
	st := s.f.Stats()
	n := &s.n
	t.Logf("soak seed %d: %d send work requests (RC %d, DC %d, UD %d) and %d receives in %d batches, %v (%.0f ns per work request)",
		seed, n.sendWRs, n.rcWRs, n.dcWRs, n.udWRs, n.recvWRs, n.batches, el.Round(time.Millisecond), float64(el.Nanoseconds())/float64(n.sendWRs))
	t.Logf("send side: %d succeeded (%d signaled completions, %d retired unsignaled), %d flushed, errors %v; lost 0, duplicated 0",
		n.succeeded, n.signaled, n.implicit, n.flushed, n.errorCQEs)
	t.Logf("receive side: %d received, %d flushed, errors %v; UD %d sent, %d received, model drops %d, duplicates %d, reorders %d",
		n.received, n.recvFlushed, n.recvErrors, n.udSent, n.udReceived, st.UDDropped, st.UDDuplicated, st.UDReordered)
	t.Logf("faults: %v; QPs failed by the HCA %d (responders %d), by Fail %d; RNR batches %d, late receives %d, RNR NAKs %d; delayed CQEs %d in %d settings; lanes rebuilt %d",
		n.faults, n.failQP, n.failResponder, n.failAPI, n.rnrBatches, n.lateRecvs, st.RNRNaks, st.DelayedCQEs, n.delays, n.rebuilds)
	require.Zero(t, st.CQOverruns, "CQ overruns")
	require.Zero(t, st.LostCQEs, "CQEs the model could not write")
	require.Zero(t, st.Violations, "strict-mode violations")
	require.Equal(t, n.sendWRs, n.succeeded+n.flushed+sumErrors(n.errorCQEs), "every send work request accounted for")
	if ops >= 10_000 {
		// Every fault happened at least once.
		for _, k := range []string{"wrong rkey", "out of bounds", "SGE outside its region", "receive too small", "wrong DC key", "misaligned atomic"} {
			require.NotZero(t, n.faults[k], "fault %q never injected", k)
		}
		require.NotZero(t, n.failQP)
		require.NotZero(t, n.failResponder)
		require.NotZero(t, n.failAPI)
		require.NotZero(t, n.rnrBatches)
		require.NotZero(t, n.lateRecvs)
		require.NotZero(t, st.UDDuplicated)
		require.NotZero(t, st.UDReordered)
		require.NotZero(t, st.DelayedCQEs)
		require.NotZero(t, n.errorCQEs[prm.SyndromeRNRRetryExc])
		require.NotZero(t, n.errorCQEs[prm.SyndromeTransportRetryExc])
	}
}

func sumErrors(m map[prm.Syndrome]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func newSoak(t testing.TB, seed int64) *soak {
	x := newFabric(t, sim.Options{Seed: seed})
	s := &soak{
		t: t, x: x, f: x.f, rng: rand.New(rand.NewSource(seed)),
		owner: map[*transport.Queue]any{}, bySeq: map[uint64]*message{}, byImm: map[uint32]*message{},
	}
	s.n.errorCQEs = map[prm.Syndrome]int{}
	s.n.recvErrors = map[prm.Syndrome]int{}
	s.n.faults = map[string]int{}
	for i := range 2 {
		s.ar[i] = newArena(t, x.pd[i], 4<<20)
		ar := s.ar[i]
		t.Cleanup(func() { require.NoError(t, ar.buf.Close()) })
		var err error
		s.scq[i], err = x.c[i].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8191})
		require.NoError(t, err)
		// HCA 1 receives into 128-byte CQEs (scatter-to-CQE of up to 64
		// bytes), HCA 0 into 64-byte ones.
		s.rcq[i], err = x.c[i].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8191, CQESize: uint32(64 << i)})
		require.NoError(t, err)
		for _, cq := range []*ctx.CompletionQueue{s.scq[i], s.rcq[i]} {
			p, err := transport.NewPoller(cq)
			require.NoError(t, err)
			s.polls = append(s.polls, p)
		}
	}
	s.lanes = []*lane{
		s.newLane("rc0", laneRC, 0), s.newLane("rc1", laneRC, 1),
		s.newLane("dc", laneDC, 0), s.newLane("ud", laneUD, 1),
	}
	return s
}

// poller returns the poller of the send (recv false) or receive CQ of HCA i.
func (s *soak) poller(i int, recv bool) *transport.Poller {
	if recv {
		return s.polls[2*i+1]
	}
	return s.polls[2*i]
}

func (s *soak) newLane(name string, kind laneKind, side int) *lane {
	t := s.t
	l := &lane{s: s, name: name, kind: kind, side: side}
	req, resp := s.ar[side], s.ar[1-side]
	seed := uint64(len(s.lanes)+1) << 32
	l.src = req.region(t, name+" source", srcSize, allAccess, seed+1)
	l.stage = req.region(t, name+" staging", stageSlot*stageSlots, allAccess, seed+2)
	l.sink = req.region(t, name+" sink", sinkSize, allAccess, seed+3)
	l.slotSize, l.slots = recvSlot, 2*recvDepth
	switch kind {
	case laneDC:
		l.slots = 2 * srqDepth
		l.target[1] = resp.region(t, name+" target 1", targetSize, allAccess, seed+5)
	case laneUD:
		l.slotSize, l.slots = udRecvSlot, 2*udRecvDepth
	}
	l.target[0] = resp.region(t, name+" target", targetSize, allAccess, seed+4)
	l.recv = resp.region(t, name+" receive buffers", l.slotSize*l.slots, allAccess, seed+6)
	l.build()
	return l
}

// build creates the lane's queue pairs and registers them with the
// pollers and the model.
func (l *lane) build() {
	s, t := l.s, l.s.t
	x := s.x
	rs, ws := l.side, 1-l.side
	l.sq = &sqModel{s: s, name: l.name + " requester"}
	switch l.kind {
	case laneRC:
		cfg := rc.Config{SendDepth: sendDepth, RecvDepth: recvDepth, MaxInline: maxInline, MaxSendSGE: 2,
			MinRNRTimer: 1, RNRRetry: 2, Timeout: 1, RetryCount: 1}
		var err error
		cfg.RecvCQ = s.rcq[rs]
		l.a, err = rc.New(x.pd[rs], s.scq[rs], cfg)
		require.NoError(t, err)
		// Both responders let the HCA put small payloads in the CQE; the
		// poller copies them to the receive buffer.
		bcfg := cfg
		bcfg.ScatterToCQE = true
		bcfg.RecvCQ = s.rcq[ws]
		l.b, err = rc.New(x.pd[ws], s.scq[ws], bcfg)
		require.NoError(t, err)
		require.NoError(t, l.a.Connect(l.b.Endpoint()))
		require.NoError(t, l.b.Connect(l.a.Endpoint()))
		l.rq = &rqModel{s: s, name: l.name + " responder", fifo: true, region: l.recv}
		l.own(&l.a.Queue, rs, l.sq)
		l.own(&l.b.Queue, ws, l.rq)
	case laneDC:
		if l.srq == nil {
			var err error
			l.srq, err = transport.NewSharedReceiveQueue(x.pd[ws], ctx.SRQConfig{Depth: srqDepth})
			require.NoError(t, err)
			l.rq = &rqModel{s: s, name: l.name + " SRQ", region: l.recv}
			for i := range l.dct {
				l.dct[i], err = dc.NewDCT(x.pd[ws], s.rcq[ws], dc.DCTConfig{SRQ: l.srq, Key: 0xdc00 + uint64(i), MinRNRTimer: 1})
				require.NoError(t, err)
				l.own(&l.dct[i].Queue, ws, l.rq)
			}
		}
		var err error
		l.dci, err = dc.NewDCI(x.pd[rs], s.scq[rs], dc.DCIConfig{SendDepth: sendDepth, MaxInline: maxInline, MaxSendSGE: 2,
			RNRRetry: 2, Timeout: 1, RetryCount: 1})
		require.NoError(t, err)
		for i := range l.dct {
			ep := l.dct[i].Endpoint()
			l.remote[i], err = l.dci.NewRemote(ep)
			require.NoError(t, err)
			ep.DCAccessKey ^= 0x5a
			l.badKey[i], err = l.dci.NewRemote(ep)
			require.NoError(t, err)
		}
		l.own(&l.dci.Queue, rs, l.sq)
	case laneUD:
		var err error
		l.ua, err = ud.New(x.pd[rs], s.scq[rs], ud.Config{SendDepth: sendDepth, MaxInline: maxInline, MaxSendSGE: 2, QKey: 0x11, RecvCQ: s.rcq[rs]})
		require.NoError(t, err)
		l.ub, err = ud.New(x.pd[ws], s.scq[ws], ud.Config{SendDepth: 1, RecvDepth: udRecvDepth, QKey: 0x22, RecvCQ: s.rcq[ws]})
		require.NoError(t, err)
		ep := l.ub.Endpoint()
		l.uremote, err = l.ua.NewRemote(ep)
		require.NoError(t, err)
		ep.QKey ^= 0x1000
		l.badQKey, err = l.ua.NewRemote(ep)
		require.NoError(t, err)
		l.rq = &rqModel{s: s, name: l.name + " receiver", fifo: true, region: l.recv, skip: ud.GRHSize}
		l.own(&l.ua.Queue, rs, l.sq)
		l.own(&l.ub.Queue, ws, l.rq)
		require.NoError(t, s.f.InjectUDFaults(sim.UDFaults{Drop: 0.03, Duplicate: 0.03, Reorder: 0.05, QPN: l.ub.QPN()}))
	}
	if l.kind != laneDC {
		l.avail = 0 // the SRQ of a DC lane outlives its DCI
	}
}

// own adds q to the pollers of HCA side it completes on (its send and
// receive CQs; a DCI has only the first, a DCT the second) and to the
// model.
func (l *lane) own(q *transport.Queue, side int, m any) {
	for _, recv := range []bool{false, true} {
		if l.s.completesOn(q, side, recv) {
			require.NoError(l.s.t, l.s.poller(side, recv).Add(q))
		}
	}
	l.s.owner[q] = m
}

// disown removes q from the pollers and the model.
func (l *lane) disown(q *transport.Queue, side int) {
	for _, recv := range []bool{false, true} {
		if l.s.completesOn(q, side, recv) {
			require.NoError(l.s.t, l.s.poller(side, recv).Remove(q))
		}
	}
	delete(l.s.owner, q)
}

// completesOn reports whether q completes on the send (recv false) or
// receive CQ of HCA side.
func (s *soak) completesOn(q *transport.Queue, side int, recv bool) bool {
	cq := s.scq[side]
	if recv {
		cq = s.rcq[side]
	}
	cfg := q.Handle().Config()
	return cfg.SendCQ == cq || cfg.RecvCQ == cq
}

// pollAll polls every CQ until all are empty and checks each completion
// with the model.
func (s *soak) pollAll() {
	for {
		n := 0
		for _, p := range s.polls {
			n += p.Poll(64, func(c *transport.Completion) {
				switch m := s.owner[c.Queue].(type) {
				case *sqModel:
					if !c.IsSend() {
						m.fail("receive completion %v on a requester", c.Opcode)
					}
					m.complete(c)
				case *rqModel:
					if c.IsSend() {
						m.fail("send completion %v (wrid %d) on a responder", c.Opcode, c.WRID)
					}
					m.complete(c)
				default:
					s.t.Fatalf("completion %v with status %v for QPN %#x, which no lane owns: %v", c.Opcode, c.Match, c.QPN, c.Err())
				}
			})
		}
		if n == 0 {
			break
		}
	}
	for _, p := range s.polls {
		require.NoError(s.t, p.Err())
	}
}

// runBatch posts a random batch on some lanes, injects faults, runs the
// model until it is idle, polls, checks, and rebuilds the lanes that broke.
func (s *soak) runBatch() {
	t, r := s.t, s.rng
	s.n.batches++
	s.batch = s.batch[:0]
	before := s.f.Stats()
	any := false
	for _, l := range s.lanes {
		l.active = r.Intn(10) < 7
		if !l.active {
			continue
		}
		any = true
		l.postBatch(1 + r.Intn(maxBatch))
	}
	if !any {
		l := s.lanes[r.Intn(len(s.lanes))]
		l.active = true
		l.postBatch(1 + r.Intn(maxBatch))
	}
	s.inject()
	// Late mode: let the SENDs meet an empty receive queue (run until every
	// queue pair is done or waits: the virtual clock does not move in Step),
	// then post the receives they wait for.
	late, naks := 0, s.f.Stats().RNRNaks
	for _, l := range s.lanes {
		if l.active && l.late > 0 && !l.sq.mayFlush && !l.rq.mayFlush {
			late++
		}
	}
	if late > 0 {
		for i := 0; ; i++ {
			progressed, err := s.f.Step()
			require.NoError(t, err)
			if !progressed {
				break
			}
			require.Less(t, i, 100*maxBatch, "the model does not settle")
		}
		require.GreaterOrEqual(t, int(s.f.Stats().RNRNaks-naks), late, "SENDs with no receive posted got no RNR NAK")
	}
	for _, l := range s.lanes {
		if !l.active || l.late == 0 {
			continue
		}
		for ; l.late > 0; l.late-- {
			l.postRecv()
		}
		l.ringRecv()
		s.n.lateRecvs++
	}
	require.NoError(t, s.f.RunUntilIdle())
	s.pollAll()
	s.check(before)
	for _, l := range s.lanes {
		if l.sq.errored || l.rq.errored || l.sq.mayFlush || (l.rq.mayFlush && l.kind != laneDC) {
			l.rebuild()
		}
		l.noRecv, l.lateMode, l.sq.dead = false, false, false
	}
}

// inject applies the faults that act on a whole queue pair or CQ.
func (s *soak) inject() {
	t, r := s.t, s.rng
	pick := func() *lane {
		for {
			if l := s.lanes[r.Intn(len(s.lanes))]; l.active {
				return l
			}
		}
	}
	switch r.Intn(120) {
	case 0, 1: // the HCA moves a requester to error
		l := pick()
		require.NoError(t, s.f.FailQP(l.requester().QPN()))
		l.sq.mayFlush = true
		s.n.failQP++
	case 2: // the HCA moves a responder to error
		l := pick()
		switch l.kind {
		case laneRC:
			require.NoError(t, s.f.FailQP(l.b.QPN()))
			l.rq.mayFlush = true
			l.peerFailed()
			s.n.failQP++
			s.n.failResponder++
		case laneUD:
			require.NoError(t, s.f.FailQP(l.ub.QPN()))
			l.rq.mayFlush = true
			s.n.failQP++
			s.n.failResponder++
		}
	case 3, 4: // the program moves a requester to error
		l := pick()
		var err error
		switch l.kind {
		case laneRC:
			err = l.a.Fail()
		case laneDC:
			err = l.dci.Fail()
		default:
			err = l.ua.Fail()
		}
		require.NoError(t, err)
		l.sq.mayFlush = true
		s.n.failAPI++
		// The data plane refuses to post now.
		_, err = l.begin(1<<62, wqebuilder.Signaled, 0, false)
		require.ErrorIs(t, err, transport.ErrQPError)
	case 5, 6, 7: // completions of a CQ are delayed for a while
		cqs := []*ctx.CompletionQueue{s.scq[0], s.scq[1], s.rcq[0], s.rcq[1]}
		d := []time.Duration{0, 5 * time.Microsecond, 200 * time.Microsecond, 2 * time.Millisecond}[r.Intn(4)]
		require.NoError(t, s.f.DelayCompletions(cqs[r.Intn(4)].CQN(), d))
		s.n.delays++
	}
}

// peerFailed re-predicts the outstanding work requests of an RC requester
// whose responder the HCA moved to error: the first one that needs the peer
// fails with TRANSPORT_RETRY_EXC_ERR (unless an earlier local error comes
// first), and the rest flush.
func (l *lane) peerFailed() {
	for i := range l.sq.out {
		w := &l.sq.out[i]
		if w.local {
			return
		}
		if !w.nop {
			w.expect = prm.SyndromeTransportRetryExc
			for j := i + 1; j < len(l.sq.out); j++ {
				l.sq.out[j].expect = 0
			}
			return
		}
	}
}

// check runs after every batch: nothing outstanding on the send side,
// every message delivered exactly when its send succeeded, UD packets
// conserved, memory equal to the model's, canaries intact.
func (s *soak) check(before sim.Stats) {
	t := s.t
	for _, l := range s.lanes {
		if len(l.sq.out) != 0 {
			t.Fatalf("%s: %d send work requests without a completion after the batch (wrid %d first): lost", l.name, len(l.sq.out), l.sq.out[0].wrid)
		}
	}
	udSent, udDelivered := 0, 0
	for _, m := range s.batch {
		if m.ud {
			if m.sent {
				udSent++
			}
			udDelivered += m.delivered
			if !m.sent && m.delivered != 0 {
				t.Fatalf("UD message %d arrived, but its send failed", m.seq)
			}
		} else if m.sent != (m.delivered == 1) {
			t.Fatalf("message %d to %s: send succeeded %v, delivered %d times", m.seq, m.to.name, m.sent, m.delivered)
		}
		delete(s.bySeq, m.seq)
		delete(s.byImm, m.imm)
	}
	after := s.f.Stats()
	dropped := int(after.UDDropped - before.UDDropped)
	dup := int(after.UDDuplicated - before.UDDuplicated)
	if udDelivered+dropped != udSent+dup {
		t.Fatalf("UD: %d sent + %d duplicated by the fault injector != %d delivered + %d dropped", udSent, dup, udDelivered, dropped)
	}
	s.n.udSent += udSent
	s.n.udReceived += udDelivered
	for _, l := range s.lanes {
		if !l.active && !l.sq.mayFlush && !l.rq.mayFlush {
			continue
		}
		for _, r := range []*region{l.src, l.stage, l.sink, l.target[0], l.target[1], l.recv} {
			if r != nil {
				require.NoError(t, r.check())
			}
		}
	}
	for i := range s.ar {
		require.NoError(t, s.ar[i].checkCanaries(false))
	}
	require.Zero(t, after.Violations, "strict-mode violations: %v", s.f.Violations())
}

// requester returns the requester's Queue.
func (l *lane) requester() *transport.Queue {
	switch l.kind {
	case laneRC:
		return &l.a.Queue
	case laneDC:
		return &l.dci.Queue
	}
	return &l.ua.Queue
}

// rebuild fails what is left of the lane, checks that every outstanding
// work request flushes, closes its queue pairs and creates new ones.
func (l *lane) rebuild() {
	s, t := l.s, l.s.t
	s.n.rebuilds++
	l.drain()
	switch l.kind {
	case laneRC:
		l.disown(&l.a.Queue, l.side)
		l.disown(&l.b.Queue, 1-l.side)
		require.NoError(t, l.a.Close())
		require.NoError(t, l.b.Close())
		require.NoError(t, l.a.Close(), "second Close")
		require.Equal(t, transport.StateClosed, l.a.State())
	case laneDC:
		l.disown(&l.dci.Queue, l.side)
		for i := range l.remote {
			require.NoError(t, l.remote[i].Close())
			require.NoError(t, l.badKey[i].Close())
		}
		require.NoError(t, l.dci.Close())
		l.rq.mayFlush = false
	case laneUD:
		l.disown(&l.ua.Queue, l.side)
		l.disown(&l.ub.Queue, 1-l.side)
		require.NoError(t, l.uremote.Close())
		require.NoError(t, l.badQKey.Close())
		require.NoError(t, l.ua.Close())
		require.NoError(t, l.ub.Close())
	}
	l.build()
}

// drain moves the lane's queue pairs to error, runs the model and polls:
// every outstanding work request, send and receive, must then have
// completed, flushed at the latest.
func (l *lane) drain() {
	s, t := l.s, l.s.t
	require.NoError(t, l.requesterFail())
	l.sq.mayFlush = true
	switch l.kind {
	case laneRC:
		require.NoError(t, l.b.Fail())
		l.rq.mayFlush = true
	case laneUD:
		require.NoError(t, l.ub.Fail())
		l.rq.mayFlush = true
	}
	require.NoError(t, s.f.RunUntilIdle())
	s.pollAll()
	if len(l.sq.out) != 0 {
		t.Fatalf("%s: %d send work requests never completed, not even flushed: lost", l.name, len(l.sq.out))
	}
	require.Zero(t, l.requester().SendQueue().Outstanding(), "%s: WQEBBs still in flight after every completion", l.name)
	if l.kind != laneDC && len(l.rq.out) != 0 {
		t.Fatalf("%s: %d receives never completed, not even flushed: lost", l.name, len(l.rq.out))
	}
}

func (l *lane) requesterFail() error {
	switch l.kind {
	case laneRC:
		return l.a.Fail()
	case laneDC:
		return l.dci.Fail()
	}
	return l.ua.Fail()
}

// teardown drains every lane, checks the whole arenas and closes.
func (s *soak) teardown() {
	t := s.t
	for _, l := range s.lanes {
		l.drain()
	}
	for i := range s.ar {
		require.NoError(t, s.ar[i].checkCanaries(true))
	}
	for _, l := range s.lanes {
		for _, r := range []*region{l.src, l.stage, l.sink, l.target[0], l.target[1], l.recv} {
			if r != nil {
				require.NoError(t, r.check())
			}
		}
	}
}

// ---- posting ----

// begin starts a send WQE on the lane's requester (RC and DC), to DCT ti
// (with the wrong DC access key when badKey is set). On a UD lane it only
// reports whether Post refused.
func (l *lane) begin(wrid uint64, flags wqebuilder.Flags, ti int, badKey bool) (wqebuilder.OpStage, error) {
	switch l.kind {
	case laneRC:
		return l.a.Post(wrid, flags)
	case laneDC:
		if badKey {
			return l.dci.Post(wrid, flags, l.badKey[ti])
		}
		return l.dci.Post(wrid, flags, l.remote[ti])
	}
	_, err := l.ua.Post(wrid, flags, l.uremote)
	return wqebuilder.OpStage{}, err
}

// postRecv posts one receive to the lane's responder (not rung).
func (l *lane) postRecv() {
	t := l.s.t
	l.rwid++
	slot := l.nextSlot % l.slots * l.slotSize
	l.nextSlot++
	for _, b := range [][]byte{l.recv.mem[slot : slot+l.slotSize], l.recv.shadow[slot : slot+l.slotSize]} {
		for i := range b {
			b[i] = slotPattern
		}
	}
	var st transport.RecvStage
	switch l.kind {
	case laneRC:
		st = l.b.BeginRecv(l.rwid)
	case laneDC:
		st = l.srq.BeginRecv(l.rwid)
	default:
		st = l.ub.BeginRecv(l.rwid)
	}
	require.NoError(t, st.SGE(l.recv.addr(slot), uint32(l.slotSize), l.recv.lkey()).Finish(), "%s: post receive", l.name)
	l.rq.out = append(l.rq.out, recvWR{wrid: l.rwid, slot: slot, size: l.slotSize})
	l.s.n.recvWRs++
}

func (l *lane) ringRecv() {
	switch l.kind {
	case laneRC:
		l.b.RingRecvDoorbell()
	case laneDC:
		l.srq.RingRecvDoorbell()
	default:
		l.ub.RingRecvDoorbell()
	}
}

// recvCapacity is how many receives may be outstanding on the lane's
// responder.
func (l *lane) recvCapacity() int {
	switch l.kind {
	case laneDC:
		return srqDepth
	case laneUD:
		return udRecvDepth
	}
	return recvDepth
}

// postBatch posts k send work requests (the last one signaled) and the
// receives they need, and rings the doorbells.
func (l *lane) postBatch(k int) {
	s, r := l.s, l.s.rng
	// Every receive still outstanding after the last batch is there for
	// this one (one the model planned for a SEND that was then flushed
	// included).
	l.avail = len(l.rq.out)
	switch {
	case l.kind == laneUD:
		// Datagrams need no receive to be sent; keep the receiver stocked
		// (duplicates need room too).
		for len(l.rq.out) < l.recvCapacity()-4 {
			l.postRecv()
		}
		l.ringRecv()
	case r.Intn(60) == 0:
		l.noRecv = true // SENDs beyond the receives posted meet RNR
		s.n.rnrBatches++
	case r.Intn(60) == 0:
		l.lateMode = true // the receives come after the RNR NAK
	default:
		if r.Intn(4) == 0 && len(l.rq.out) < l.recvCapacity()-maxBatch {
			for i := r.Intn(3); i > 0; i-- { // spare receives, flushed at the end
				l.postRecv()
				l.avail++
			}
		}
	}
	bf := r.Intn(2) == 0 // one BlueFlame post per WQE, or one doorbell for the batch
	for i := 0; i < k; i++ {
		last := i == k-1
		if l.kind == laneUD {
			l.postUD(last, bf)
		} else {
			l.postRDMA(last, bf)
		}
	}
	if !bf {
		l.requester().RingDoorbell()
	}
	l.ringRecv()
	switch l.kind {
	case laneRC:
		s.n.rcWRs += k
	case laneDC:
		s.n.dcWRs += k
	default:
		s.n.udWRs += k
	}
	s.n.sendWRs += k
}

// needRecv plans one receive for a receive-consuming work request and
// returns the error the model predicts for it (RNR retries exhausted when
// no receive will be there).
func (l *lane) needRecv() prm.Syndrome {
	if l.sq.dead {
		return 0
	}
	if l.avail > 0 {
		l.avail--
		return 0
	}
	switch {
	case l.noRecv:
		return prm.SyndromeRNRRetryExc
	case l.lateMode:
		l.late++
		return 0
	}
	l.postRecv()
	return 0
}

// Operation kinds of postRDMA, by the percentile that picks them.
const (
	opWrite  = 40 // RDMA_WRITE below 30, RDMA_WRITE_IMM from 30
	opRead   = 55
	opAtomic = 70 // ATOMIC_FA below 62, ATOMIC_CS from 62
	opSend   = 98 // SEND below 88, SEND_IMM from 88; NOP above
)

// fault picks, now and then, a fault that applies to an operation of
// kind op.
func (l *lane) fault(op int) string {
	if l.sq.dead || op >= opSend || l.s.rng.Intn(250) != 0 {
		return ""
	}
	var all []string
	switch {
	case op < opRead:
		all = []string{"wrong rkey", "out of bounds", "SGE outside its region"}
	case op < opAtomic:
		all = []string{"wrong rkey", "out of bounds", "SGE outside its region", "misaligned atomic"}
	default:
		all = []string{"SGE outside its region", "receive too small"}
	}
	if l.kind == laneDC {
		all = append(all, "wrong DC key")
	}
	return all[l.s.rng.Intn(len(all))]
}

// size picks a payload size.
func (s *soak) size(max int) int {
	switch s.rng.Intn(20) {
	case 0:
		return 0
	case 1, 2:
		return min(513+s.rng.Intn(4096-512), max)
	}
	if s.rng.Intn(2) == 0 {
		return min(1+s.rng.Intn(64), max)
	}
	return min(1+s.rng.Intn(512), max)
}

// newMessage stages message seq of n bytes and registers what it must do.
func (l *lane) newMessage(n int, op prm.CQEOpcode) (*message, int) {
	s := l.s
	s.seq++
	m := &message{seq: s.seq, n: n, op: op, imm: uint32(s.seq), to: l.rq, ud: l.kind == laneUD}
	slot := int(s.seq%stageSlots) * stageSlot
	if op != prm.CQERespWrImm {
		genMessage(l.stage.mem[slot:slot+n], s.seq)
		copy(l.stage.shadow[slot:slot+n], l.stage.mem[slot:slot+n])
	}
	s.bySeq[m.seq] = m
	s.byImm[m.imm] = m
	s.batch = append(s.batch, m)
	return m, slot
}

// postRDMA posts one random RC or DC work request, with a fault now and
// then, and records what the model expects of it.
func (l *lane) postRDMA(last, bf bool) {
	s, r, t := l.s, l.s.rng, l.s.t
	l.wrid++
	w := sendWR{wrid: l.wrid, signaled: last || r.Intn(3) == 0}
	flags := wqebuilder.Flags(0)
	if w.signaled {
		flags = wqebuilder.Signaled
	}
	ti := 0
	if l.kind == laneDC {
		ti = r.Intn(2)
	}
	tg := l.target[ti]
	op := r.Intn(100)
	fault := l.fault(op)
	st, err := l.begin(w.wrid, flags, ti, fault == "wrong DC key")
	require.NoError(t, err, "%s: post", l.name)
	var fin func() error
	finish := func(a, b func() error) {
		if bf {
			fin = b
		} else {
			fin = a
		}
	}
	expect := func(sy prm.Syndrome, local bool) {
		w.expect, w.local = sy, local
		l.sq.dead = true
		s.n.faults[fault]++
	}
	switch {
	case op < opWrite: // RDMA_WRITE, RDMA_WRITE_IMM
		n := s.size(4096)
		imm := op >= 30
		soff, roff := r.Intn(srcSize-n+1), r.Intn(targetSize-n+1)
		raddr, rkey := tg.addr(roff), tg.rkey()
		laddr := l.src.addr(soff)
		switch {
		case fault == "wrong rkey" && n > 0:
			rkey ^= 0x100
			expect(prm.SyndromeRemoteAccess, false)
		case fault == "out of bounds" && n > 1:
			raddr = tg.addr(targetSize - n/2)
			expect(prm.SyndromeRemoteAccess, false)
		case fault == "SGE outside its region" && n > 1:
			laddr = l.src.addr(srcSize - n/2)
			expect(prm.SyndromeLocalProt, true)
		case fault == "wrong DC key":
			expect(prm.SyndromeRemoteAccess, false)
		}
		if w.expect == prm.SyndromeRemoteAccess && l.kind == laneRC {
			l.rq.mayFlush = true // the responder fails too
		}
		var ds wqebuilder.DataStage
		if imm {
			var m *message
			m, _ = l.newMessage(n, prm.CQERespWrImm)
			w.msg = m
			if w.expect == 0 {
				if sy := l.needRecv(); sy != 0 {
					w.expect = sy
					l.sq.dead = true
				}
			}
			ds = st.RdmaWriteImm(raddr, rkey, m.imm)
		} else {
			ds = st.RdmaWrite(raddr, rkey)
		}
		if n > 0 && n <= maxInline && w.expect != prm.SyndromeLocalProt && r.Intn(2) == 0 {
			is := ds.Inline(l.src.mem[soff : soff+n])
			finish(is.Finish, is.FinishBlueFlame)
		} else {
			ds = ds.SGE(laddr, uint32(n), l.src.lkey())
			finish(ds.Finish, ds.FinishBlueFlame)
		}
		w.apply = func() { copy(tg.shadow[roff:roff+n], l.src.shadow[soff:soff+n]) }
	case op < opRead: // RDMA_READ
		n := s.size(4096)
		n = min(n, sinkSize)
		loff, roff := r.Intn(sinkSize-n+1), r.Intn(targetSize-n+1)
		raddr, rkey := tg.addr(roff), tg.rkey()
		laddr := l.sink.addr(loff)
		switch {
		case fault == "wrong rkey" && n > 0:
			rkey ^= 0x100
			expect(prm.SyndromeRemoteAccess, false)
		case fault == "out of bounds" && n > 1:
			raddr = tg.addr(targetSize - n/2)
			expect(prm.SyndromeRemoteAccess, false)
		case fault == "SGE outside its region" && n > 1:
			laddr = l.sink.addr(sinkSize - n/2)
			expect(prm.SyndromeLocalProt, true)
		case fault == "wrong DC key":
			expect(prm.SyndromeRemoteAccess, false)
		}
		if w.expect == prm.SyndromeRemoteAccess && l.kind == laneRC {
			l.rq.mayFlush = true
		}
		sc := st.RdmaRead(raddr, rkey).SGE(laddr, uint32(n), l.sink.lkey())
		finish(sc.Finish, sc.FinishBlueFlame)
		w.apply = func() { copy(l.sink.shadow[loff:loff+n], tg.shadow[roff:roff+n]) }
	case op < opAtomic: // ATOMIC_FA, ATOMIC_CS
		loff, roff := r.Intn(sinkSize/8)*8, r.Intn(targetSize/8)*8
		raddr, rkey := tg.addr(roff), tg.rkey()
		laddr := l.sink.addr(loff)
		switch fault {
		case "wrong rkey":
			rkey ^= 0x100
			expect(prm.SyndromeRemoteAccess, false)
		case "out of bounds":
			raddr = tg.addr(targetSize - 4)
			expect(prm.SyndromeRemoteAccess, false)
		case "SGE outside its region":
			laddr = l.sink.addr(sinkSize - 4)
			expect(prm.SyndromeLocalProt, true)
		case "misaligned atomic":
			raddr += 4
			expect(prm.SyndromeRemoteInvalReq, false)
		case "wrong DC key":
			expect(prm.SyndromeRemoteAccess, false)
		}
		if (w.expect == prm.SyndromeRemoteAccess || w.expect == prm.SyndromeRemoteInvalReq) && l.kind == laneRC {
			l.rq.mayFlush = true
		}
		add, swap := r.Uint64(), r.Uint64()
		// The word is a uint64 in host byte order, as a ConnectX treats
		// 8-byte atomics in the mode mlx5_core sets; so is the old value
		// it returns.
		cmp := binary.NativeEndian.Uint64(tg.shadow[roff:])
		if r.Intn(2) == 0 {
			cmp = r.Uint64()
		}
		var fs wqebuilder.FinishStage
		isFA := op < 62
		if isFA {
			fs = st.AtomicFA(raddr, rkey, add).Result(laddr, l.sink.lkey())
		} else {
			fs = st.AtomicCS(raddr, rkey, cmp, swap).Result(laddr, l.sink.lkey())
		}
		finish(fs.Finish, fs.FinishBlueFlame)
		w.apply = func() {
			old := binary.NativeEndian.Uint64(tg.shadow[roff:])
			switch {
			case isFA:
				binary.NativeEndian.PutUint64(tg.shadow[roff:], old+add)
			case old == cmp:
				binary.NativeEndian.PutUint64(tg.shadow[roff:], swap)
			}
			binary.NativeEndian.PutUint64(l.sink.shadow[loff:], old)
		}
	case op < opSend: // SEND, SEND_IMM
		n := 8 + r.Intn(maxSend-7)
		if r.Intn(4) == 0 {
			n = 8 + r.Intn(57) // small enough to ride in the CQE
		}
		if fault == "receive too small" {
			n = maxSend + 1 + r.Intn(stageSlot-maxSend)
		}
		respOp := prm.CQERespSend
		if op >= 88 {
			respOp = prm.CQERespSendImm
		}
		m, slot := l.newMessage(n, respOp)
		w.msg = m
		laddr := l.stage.addr(slot)
		switch fault {
		case "SGE outside its region":
			laddr = l.stage.addr(len(l.stage.mem) - n/2)
			expect(prm.SyndromeLocalProt, true)
		case "wrong DC key":
			expect(prm.SyndromeRemoteAccess, false)
		case "receive too small":
			if sy := l.needRecv(); sy != 0 {
				w.expect = sy
				l.sq.dead = true
				break
			}
			expect(prm.SyndromeRemoteInvalReq, false)
			l.rq.lengthErrors++
			if l.kind == laneRC {
				l.rq.mayFlush = true
			}
		}
		if w.expect == 0 {
			if sy := l.needRecv(); sy != 0 {
				w.expect = sy
				l.sq.dead = true
			}
		}
		var ds wqebuilder.DataStage
		if respOp == prm.CQERespSendImm {
			ds = st.SendImm(m.imm)
		} else {
			ds = st.Send()
		}
		if n <= maxInline && w.expect != prm.SyndromeLocalProt && r.Intn(2) == 0 {
			is := ds.Inline(l.stage.mem[slot : slot+n])
			finish(is.Finish, is.FinishBlueFlame)
		} else if n > 16 && w.expect != prm.SyndromeLocalProt && r.Intn(3) == 0 {
			// Two SGEs.
			h := n / 2
			ds = ds.SGE(laddr, uint32(h), l.stage.lkey()).SGE(laddr+uint64(h), uint32(n-h), l.stage.lkey())
			finish(ds.Finish, ds.FinishBlueFlame)
		} else {
			ds = ds.SGE(laddr, uint32(n), l.stage.lkey())
			finish(ds.Finish, ds.FinishBlueFlame)
		}
	default: // NOP: it never leaves the HCA, whatever the fault
		w.nop = true
		fs := st.Nop()
		finish(fs.Finish, fs.FinishBlueFlame)
	}
	require.NoError(t, fin(), "%s: finish wrid %d", l.name, w.wrid)
	l.sq.out = append(l.sq.out, w)
}

// postUD posts one UD SEND (inline or from the staging region), with a
// fault now and then.
func (l *lane) postUD(last, bf bool) {
	s, r, t := l.s, l.s.rng, l.s.t
	l.wrid++
	w := sendWR{wrid: l.wrid, signaled: last || r.Intn(3) == 0}
	flags := wqebuilder.Flags(0)
	if w.signaled {
		flags = wqebuilder.Signaled
	}
	remote := l.uremote
	fault := ""
	if !l.sq.dead && r.Intn(300) == 0 {
		fault = []string{"SGE outside its region", "wrong qkey"}[r.Intn(2)]
		s.n.faults[fault]++
	}
	if fault == "wrong qkey" {
		// A datagram with the wrong qkey is dropped silently by the
		// receiver; the sender completes successfully.
		remote = l.badQKey
	}
	dg, err := l.ua.Post(w.wrid, flags, remote)
	require.NoError(t, err, "%s: post", l.name)
	n := 8 + r.Intn(maxUDSend-7)
	op := prm.CQERespSend
	if r.Intn(4) == 0 {
		op = prm.CQERespSendImm
	}
	m, slot := l.newMessage(n, op)
	w.msg = m
	laddr := l.stage.addr(slot)
	if fault == "SGE outside its region" {
		laddr = l.stage.addr(len(l.stage.mem) - n/2)
		w.expect, w.local = prm.SyndromeLocalProt, true
		l.sq.dead = true
	}
	var ds wqebuilder.DataStage
	if op == prm.CQERespSendImm {
		ds = dg.SendImm(m.imm)
	} else {
		ds = dg.Send()
	}
	var fin func() error
	if n <= maxInline && fault != "SGE outside its region" && r.Intn(2) == 0 {
		is := ds.Inline(l.stage.mem[slot : slot+n])
		fin = is.Finish
		if bf {
			fin = is.FinishBlueFlame
		}
	} else {
		ds = ds.SGE(laddr, uint32(n), l.stage.lkey())
		fin = ds.Finish
		if bf {
			fin = ds.FinishBlueFlame
		}
	}
	require.NoError(t, fin(), "%s: finish wrid %d", l.name, w.wrid)
	l.sq.out = append(l.sq.out, w)
}
