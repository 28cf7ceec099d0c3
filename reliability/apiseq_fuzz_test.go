package reliability

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit"
	"github.com/mlx5kit/mlx5kit/bufpool"
	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// FuzzAPISequence reads its input as a program of public calls across the
// layers that FuzzLifecycle leaves out, and runs it on the software HCA:
// mlx5kit.Open and sim's Open; protection domains, memory regions and
// completion queues with their Pollers and completion.Notifiers; RC and UD
// queue pairs and an SRQ; and channels (RC Channel and MultiChannel, DC
// MultiChannel) prepared, handshaken directly or over an in-process
// connection, used through their blocking calls, raw posts, Pending and
// Scope, failed, reestablished and closed. The calls come in any order:
// parents closed before children, twice, from two goroutines at once, and
// while the owner waits in a blocking call or a Notifier; a Poller's
// owner adds, removes, resets, fails and closes queue pairs and tries to
// close the Poller from inside Poll.
//
// The oracle: no panic, no data race (run it with -race), no call that
// hangs (every blocking call has a deadline, and a watchdog fails an op
// that takes longer than 20 s), every error wraps a sentinel of the public
// packages, and, once everything is closed, every goroutine the program
// started has ended.
//
// The first byte picks the world: bit 0 an engine-mode Fabric (else
// manual: a goroutine runs the model during a blocking call), bit 1
// Contexts that may come from mlx5kit.Open (the default software HCA),
// bit 2 the Fabric closed before the objects at the end.
// Each op then takes asOpSize bytes: an opcode and its arguments.
func FuzzAPISequence(f *testing.F) {
	for _, seed := range apiSeqSeeds() {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		runAPISeq(t, data)
	})
}

// TestAPISequenceRandom runs FuzzAPISequence's body on pseudo-random
// programs for a bounded time (2 s with -short, 10 s without);
// MLX5KIT_APISEQ_SEED picks the seed (default 1). A failing program is
// logged in hex: MLX5KIT_APISEQ_PROGRAM set to it runs that program alone
// (with MLX5KIT_APISEQ_TRACE=1, each call and its error are logged).
func TestAPISequenceRandom(t *testing.T) {
	if p := os.Getenv("MLX5KIT_APISEQ_PROGRAM"); p != "" {
		data, err := hex.DecodeString(strings.TrimSpace(p))
		if err != nil {
			t.Fatal(err)
		}
		runAPISeq(t, data)
		return
	}
	budget := 10 * time.Second
	if testing.Short() {
		budget = 2 * time.Second
	}
	seed := uint64(1)
	if s := os.Getenv("MLX5KIT_APISEQ_SEED"); s != "" {
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		seed = n
	}
	rng := rand.New(rand.NewPCG(seed, 0x61706973))
	deadline := time.Now().Add(budget)
	i := 0
	defer func() { t.Logf("seed %d: %d programs", seed, i) }()
	for ; i == 0 || time.Now().Before(deadline); i++ {
		data := make([]byte, 1+asMaxOps*asOpSize)
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		// Ops weighted toward work on what is alive: the channels, the
		// queue pairs and their polls, more than closes.
		for j := 1; j < len(data); j += asOpSize {
			data[j] = asWeighted[rng.IntN(len(asWeighted))]
		}
		// Most programs start by building a connected world.
		if rng.IntN(4) != 0 {
			data = append(apiSeqProgram(data[0], apiSeqSetup()...), data[1:1+(asMaxOps-len(apiSeqSetup()))*asOpSize]...)
		}
		ok := t.Run(fmt.Sprint(i), func(t *testing.T) { runAPISeq(t, data) })
		if !ok {
			t.Logf("seed %d program %d: %s", seed, i, hex.EncodeToString(data))
			return
		}
	}
}

const (
	asOpSize  = 5
	asMaxOps  = 48
	asCtxs    = 2
	asPDs     = 3
	asMRs     = 3
	asCQs     = 3
	asQPCount = 4
	asSides   = 2
	// Each MR covers asMRSize bytes of its own slot of one guarded arena.
	asMRSize  = 1024
	asArena   = 4 * 4096
	asCallMax = 30 * time.Millisecond // the deadline of a blocking call
)

// The opcodes.
const (
	asOpenContext = iota
	asCloseContext
	asAllocPD
	asClosePD
	asRegisterMR
	asCloseMR
	asCreateCQ
	asCloseCQ
	asNotifier
	asNotifierWait
	asCloseNotifier
	asNewQP
	asConnectQP
	asPostSend
	asPostRecv
	asPoll
	asResetQP
	asCloseQP
	asSRQ
	asChannelNew
	asChannelHandshake
	asChannelOp
	asChannelClose
	asChannelReestablish
	asChannelConn
	asCloseTwice
	asCloseUnderWait
	asSettle
	asEvents
	asMesh
	asPool
	asNumOps
)

var asOpNames = [asNumOps]string{
	"OpenContext", "CloseContext", "AllocPD", "ClosePD", "RegisterMR", "CloseMR", "CreateCQ",
	"CloseCQ", "Notifier", "NotifierWait", "CloseNotifier", "NewQP", "ConnectQP", "PostSend",
	"PostRecv", "Poll", "ResetQP", "CloseQP", "SRQ", "ChannelNew", "ChannelHandshake", "ChannelOp",
	"ChannelClose", "ChannelReestablish", "ChannelConn", "CloseTwice", "CloseUnderWait", "Settle", "Events", "Mesh", "Pool",
}

type asCQ struct {
	cq       *ctx.CompletionQueue
	p        *transport.Poller
	notifier *completion.Notifier
	ctx      int
}

type asQP struct {
	rc     *rc.QP
	ud     *ud.QP
	remote *ud.Remote
	cq     int
}

func (q *asQP) queue() *transport.Queue {
	if q.rc != nil {
		return &q.rc.Queue
	}
	return &q.ud.Queue
}

func (q *asQP) pair() transport.QueuePair {
	if q.rc != nil {
		return q.rc
	}
	return q.ud
}

// asSide is one end of a channel: prepared (one of p, pm), then connected
// (m; ch too when it is a Channel).
type asSide struct {
	p  *channel.Prepared
	pm *channel.PreparedMulti
	ch *channel.Channel
	m  *channel.MultiChannel
	pd int
	// pending are raw posts not known to be done.
	pending []channel.Pending
}

type asWorld struct {
	t       *testing.T
	f       *sim.Fabric
	manual  bool
	useOpen bool
	// fabricFirst closes the Fabric before the objects at the end.
	fabricFirst bool
	ctxs        [asCtxs]*ctx.Context
	pds         [asPDs]*ctx.ProtectionDomain
	pdCtx       [asPDs]int
	bufs        [2]*ctx.Buffer
	mrs         [asMRs]*ctx.MemoryRegion
	cqs         [asCQs]*asCQ
	qps         [asQPCount]*asQP
	srq         *transport.SharedReceiveQueue
	sides       [asSides]*asSide
	wrid        uint64
	step        int
	op          string
	closers     []func() error  // every object made, closed at the end
	pools       []*bufpool.Pool // closed after the Fabric: receives may be in flight
	subs        []*ctx.EventSubscription
	bg          sync.WaitGroup // goroutines the program started
	bgErrs      chan string
	trace       bool
	baseline    int
}

// asDefaultOnce opens and closes a Context of the default software HCA
// once, so that what it starts for good (its engine) is running before
// any program counts goroutines.
var asDefaultOnce sync.Once

func runAPISeq(t *testing.T, data []byte) {
	if len(data) == 0 {
		return
	}
	asDefaultOnce.Do(func() {
		c, err := mlx5kit.Open(mlx5kit.Options{Provider: ctx.ProviderSoftware})
		if err == nil {
			_ = c.Close()
		}
	})
	mode := data[0]
	data = data[1:]
	w := &asWorld{t: t, manual: mode&1 == 0, useOpen: mode&2 != 0, fabricFirst: mode&4 != 0, bgErrs: make(chan string, 64),
		trace: os.Getenv("MLX5KIT_APISEQ_TRACE") != ""}
	w.baseline = runtime.NumGoroutine()
	opts := sim.Options{MaxRounds: 2000, IdleSleep: 50 * time.Microsecond}
	if !w.manual {
		opts.Mode = sim.Engine
	}
	w.f = sim.New(opts)
	for i := range w.bufs {
		buf, err := ctx.AllocBuffer(asArena, ctx.BufferOptions{Guard: true})
		if err != nil {
			t.Fatal(err)
		}
		w.bufs[i] = buf
	}
	for n := 0; n < asMaxOps && len(data) > 0; n++ {
		var args [asOpSize]byte
		copy(args[:], data)
		data = data[min(len(data), asOpSize):]
		op := int(args[0]) % asNumOps
		w.step, w.op = n, asOpNames[op]
		if w.trace {
			t.Logf("op %d: %s %v", n, w.op, args[1:])
		}
		start := time.Now()
		w.run(op, args[1:])
		if w.trace {
			t.Logf("  took %v", time.Since(start))
		}
		w.drainBackground()
	}
	w.finish()
}

func (w *asWorld) failf(format string, args ...any) {
	w.t.Helper()
	w.t.Fatalf("op %d (%s): %s", w.step, w.op, fmt.Sprintf(format, args...))
}

// check fails unless err is nil or wraps a sentinel of the public
// packages (or is a completion error, which carries its status).
func (w *asWorld) check(what string, err error) {
	w.t.Helper()
	if w.trace {
		w.t.Logf("  %s: %v", what, err)
	}
	if bad := unwrapped(err); bad != nil {
		w.failf("%s: %v (%T) wraps no sentinel", what, bad, bad)
	}
}

// unwrapped returns an error of err's tree that wraps no sentinel (or
// completion error), nil if there is none: each error a joined error
// holds must wrap one.
func unwrapped(err error) error {
	if err == nil {
		return nil
	}
	if j, ok := err.(interface{ Unwrap() []error }); ok {
		for _, e := range j.Unwrap() {
			if bad := unwrapped(e); bad != nil {
				return bad
			}
		}
		return nil
	}
	var ce *monocq.CompletionError
	if wrapsSentinel(err) || errors.As(err, &ce) {
		return nil
	}
	return err
}

// checkBG is check for a goroutine the program started: it reports
// instead of failing.
func (w *asWorld) checkBG(what string, err error) {
	if bad := unwrapped(err); bad != nil {
		w.bgErrs <- fmt.Sprintf("%s: %v (%T) wraps no sentinel", what, bad, bad)
	}
}

func (w *asWorld) drainBackground() {
	w.t.Helper()
	for {
		select {
		case msg := <-w.bgErrs:
			w.failf("background: %s", msg)
		default:
			return
		}
	}
}

// watchdog fails the process with every goroutine's stack when an op
// takes longer than 20 s: a hang.
func (w *asWorld) watchdog() func() {
	step, op := w.step, w.op
	tm := time.AfterFunc(20*time.Second, func() {
		debug.SetTraceback("all")
		panic(fmt.Sprintf("apiseq: op %d (%s) hangs", step, op))
	})
	return func() { tm.Stop() }
}

// drive runs the model of a manual-mode Fabric on another goroutine until
// the returned function is called, for a call that waits for the device
// (in manual mode Context.Idle runs nothing: the test runs the model). It
// does nothing in engine mode.
func (w *asWorld) drive() (stop func()) {
	if !w.manual {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			if busy, _ := w.f.Step(); !busy {
				time.Sleep(20 * time.Microsecond)
			}
		}
	}()
	return func() { close(done); wg.Wait() }
}

// callCtx is the context of one blocking call.
func callCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), asCallMax)
}

func (w *asWorld) adopt(close func() error) { w.closers = append(w.closers, close) }

func (w *asWorld) run(op int, a []byte) {
	defer w.watchdog()()
	b := func(i int) int { return int(a[i]) }
	switch op {
	case asOpenContext:
		i := b(0) % asCtxs
		if w.ctxs[i] != nil && !w.ctxs[i].Closed() {
			return
		}
		dev := []string{"sim0", "sim1"}[b(1)%2]
		var c *ctx.Context
		var err error
		if w.useOpen && b(2)%2 == 1 {
			c, err = mlx5kit.Open(mlx5kit.Options{Provider: ctx.ProviderSoftware, Device: dev})
		} else {
			c, err = w.f.Open(dev)
		}
		w.check("open", err)
		if err == nil {
			w.ctxs[i] = c
			w.adopt(c.Close)
		}
	case asCloseContext:
		if c := w.ctxs[b(0)%asCtxs]; c != nil {
			w.check("close context", c.Close())
		}
	case asAllocPD:
		i, ci := b(0)%asPDs, b(1)%asCtxs
		if w.ctxs[ci] == nil {
			return
		}
		pd, err := w.ctxs[ci].AllocProtectionDomain()
		w.check("alloc PD", err)
		if err == nil {
			w.pds[i], w.pdCtx[i] = pd, ci
			w.adopt(pd.Close)
		}
	case asClosePD:
		if pd := w.pds[b(0)%asPDs]; pd != nil {
			w.check("close PD", pd.Close())
		}
	case asRegisterMR:
		i, pi := b(0)%asMRs, b(1)%asPDs
		if w.pds[pi] == nil {
			return
		}
		buf := w.bufs[i%2].Bytes()
		off := (i / 2 * 2 * asMRSize) % (asArena - asMRSize)
		mr, err := w.pds[pi].RegisterMemory(buf[off:off+asMRSize], allAccess)
		w.check("register MR", err)
		if err == nil {
			w.mrs[i] = mr
			w.adopt(mr.Close)
		}
	case asCloseMR:
		if mr := w.mrs[b(0)%asMRs]; mr != nil {
			w.check("close MR", mr.Close())
		}
	case asCreateCQ:
		i, ci := b(0)%asCQs, b(1)%asCtxs
		if w.ctxs[ci] == nil {
			return
		}
		cq, err := w.ctxs[ci].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: uint32(b(2) % 64), EventChannel: b(3)%2 == 1})
		w.check("create CQ", err)
		if err != nil {
			return
		}
		w.adopt(cq.Close)
		p, err := transport.NewPoller(cq)
		w.check("new poller", err)
		if err != nil {
			return
		}
		w.cqs[i] = &asCQ{cq: cq, p: p, ctx: ci}
	case asCloseCQ:
		if c := w.cqs[b(0)%asCQs]; c != nil {
			if b(1)%2 == 0 {
				w.check("close CQ", c.cq.Close())
			} else {
				w.check("close poller", c.p.Close())
			}
		}
	case asNotifier:
		c := w.cqs[b(0)%asCQs]
		if c == nil {
			return
		}
		n, err := completion.NewNotifier(c.cq, c.p.CQ())
		w.check("new notifier", err)
		if err == nil {
			c.notifier = n
			w.adopt(n.Close)
		}
	case asNotifierWait:
		w.notifierWait(a)
	case asCloseNotifier:
		if c := w.cqs[b(0)%asCQs]; c != nil && c.notifier != nil {
			w.check("close notifier", c.notifier.Close())
		}
	case asNewQP:
		w.newQP(a)
	case asConnectQP:
		w.connectQP(a)
	case asPostSend:
		w.postSend(a)
	case asPostRecv:
		i := b(0) % asQPCount
		if q := w.qps[i]; q != nil {
			addr, length, lkey := w.sge(b(1), b(2))
			w.wrid++
			w.check("post receive", q.queue().PostRecv(w.wrid, addr, length, lkey))
		}
	case asPoll:
		w.poll(a)
	case asResetQP:
		if q := w.qps[b(0)%asQPCount]; q != nil {
			if q.rc != nil {
				w.check("reset", q.rc.Reset())
			} else {
				w.check("fail", q.queue().Fail())
			}
		}
	case asCloseQP:
		if q := w.qps[b(0)%asQPCount]; q != nil {
			if b(1)%2 == 0 {
				w.check("close QP", q.queue().Close())
			} else {
				w.check("close QP handle", q.queue().Handle().Close())
			}
		}
	case asSRQ:
		w.srqOp(a)
	case asChannelNew:
		w.channelNew(a)
	case asChannelHandshake:
		w.channelHandshake(a)
	case asChannelOp:
		w.channelOp(a)
	case asChannelClose:
		w.channelClose(a)
	case asChannelReestablish:
		w.channelReestablish(a)
	case asChannelConn:
		w.channelConn(a)
	case asCloseTwice:
		w.closeTwice(a)
	case asCloseUnderWait:
		w.closeUnderWait(a)
	case asSettle:
		w.settle()
	case asEvents:
		w.events(a)
	case asMesh:
		w.mesh()
	case asPool:
		w.pool(a)
	}
}

// events subscribes to a Context's asynchronous events (its router's
// goroutine must end with the Context), or watches a queue pair's, and
// raises one: a port going down or up, a QP failed, a CQ in error, a
// fatal device error (every verb then fails with EIO) or its recovery.
func (w *asWorld) events(a []byte) {
	fn := func(ctx.AsyncEvent) {}
	var sub *ctx.EventSubscription
	var err error
	dev := []string{"sim0", "sim1"}[a[1]%2]
	switch a[0] % 8 {
	case 0, 1:
		c := w.ctxs[int(a[1])%asCtxs]
		if c == nil {
			return
		}
		r, rerr := c.EventRouter()
		w.check("event router", rerr)
		if rerr != nil {
			return
		}
		sub, err = r.Subscribe(ctx.EventFilter{All: a[0]%4 == 0, Ports: []uint8{1}}, fn)
		w.check("subscribe", err)
		w.check("flush events", r.Flush())
	case 2:
		q := w.qps[int(a[1])%asQPCount]
		if q == nil {
			return
		}
		sub, err = q.queue().WatchEvents(fn)
		w.check("watch events", err)
		w.check("fail", q.queue().Fail())
	case 3:
		w.check("port state", w.f.SetPortState(dev, 1, a[2]%2 == 0))
	case 4:
		if q := w.qps[int(a[1])%asQPCount]; q != nil {
			w.check("fail QP", w.f.FailQP(q.queue().QPN()))
		} else if s := w.sides[int(a[1])%asSides]; s != nil && s.m != nil && s.m.QP(0) != nil {
			w.check("fail QP", w.f.FailQP(s.m.QP(0).QPN()))
		}
	case 5:
		if c := w.cqs[int(a[1])%asCQs]; c != nil {
			w.check("fail CQ", w.f.FailCQ(c.cq.CQN()))
		} else if s := w.sides[int(a[1])%asSides]; s != nil && s.m != nil && s.m.CompletionQueue() != nil {
			w.check("fail CQ", w.f.FailCQ(s.m.CompletionQueue().CQN()))
		}
	case 6:
		if a[2]%4 == 0 {
			w.check("fail device", w.f.FailDevice(dev))
		}
	case 7:
		w.check("recover device", w.f.RecoverDevice(dev))
	}
	if sub != nil {
		if a[3]%2 == 0 {
			sub.Cancel()
		} else {
			w.subs = append(w.subs, sub)
		}
	}
}

// settle lets the model run: until idle in manual mode, a moment in
// engine mode.
func (w *asWorld) settle() {
	if w.manual {
		if err := w.f.RunUntilIdle(); err != nil && !errors.Is(err, sim.ErrNotIdle) {
			w.check("run until idle", err)
		}
		return
	}
	time.Sleep(100 * time.Microsecond)
}

// sge picks a local buffer: a region's, a piece past its end, or a bad key.
func (w *asWorld) sge(sel, off int) (addr uint64, length, lkey uint32) {
	mi := sel % (asMRs + 1)
	if mi == asMRs || w.mrs[mi] == nil {
		return 0xdead0000, 64, 0x1234567
	}
	m := w.mrs[mi]
	addr, lkey = uint64(m.Addr()), m.LKey()
	switch (sel / (asMRs + 1)) % 3 {
	case 0:
		length = uint32(8 + off%256)
	case 1:
		addr += asMRSize - 8
		length = 16
	case 2:
		length = 0
	}
	return addr, length, lkey
}

func (w *asWorld) remote(sel int) (addr uint64, rkey uint32) {
	mi := sel % (asMRs + 1)
	if mi == asMRs || w.mrs[mi] == nil {
		return 0xbeef000, 0x7654321
	}
	return uint64(w.mrs[mi].Addr()), w.mrs[mi].RKey()
}

func (w *asWorld) newQP(a []byte) {
	i, pi, ci := int(a[0])%asQPCount, int(a[1])%asPDs, int(a[2])%asCQs
	pd, c := w.pds[pi], w.cqs[ci]
	if pd == nil || c == nil {
		return
	}
	q := &asQP{cq: ci}
	var srq *transport.SharedReceiveQueue
	recv := uint32(1 + int(a[3])%8)
	if a[3]&0x80 != 0 && w.srq != nil {
		srq, recv = w.srq, 0
	}
	var err error
	if a[3]&0x40 != 0 {
		q.ud, err = ud.New(pd, c.cq, ud.Config{SendDepth: 4, RecvDepth: recv, SRQ: srq, QKey: 0x11})
	} else {
		q.rc, err = rc.New(pd, c.cq, rc.Config{SendDepth: 4, RecvDepth: recv, SRQ: srq, MaxInline: 64,
			Timeout: 1, RetryCount: 1, RNRRetry: 1, MinRNRTimer: 1})
	}
	w.check("new QP", err)
	if err != nil {
		return
	}
	w.qps[i] = q
	w.adopt(q.queue().Close)
	w.check("poller add", c.p.Add(q.pair()))
}

func (w *asWorld) connectQP(a []byte) {
	q, r := w.qps[int(a[0])%asQPCount], w.qps[int(a[1])%asQPCount]
	if q == nil || r == nil {
		return
	}
	switch {
	case q.rc != nil && r.rc != nil:
		w.check("rc connect", q.rc.Connect(r.rc.Endpoint()))
	case q.ud != nil && r.ud != nil:
		rem, err := q.ud.NewRemote(r.ud.Endpoint())
		w.check("ud remote", err)
		if err == nil {
			w.adopt(rem.Close)
			q.remote = rem
		}
	case q.rc != nil:
		w.check("rc connect to UD", q.rc.Connect(r.ud.Endpoint()))
	}
}

func (w *asWorld) postSend(a []byte) {
	q := w.qps[int(a[0])%asQPCount]
	if q == nil {
		return
	}
	laddr, llen, lkey := w.sge(int(a[1]), int(a[3]))
	raddr, rkey := w.remote(int(a[2]))
	w.wrid++
	var err error
	if q.ud != nil {
		if q.remote == nil {
			return
		}
		st, perr := q.ud.Post(w.wrid, wqebuilder.Signaled, q.remote)
		w.check("ud post", perr)
		err = st.Send().SGE(laddr, llen, lkey).FinishBlueFlame()
	} else {
		st, perr := q.rc.Post(w.wrid, wqebuilder.Signaled)
		w.check("rc post", perr)
		switch a[3] % 5 {
		case 0:
			err = st.Send().SGE(laddr, llen, lkey).FinishBlueFlame()
		case 1:
			err = st.RdmaWrite(raddr, rkey).SGE(laddr, llen, lkey).Finish()
			q.queue().RingDoorbell()
		case 2:
			err = st.RdmaRead(raddr, rkey).SGE(laddr, llen, lkey).FinishBlueFlame()
		case 3:
			err = st.AtomicFA(raddr&^7, rkey, 1).Result(laddr&^7, lkey).FinishBlueFlame()
		case 4:
			err = st.SendImm(7).Inline([]byte("apiseq")).FinishBlueFlame()
		}
	}
	w.check("finish", err)
}

// poll polls a CQ's Poller; inside the function Poll hands completions to,
// it may add or remove a queue pair, reset, fail or close one, post, or
// try to close the Poller (refused with ErrBusy).
func (w *asWorld) poll(a []byte) {
	c := w.cqs[int(a[0])%asCQs]
	if c == nil {
		return
	}
	inner, qi := int(a[1])%8, int(a[2])%asQPCount
	var errs []error
	for range 3 {
		if w.manual {
			_, _ = w.f.Step()
		} else if cx := w.ctxs[c.ctx]; cx != nil {
			cx.Idle()
		}
		c.p.Poll(8, func(*transport.Completion) {
			q := w.qps[qi]
			switch inner {
			case 1:
				if q != nil {
					errs = append(errs, c.p.Add(q.pair()))
				}
			case 2:
				if q != nil {
					errs = append(errs, c.p.Remove(q.pair()))
				}
			case 3:
				if err := c.p.Close(); !errors.Is(err, ctx.ErrBusy) {
					w.failf("Poller.Close inside Poll: %v, want ctx.ErrBusy", err)
				}
			case 4:
				if q != nil && q.rc != nil {
					errs = append(errs, q.rc.Reset())
				}
			case 5:
				if q != nil {
					errs = append(errs, q.queue().Fail())
				}
			case 6:
				if q != nil {
					errs = append(errs, q.queue().Close())
				}
			case 7:
				if q != nil {
					errs = append(errs, q.queue().PostRecv(1<<50, 0, 0, 0))
				}
			}
		})
	}
	for _, err := range errs {
		w.check("inside poll", err)
	}
	w.check("poller err", c.p.Err())
}

func (w *asWorld) notifierWait(a []byte) {
	c := w.cqs[int(a[0])%asCQs]
	if c == nil || c.notifier == nil {
		return
	}
	cx, cancel := callCtx()
	defer cancel()
	defer w.drive()()
	if a[1]%2 == 0 {
		w.check("notifier wait", c.notifier.Wait(cx))
		return
	}
	n := 0
	for _, err := range completion.Completions(cx, c.notifier, c.p) {
		w.check("completions", err)
		if err != nil || n > 4 {
			break
		}
		n++
	}
}

func (w *asWorld) srqOp(a []byte) {
	switch a[0] % 3 {
	case 0:
		pd := w.pds[int(a[1])%asPDs]
		if pd == nil {
			return
		}
		s, err := transport.NewSharedReceiveQueue(pd, ctx.SRQConfig{Depth: uint32(a[2] % 8)})
		w.check("new SRQ", err)
		if err == nil {
			w.srq = s
			w.adopt(s.Close)
		}
	case 1:
		if w.srq != nil {
			w.check("close SRQ", w.srq.Close())
		}
	case 2:
		if w.srq != nil {
			addr, length, lkey := w.sge(int(a[1]), int(a[2]))
			w.wrid++
			w.check("SRQ post receive", w.srq.PostRecv(w.wrid, addr, length, lkey))
		}
	}
}

func (w *asWorld) channelNew(a []byte) {
	si, pi := int(a[0])%asSides, int(a[1])%asPDs
	pd := w.pds[pi]
	if pd == nil {
		return
	}
	opts := channel.Options{SendDepth: 4, RecvDepth: 4, Events: a[2]&1 != 0, Counters: a[2]&2 != 0}
	if a[2]&0x40 != 0 {
		opts.OnEvent = func(ctx.AsyncEvent) {}
	}
	s := &asSide{pd: pi}
	// Two peers: a mesh of the two sides (each is its own peer too).
	peers := 1 + int(a[2]>>5&1)
	var err error
	switch a[2] >> 2 % 3 {
	case 0:
		s.p, err = channel.New(pd, opts)
	case 1:
		s.pm, err = channel.NewMulti(pd, peers, opts)
	case 2:
		opts.Transport = endpoint.TransportDC
		opts.DCKey = 0x5eed
		s.pm, err = channel.NewMulti(pd, peers, opts)
	}
	w.check("channel new", err)
	if err != nil {
		return
	}
	if s.p != nil {
		w.adopt(s.p.Close)
	} else {
		w.adopt(s.pm.Close)
	}
	if mr := w.mrs[int(a[3])%asMRs]; mr != nil {
		if s.p != nil {
			w.check("share", s.p.Share(mr))
		} else {
			w.check("share", s.pm.Share(mr))
		}
	}
	w.sides[si] = s
}

// endpoints returns what side s hands its peer.
func (s *asSide) endpoints() []endpoint.Endpoint {
	if s.p != nil {
		return []endpoint.Endpoint{s.p.Endpoint()}
	}
	return s.pm.Endpoints()
}

func (w *asWorld) channelHandshake(a []byte) {
	si := int(a[0]) % asSides
	s, o := w.sides[si], w.sides[1-si]
	if s == nil || o == nil || s.m != nil {
		return
	}
	theirs := o.endpoints()
	if s.p != nil {
		var ep endpoint.Endpoint
		if len(theirs) > 0 {
			ep = theirs[0]
		}
		ch, err := s.p.Handshake(ep)
		w.check("handshake", err)
		if err == nil {
			s.ch, s.m = ch, ch.MultiChannel
			w.adopt(ch.Close)
		}
		return
	}
	m, err := s.pm.Handshake(theirs)
	w.check("handshake", err)
	if err == nil {
		s.m = m
		w.adopt(m.Close)
	}
}

// peerRemote is the remote of side s's peer: its first shared region.
func (s *asSide) peerRemote() channel.Remote {
	r, err := s.m.RemoteRegion(0, 0)
	if err != nil {
		return channel.Remote{Addr: 0x1000, RKey: 0x99}
	}
	return channel.At(r, 8)
}

// channelSGE picks a local buffer for side s: 8 bytes of a region of its
// PD, or (sel%4 == 3, or none) a bad key.
func (w *asWorld) channelSGE(s *asSide, sel int) []channel.SGE {
	for _, mr := range w.mrs {
		if mr != nil && mr.ProtectionDomain() == w.pds[s.pd] && sel%4 != 3 {
			return []channel.SGE{{Addr: uint64(mr.Addr()) + uint64(sel%4)*64, Length: 8, LKey: mr.LKey()}}
		}
	}
	return []channel.SGE{{Addr: 0xdead000, Length: 8, LKey: 0x4242}}
}

func (w *asWorld) channelOp(a []byte) {
	s := w.sides[int(a[0])%asSides]
	if s == nil || s.m == nil {
		return
	}
	m := s.m
	local := w.channelSGE(s, int(a[2]))
	rem := s.peerRemote()
	cx, cancel := callCtx()
	defer cancel()
	defer w.drive()()
	var err error
	var p channel.Pending
	switch a[1] % 16 {
	case 0:
		err = m.Send(cx, channel.SendRequest{Local: local})
	case 1:
		_, err = m.Receive(cx, channel.RecvRequest{Local: local})
	case 2:
		err = m.Write(cx, channel.WriteRequest{Local: local, Remote: rem, WithImmediate: a[3]%2 == 0})
	case 3:
		err = m.Read(cx, channel.ReadRequest{Local: local, Remote: rem})
	case 4:
		err = m.CompareSwap(cx, channel.CompareSwapRequest{Remote: rem, Compare: 0, Swap: 1, Result: local[0]})
	case 5:
		err = m.FetchAdd(cx, channel.FetchAddRequest{Remote: rem, Add: 1, Result: local[0]})
	case 6:
		p, err = m.PostSend(channel.SendRequest{Local: local})
	case 7:
		p, err = m.PostReceive(channel.RecvRequest{Local: local})
	case 8:
		p, err = m.PostWrite(channel.WriteRequest{Local: local, Remote: rem})
	case 9:
		m.Poll()
	case 10:
		err = m.Scope(cx, func(sc *channel.Scope) error {
			_, e1 := sc.PostReceive(channel.RecvRequest{Local: local})
			_, e2 := sc.PostSend(channel.SendRequest{Local: local})
			return errors.Join(e1, e2)
		})
	case 11:
		for _, pp := range s.pending {
			w.check("pending wait", pp.Wait(cx))
			_, perr := pp.Poll()
			w.check("pending poll", perr)
		}
		s.pending = s.pending[:0]
	case 12:
		err = m.Fail()
	case 13:
		err = m.Err()
		_ = m.Counters()
		_ = m.Memory()
	case 14:
		err = m.ScatterSend(cx, []channel.SendRequest{{Local: local}, {Peer: 1, Local: local}})
	case 15:
		err = m.GatherReceive(cx, []channel.RecvRequest{{Local: local}}, make([]channel.Result, 1))
	}
	w.check("channel op", err)
	if err == nil && p != (channel.Pending{}) {
		s.pending = append(s.pending, p)
	}
}

func (w *asWorld) channelClose(a []byte) {
	s := w.sides[int(a[0])%asSides]
	if s == nil {
		return
	}
	switch {
	case s.m != nil && a[1]%2 == 0:
		w.check("channel close", s.m.Close())
	case s.p != nil:
		w.check("prepared close", s.p.Close())
	case s.pm != nil:
		w.check("prepared close", s.pm.Close())
	}
}

func (w *asWorld) channelReestablish(a []byte) {
	s := w.sides[int(a[0])%asSides]
	if s == nil || s.m == nil {
		return
	}
	ns := &asSide{pd: s.pd}
	var err error
	if s.ch != nil {
		ns.p, err = s.ch.Reestablish()
	} else {
		ns.pm, err = s.m.Reestablish()
	}
	w.check("reestablish", err)
	if err != nil {
		return
	}
	if ns.p != nil {
		w.adopt(ns.p.Close)
	} else {
		w.adopt(ns.pm.Close)
	}
	w.sides[int(a[0])%asSides] = ns
}

// channelConn connects the two sides over an in-process connection, each
// end on its own goroutine: Prepared.HandshakeConn, or
// Channel.ReestablishConn for two connected Channels.
func (w *asWorld) channelConn(a []byte) {
	s0, s1 := w.sides[0], w.sides[1]
	if s0 == nil || s1 == nil {
		return
	}
	type end struct {
		hs func(context.Context, net.Conn, endpoint.Side) (*channel.Channel, error)
	}
	sec := endpoint.Security{InsecureLoopback: true}
	var ends [2]end
	for i, s := range []*asSide{s0, s1} {
		switch {
		case s.ch != nil:
			ch := s.ch
			ends[i].hs = func(c context.Context, conn net.Conn, side endpoint.Side) (*channel.Channel, error) {
				return ch.ReestablishConn(c, conn, side, sec)
			}
		case s.p != nil && s.m == nil:
			p := s.p
			ends[i].hs = func(c context.Context, conn net.Conn, side endpoint.Side) (*channel.Channel, error) {
				return p.HandshakeConn(c, conn, side, sec)
			}
		default:
			return
		}
	}
	c0, c1 := net.Pipe()
	cx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	var got [2]*channel.Channel
	var errs [2]error
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn := []net.Conn{c0, c1}[i]
			got[i], errs[i] = ends[i].hs(cx, conn, []endpoint.Side{endpoint.DialSide, endpoint.AcceptSide}[i])
			_ = conn.Close()
		}()
	}
	wg.Wait()
	for i, s := range []*asSide{s0, s1} {
		w.check("handshake over a connection", errs[i])
		if errs[i] == nil {
			w.adopt(got[i].Close)
			w.sides[i] = &asSide{ch: got[i], m: got[i].MultiChannel, pd: s.pd}
		}
	}
}

// mesh connects the two sides, both prepared MultiChannels, with
// channel.Mesh over TCP on the loopback address.
func (w *asWorld) mesh() {
	s0, s1 := w.sides[0], w.sides[1]
	if s0 == nil || s1 == nil || s0.pm == nil || s1.pm == nil || s0.m != nil || s1.m != nil {
		return
	}
	cx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	ms, err := channel.Mesh(cx, "127.0.0.1:0", []*channel.PreparedMulti{s0.pm, s1.pm})
	w.check("mesh", err)
	if err != nil {
		return
	}
	for i, m := range ms {
		w.adopt(m.Close)
		w.sides[i] = &asSide{m: m, pd: w.sides[i].pd}
	}
}

// pool makes a buffer pool in a PD and posts its buffers as receives on a
// queue pair or the SRQ (bufpool.PostReceives), or reposts one.
func (w *asWorld) pool(a []byte) {
	pd := w.pds[int(a[0])%asPDs]
	if pd == nil {
		return
	}
	p, err := bufpool.New(pd, 1+int(a[1])%8, 64, ctx.AccessLocalWrite)
	w.check("new pool", err)
	if err != nil {
		return
	}
	w.pools = append(w.pools, p)
	n := int(a[2]) % 10
	switch q := w.qps[int(a[3])%asQPCount]; {
	case a[3]&0x80 != 0 && w.srq != nil:
		_, err = bufpool.PostReceives(p, w.srq, n)
	case q != nil && q.rc != nil:
		_, err = bufpool.PostReceives(p, q.rc, n)
		if err == nil && n > 0 {
			w.check("repost", bufpool.Repost(p, q.rc, 0))
		}
	case q != nil:
		_, err = bufpool.PostReceives(p, q.ud, n)
	}
	w.check("post receives from a pool", err)
}

// closer returns the Close of an object that may be closed from any
// goroutine, picked by sel: a Context, PD, MR, CQ, queue pair, Notifier,
// SRQ, a channel's queue pair or an event subscription (its Cancel); nil
// when that slot is empty.
func (w *asWorld) closer(sel, i int) func() error {
	switch sel % 9 {
	case 0:
		if c := w.ctxs[i%asCtxs]; c != nil {
			return c.Close
		}
	case 1:
		if pd := w.pds[i%asPDs]; pd != nil {
			return pd.Close
		}
	case 2:
		if mr := w.mrs[i%asMRs]; mr != nil {
			return mr.Close
		}
	case 3:
		if c := w.cqs[i%asCQs]; c != nil {
			return c.cq.Close
		}
	case 4:
		if q := w.qps[i%asQPCount]; q != nil {
			return q.queue().Close
		}
	case 5:
		if c := w.cqs[i%asCQs]; c != nil && c.notifier != nil {
			return c.notifier.Close
		}
	case 6:
		if w.srq != nil {
			return w.srq.Close
		}
	case 7:
		if s := w.sides[i%asSides]; s != nil && s.m != nil {
			if q := s.m.QP(0); q != nil {
				return q.Close
			}
			if d := s.m.DCI(); d != nil {
				return d.Close
			}
		}
	case 8:
		if len(w.subs) > 0 {
			sub := w.subs[i%len(w.subs)]
			return func() error { sub.Cancel(); return nil }
		}
	}
	return nil
}

// closeTwice closes two objects from two goroutines at once: the same one
// twice, a parent and its child, or any two.
func (w *asWorld) closeTwice(a []byte) {
	first := w.closer(int(a[0]), int(a[1]))
	second := first
	if a[2]%2 == 1 {
		second = w.closer(int(a[2]>>1), int(a[3]))
	}
	if first == nil || second == nil {
		return
	}
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, close := range []func() error{first, second} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = close()
		}()
	}
	wg.Wait()
	for _, err := range errs {
		w.check("close from two goroutines", err)
	}
}

// closeUnderWait closes an object from another goroutine (any of closer's,
// or one under the owner's channel or Notifier) while this one, the owner,
// works: a channel's blocking call, raw posts and polls, Scope, Fail,
// Reestablish or Close; a Notifier's Wait or Completions; or a loop of
// posts and Polls on a queue pair, with Reset and Connect for RC.
func (w *asWorld) closeUnderWait(a []byte) {
	var work func(context.Context) error
	close := w.closer(int(a[2]>>3), int(a[3]>>3))
	// ends: the close ends the owner's wait (the object closed is under
	// it), which must then end with ctx.ErrClosed, long before the
	// deadline, not by the deadline.
	ends := false
	switch a[0] % 3 {
	case 0:
		s := w.sides[int(a[1])%asSides]
		if s == nil || s.m == nil {
			return
		}
		m := s.m
		local := w.channelSGE(s, int(a[3]))
		switch a[1] >> 1 % 6 {
		case 0:
			work = func(c context.Context) error {
				_, err := m.Receive(c, channel.RecvRequest{Local: local})
				return err
			}
		case 1:
			work = func(c context.Context) error {
				var errs []error
				for c.Err() == nil {
					_, err := m.PostSend(channel.SendRequest{Local: local})
					errs = append(errs, err)
					m.Poll()
					if err != nil {
						break
					}
				}
				return errors.Join(errs...)
			}
		case 2:
			work = func(c context.Context) error {
				return m.Scope(c, func(sc *channel.Scope) error {
					_, err := sc.PostReceive(channel.RecvRequest{Local: local})
					return err
				})
			}
		case 3:
			work = func(context.Context) error { return m.Fail() }
		case 4:
			work = func(context.Context) error {
				_, err := m.Reestablish()
				// What it prepared is closed with its PD and Context,
				// and left to them.
				return err
			}
		case 5:
			work = func(context.Context) error { return m.Close() }
		}
		if a[2]%4 == 0 {
			if q := m.QP(0); q != nil {
				close = q.Close
			} else if d := m.DCI(); d != nil {
				close = d.Close
			}
		} else if a[2]%4 == 1 {
			if pd := m.ProtectionDomain(); pd != nil {
				close = pd.Context().Close
			}
		} else if a[2]%4 == 2 {
			if cq := m.CompletionQueue(); cq != nil {
				close = cq.Close
			}
		}
		ends = a[2]%4 != 3 && a[1]>>1%6 <= 2
	case 1:
		c := w.cqs[int(a[1])%asCQs]
		if c == nil || c.notifier == nil {
			return
		}
		n := c.notifier
		if a[1]>>2%2 == 0 {
			work = n.Wait
		} else {
			work = func(cx context.Context) error {
				var errs []error
				for _, err := range completion.Completions(cx, n, c.p) {
					errs = append(errs, err)
					if err != nil {
						break
					}
				}
				return errors.Join(errs...)
			}
		}
		switch a[2] % 4 {
		case 0:
			close = n.Close
		case 1:
			close = c.cq.Close
		case 2:
			close = c.cq.Context().Close
		}
		ends = a[2]%4 != 3
	case 2:
		q := w.qps[int(a[1])%asQPCount]
		if q == nil {
			return
		}
		c := w.cqs[q.cq]
		laddr, llen, lkey := w.sge(int(a[3]), 8)
		resets := q.rc != nil && a[1]>>3%2 == 1
		work = func(cx context.Context) error {
			var errs []error
			for i := uint64(1); cx.Err() == nil; i++ {
				if resets {
					// Reset and connect again (to itself) while the
					// close runs: Reset is the owner's, Close anyone's.
					errs = append(errs, q.rc.Reset(), q.rc.Connect(q.rc.Endpoint()))
				}
				if q.rc != nil {
					st, err := q.rc.Post(i, wqebuilder.Signaled)
					errs = append(errs, err, st.Send().SGE(laddr, llen, lkey).FinishBlueFlame())
				}
				errs = append(errs, q.queue().PostRecv(i, laddr, llen, lkey))
				c.p.Poll(4, func(*transport.Completion) {})
				// The owner's other calls, one a round.
				qq := q.queue()
				switch i % 8 {
				case 0:
					qq.EnableCounters()
					_ = qq.Counters()
				case 1:
					sub, err := qq.WatchEvents(func(ctx.AsyncEvent) {})
					errs = append(errs, err)
					sub.Cancel()
				case 2:
					errs = append(errs, c.p.Remove(q.pair()), c.p.Add(q.pair()))
				case 3:
					_, _, _ = qq.Limits(), qq.State(), qq.SendQueue()
					qq.RingDoorbell()
					qq.RingRecvDoorbell()
				case 4:
					if q.ud != nil {
						rem, err := q.ud.NewRemote(q.ud.Endpoint())
						errs = append(errs, err)
						if err == nil {
							st, err := q.ud.Post(i, wqebuilder.Signaled, rem)
							errs = append(errs, err, st.Send().Inline([]byte("x")).FinishBlueFlame(), rem.Close())
						}
					}
				case 5:
					_, _ = qq.Handle().State()
					_, _, _ = qq.Handle().Retries()
				case 7:
					if i > 32 {
						errs = append(errs, qq.Fail())
					}
				}
				if qq.Handle().Closed() {
					break
				}
			}
			errs = append(errs, c.p.Err())
			return errors.Join(errs...)
		}
		if a[2]%2 == 0 {
			close = q.queue().Close
		}
	}
	if close == nil || work == nil {
		return
	}
	limit := 2 * asCallMax
	if ends {
		limit = 10 * time.Second
	}
	cx, cancel := context.WithTimeout(context.Background(), limit)
	defer cancel()
	defer w.drive()()
	w.bg.Add(1)
	go func() {
		defer w.bg.Done()
		time.Sleep(time.Duration(a[3]%8) * time.Millisecond)
		w.checkBG("close under a wait", close())
	}()
	err := work(cx)
	w.check("work with a close under it", err)
	if ends && errors.Is(err, context.DeadlineExceeded) {
		w.failf("the owner's wait did not end when what it waits on was closed: %v", err)
	}
	w.bg.Wait()
}

// finish closes everything the program made, in reverse order of making,
// the Fabric and the buffers, and checks that every goroutine the program
// started has ended.
func (w *asWorld) finish() {
	t := w.t
	w.bg.Wait()
	w.drainBackground()
	if w.trace {
		defer func(start time.Time) { t.Logf("finish in %v", time.Since(start)) }(time.Now())
	}
	if w.fabricFirst {
		if err := w.f.Close(); err != nil {
			t.Errorf("close fabric: %v", err)
		}
	}
	for i := len(w.closers) - 1; i >= 0; i-- {
		if err := w.closers[i](); err != nil {
			w.check("close at the end", err)
		}
	}
	if err := w.f.Close(); err != nil {
		t.Errorf("close fabric: %v", err)
	}
	for _, p := range w.pools {
		w.check("close pool", p.Close())
	}
	for _, b := range w.bufs {
		if err := b.Close(); err != nil {
			t.Errorf("close buffer: %v", err)
		}
	}
	start := time.Now()
	deadline := start.Add(10 * time.Second)
	for runtime.NumGoroutine() > w.baseline && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if w.trace {
		t.Logf("goroutines ended in %v", time.Since(start))
	}
	if n := runtime.NumGoroutine(); n > w.baseline {
		buf := make([]byte, 1<<20)
		buf = buf[:runtime.Stack(buf, true)]
		t.Fatalf("%d goroutines left after everything closed (%d before):\n%s", n-w.baseline, w.baseline, buf)
	}
}

// asWeighted lists each opcode as many times as TestAPISequenceRandom
// should pick it among the others.
var asWeighted = func() []byte {
	weight := map[int]int{
		asChannelOp: 12, asPostSend: 3, asPostRecv: 3, asPoll: 3, asNotifierWait: 2, asCloseUnderWait: 2,
		asNewQP: 2, asConnectQP: 2, asChannelHandshake: 2, asChannelNew: 2, asCloseTwice: 2, asMesh: 2, asEvents: 3,
	}
	var out []byte
	for op := range asNumOps {
		for range max(1, weight[op]) {
			out = append(out, byte(op))
		}
	}
	return out
}()

// apiSeqProgram encodes ops.
func apiSeqProgram(mode byte, ops ...[]byte) []byte {
	b := []byte{mode}
	for _, op := range ops {
		var x [asOpSize]byte
		copy(x[:], op)
		b = append(b, x[:]...)
	}
	return b
}

func asOp(op int, args ...byte) []byte { return append([]byte{byte(op)}, args...) }

// apiSeqSetup builds two Contexts with a PD, an MR and a CQ each, and an
// RC channel between the PDs.
func apiSeqSetup() [][]byte {
	return [][]byte{
		asOp(asOpenContext, 0, 0, 1), asOp(asOpenContext, 1, 1, 1),
		asOp(asAllocPD, 0, 0), asOp(asAllocPD, 1, 1),
		asOp(asRegisterMR, 0, 0), asOp(asRegisterMR, 1, 1),
		asOp(asCreateCQ, 0, 0, 16, 1), asOp(asCreateCQ, 1, 1, 16, 0),
		asOp(asChannelNew, 0, 0, 0, 0), asOp(asChannelNew, 1, 1, 0, 1),
		asOp(asChannelHandshake, 0), asOp(asChannelHandshake, 1),
	}
}

func apiSeqSeeds() [][]byte {
	setup := apiSeqSetup()
	with := func(mode byte, ops ...[]byte) []byte {
		return apiSeqProgram(mode, append(append([][]byte{}, setup...), ops...)...)
	}
	qps := [][]byte{
		asOp(asNewQP, 0, 0, 0, 2), asOp(asNewQP, 1, 1, 1, 2),
		asOp(asConnectQP, 0, 1), asOp(asConnectQP, 1, 0),
	}
	return [][]byte{
		// Channel traffic both ways, then a write, a read and the atomics.
		with(1, asOp(asChannelOp, 1, 7, 0), asOp(asChannelOp, 0, 0, 0), asOp(asChannelOp, 1, 11),
			asOp(asChannelOp, 0, 2, 0, 1), asOp(asChannelOp, 0, 3, 1), asOp(asChannelOp, 0, 4, 2),
			asOp(asChannelOp, 0, 5, 2), asOp(asChannelOp, 0, 10, 0), asOp(asChannelOp, 1, 10, 0)),
		// The same in manual mode, then Fail, Reestablish and a handshake
		// over a connection.
		with(0, asOp(asChannelOp, 1, 7, 0), asOp(asChannelOp, 0, 6, 0), asOp(asChannelOp, 1, 9),
			asOp(asChannelOp, 0, 12), asOp(asChannelReestablish, 0), asOp(asChannelReestablish, 1),
			asOp(asChannelConn), asOp(asChannelOp, 0, 1, 0), asOp(asChannelClose, 0), asOp(asChannelClose, 1)),
		// Parents first under a waiting channel, then use after close.
		with(1, asOp(asCloseUnderWait, 0, 0, 0, 1), asOp(asChannelOp, 0, 0, 0),
			asOp(asCloseUnderWait, 0, 1, 1, 2), asOp(asChannelOp, 1, 6, 0), asOp(asCloseUnderWait, 0, 1, 2, 0),
			asOp(asChannelClose, 0), asOp(asChannelClose, 1)),
		// Notifiers: waits, a close under a wait, closes from two
		// goroutines.
		with(1, asOp(asNotifier, 0), asOp(asNotifierWait, 0, 0), asOp(asChannelOp, 1, 7, 0),
			asOp(asNotifierWait, 0, 1), asOp(asCloseUnderWait, 1, 0, 0, 3), asOp(asNotifier, 0),
			asOp(asCloseUnderWait, 1, 0, 1, 1), asOp(asCloseTwice, 5, 0), asOp(asCloseTwice, 0, 0)),
		// Queue pairs: traffic, then changes inside Poll.
		apiSeqProgram(0, append(append(append([][]byte{}, setup[:8]...), qps...),
			asOp(asPostRecv, 1, 1, 8), asOp(asPostSend, 0, 0, 1, 0), asOp(asPoll, 0, 1, 0),
			asOp(asPoll, 1, 2, 1), asOp(asPostSend, 0, 0, 1, 1), asOp(asPoll, 0, 3, 0),
			asOp(asPoll, 0, 4, 0), asOp(asPostSend, 0, 0, 1, 2), asOp(asPoll, 0, 5, 0),
			asOp(asPoll, 0, 6, 0), asOp(asCloseUnderWait, 2, 9, 0, 1), asOp(asCloseUnderWait, 2, 8, 0, 0),
			asOp(asCloseTwice, 4, 1), asOp(asCloseTwice, 3, 1),
			asOp(asCloseTwice, 1, 0), asOp(asCloseTwice, 2, 1))...),
		// A DC channel pair, an SRQ and UD queue pairs.
		apiSeqProgram(3, append(append([][]byte{}, setup[:8]...),
			asOp(asChannelNew, 0, 0, 8, 0), asOp(asChannelNew, 1, 1, 9, 1),
			asOp(asChannelHandshake, 0), asOp(asChannelHandshake, 1),
			asOp(asChannelOp, 1, 7, 0), asOp(asChannelOp, 0, 0, 0), asOp(asChannelOp, 0, 3, 1),
			asOp(asSRQ, 0, 0, 4), asOp(asNewQP, 2, 0, 0, 0xc0), asOp(asNewQP, 3, 0, 0, 0x40),
			asOp(asConnectQP, 3, 2), asOp(asSRQ, 2, 0, 0), asOp(asPostSend, 3, 0, 0, 0),
			asOp(asPoll, 0, 0, 0), asOp(asClosePD, 0), asOp(asChannelOp, 0, 0, 0), asOp(asSRQ, 1),
			asOp(asCloseContext, 1), asOp(asChannelOp, 1, 1, 0))...),
		// Two MultiChannels (RC, then DC) meshed over TCP, buffer pools
		// posted on queue pairs, parents and children closed at once.
		apiSeqProgram(1, append(append(append([][]byte{}, setup[:8]...), qps...),
			asOp(asChannelNew, 0, 0, 0x24, 0), asOp(asChannelNew, 1, 1, 0x24, 1), asOp(asMesh),
			asOp(asChannelOp, 1, 7, 0), asOp(asChannelOp, 0, 0, 0), asOp(asChannelOp, 0, 8, 1),
			asOp(asChannelNew, 0, 0, 0x28, 0), asOp(asChannelNew, 1, 1, 0x29, 1), asOp(asMesh),
			asOp(asChannelOp, 1, 1, 0), asOp(asPool, 1, 4, 3, 1), asOp(asPostSend, 0, 0, 1, 0),
			asOp(asPoll, 1, 0, 0), asOp(asCloseTwice, 0, 0, 3, 0), asOp(asCloseTwice, 1, 1, 9, 0))...),
	}
}
