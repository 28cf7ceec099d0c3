package sim

import (
	"fmt"
	"math"
	"runtime"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// idlePair is two connected RC QPs on an Engine-mode Fabric, a on sim0
// and b on sim1, with receives posted on both.
func idlePair(t testing.TB) (*env, *testQP, *testQP) {
	t.Helper()
	e := newEnv(t, Options{Mode: Engine})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	e.connectRC(a, b, 7, 1)
	for i := 0; i < 32; i++ {
		a.postRecv()
		b.postRecv()
	}
	return e, a, b
}

// holdEngine keeps f's engine goroutine out of the rounds: a drivenAt in
// the far future makes driven() true, so that the engine only sleeps on
// its driveHold timer. It returns once no round has run for a while, so
// that a round the engine began before the store is over.
func holdEngine(t testing.TB, f *Fabric) {
	t.Helper()
	f.drivenAt.Store(math.MaxInt64 / 2)
	deadline := time.Now().Add(5 * time.Second)
	prev := f.Stats().StepsExecuted
	for {
		time.Sleep(5 * time.Millisecond)
		cur := f.Stats().StepsExecuted
		if cur == prev {
			return
		}
		require.True(t, time.Now().Before(deadline), "the engine still runs rounds (%d)", cur)
		prev = cur
	}
}

// writeImmWQE is an RDMA_WRITE with immediate of one inline byte to
// (addr, rkey), built once: postWQE patches the WQE index, the immediate
// and the byte, so that posting it allocates nothing.
func writeImmWQE(q *testQP, addr uint64, rkey uint32) []byte {
	return q.build(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 0, raddrSeg(addr, rkey), inlineSeg([]byte{0}))
}

// postWQE posts w (from writeImmWQE) with immediate imm and the byte
// byte(imm), and rings the doorbell record.
func (q *testQP) postWQE(w []byte, imm uint32) {
	be.PutUint16(w[1:3], q.pi) // ctrl word 0: opmod, WQE index, opcode
	be.PutUint32(w[12:16], imm)
	w[16+16+4] = byte(imm) // ctrl, raddr, inline byte count
	q.write(w)
	q.ring()
}

// postRecvNone posts one receive WQE without scatter entries (an
// invalid-lkey terminator), without allocating.
func (q *testQP) postRecvNone() {
	stride := int(q.d.RQ.Stride)
	slot := unsafe.Slice((*byte)(unsafe.Add(q.d.RQ.Buf, int(uint32(q.rqHead)&(q.d.RQ.WQECnt-1))*stride)), stride)
	clear(slot)
	be.PutUint32(slot[4:], prm.InvalidLKey)
	q.rqHead++
	prm.Store32(q.d.DBRec, uint32(q.rqHead))
}

// TestIdleRunsTheModel: with the engine held off, a posted RDMA_WRITE
// with immediate is not executed while the poller only yields; when the
// poller calls Context.Idle after every empty poll, the write reaches the
// peer (receive completion with the immediate, the byte in its memory)
// and the sender's completion arrives.
func TestIdleRunsTheModel(t *testing.T) {
	e, a, b := idlePair(t)
	holdEngine(t, e.f)
	before := e.f.Stats()
	const imm = 0xa5c3
	e.mem2(0, 1)[0] = 0
	a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, imm, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{0x7e}))

	for end := time.Now().Add(50 * time.Millisecond); time.Now().Before(end); {
		if c, ok := b.rcq.poll(); ok {
			t.Fatalf("a completion without Idle (the engine ran): %+v", c)
		}
		runtime.Gosched()
	}
	require.Equal(t, before.WQEs, e.f.Stats().WQEs, "WQEs executed without Idle")
	require.Zero(t, e.mem2(0, 1)[0])

	var got cqe
	ok := false
	for end := time.Now().Add(10 * time.Second); !ok; {
		if got, ok = b.rcq.poll(); ok {
			break
		}
		require.True(t, time.Now().Before(end), "no receive completion with Idle; stats %+v", e.f.Stats())
		e.c2.Idle()
		e.f.drivenAt.Store(math.MaxInt64 / 2) // still no engine
	}
	require.Equal(t, prm.CQERespWrImm, got.op, "%+v", got)
	require.Equal(t, uint32(imm), got.imm)
	require.Equal(t, b.qp.QPN(), got.qpn)
	require.Equal(t, uint32(1), got.byteCnt)
	require.Equal(t, byte(0x7e), e.mem2(0, 1)[0])
	for end := time.Now().Add(10 * time.Second); ; {
		if c, ok := a.scq.poll(); ok {
			require.Equal(t, prm.CQEReq, c.op, "%+v", c)
			require.Equal(t, prm.OpRdmaWriteImm, c.sendOp)
			break
		}
		require.True(t, time.Now().Before(end), "no send completion with Idle")
		e.c.Idle()
		e.f.drivenAt.Store(math.MaxInt64 / 2)
	}
	after := e.f.Stats()
	require.Equal(t, before.WQEs+1, after.WQEs)
	require.Equal(t, before.CQEs+2, after.CQEs)
	require.Zero(t, after.ErrorCQEs-before.ErrorCQEs)
}

// TestIdleDoesNotAllocate: Context.Idle allocates nothing, on a Fabric
// with queues and no work, and over a whole round trip (post, Idle until
// the peer's receive completion, the answer, Idle until it arrives).
func TestIdleDoesNotAllocate(t *testing.T) {
	e, a, b := idlePair(t)
	holdEngine(t, e.f)

	steps := e.f.Stats().StepsExecuted
	allocs := testing.AllocsPerRun(1000, func() { e.c.Idle() })
	require.Zero(t, allocs, "Idle with no work")
	require.Greater(t, e.f.Stats().StepsExecuted, steps+500, "Idle ran no rounds")

	wa := writeImmWQE(a, e.addr2(0), e.mr2.RKey())
	wb := writeImmWQE(b, e.addr(0), e.mr.RKey())
	i := uint32(0)
	failed := ""
	wait := func(c *ctx.Context, cq *testCQ, op prm.CQEOpcode) {
		for n := 0; ; n++ {
			x, ok := cq.poll()
			if ok {
				if x.op != op || x.imm != i && op == prm.CQERespWrImm {
					failed = fmt.Sprintf("round %d: %+v", i, x)
				}
				return
			}
			if n > 10_000_000 {
				failed = fmt.Sprintf("round %d: no completion", i)
				return
			}
			c.Idle()
		}
	}
	round := func() {
		i++
		a.postWQE(wa, i)
		wait(e.c2, b.rcq, prm.CQERespWrImm)
		b.postRecvNone()
		b.postWQE(wb, i)
		wait(e.c, a.rcq, prm.CQERespWrImm)
		a.postRecvNone()
		wait(e.c, a.scq, prm.CQEReq)
		wait(e.c2, b.scq, prm.CQEReq)
	}
	for j := 0; j < 100; j++ { // warm-up
		round()
	}
	allocs = testing.AllocsPerRun(1000, round)
	require.Empty(t, failed)
	require.Zero(t, allocs, "a round trip driven by Idle")
	require.Equal(t, uint32(1101), i)
}

// idleRunsNothing calls Idle on both Contexts of e a thousand times and
// checks that no round ran and no WQE was executed since before.
func idleRunsNothing(t *testing.T, e *env, before Stats, when string) {
	t.Helper()
	for i := 0; i < 1000; i++ {
		e.c.Idle()
		e.c2.Idle()
	}
	s := e.f.Stats()
	require.Equal(t, before.StepsExecuted, s.StepsExecuted, "rounds run by Idle %s", when)
	require.Equal(t, before.WQEs, s.WQEs, "WQEs executed by Idle %s", when)
}

// TestIdleManualRunsNoRound: in Manual mode Idle runs no round; a posted
// WQE waits for Step.
func TestIdleManualRunsNoRound(t *testing.T) {
	e := newEnv(t, Options{Mode: Manual})
	a, b := e.rcPair(qpOpts{})
	b.postRecv()
	e.run()
	before := e.f.Stats()
	a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 9, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{0x33}))
	idleRunsNothing(t, e, before, "in Manual mode")
	_, ok := b.rcq.poll()
	require.False(t, ok)
	require.Zero(t, e.mem2(0, 1)[0])

	e.run()
	c := b.rcq.one(t)
	require.Equal(t, prm.CQERespWrImm, c.op)
	require.Equal(t, uint32(9), c.imm)
	require.Equal(t, byte(0x33), e.mem2(0, 1)[0])
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
}

// TestIdleAfterFabricClose: after Fabric.Close, Idle neither panics nor
// runs a round, and a posted WQE stays unexecuted.
func TestIdleAfterFabricClose(t *testing.T) {
	e, a, b := idlePair(t)
	require.NoError(t, e.f.Close())
	before := e.f.Stats()
	a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, 5, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte{1}))
	idleRunsNothing(t, e, before, "after Fabric.Close")
	_, ok := b.rcq.poll()
	require.False(t, ok)
	_, ok = a.scq.poll()
	require.False(t, ok)
}

// TestIdleAfterContextClose: once every device of an Engine Fabric is
// closed (the engine stopped), Idle on their Contexts neither panics nor
// runs a round; a device opened again makes Idle run rounds again.
func TestIdleAfterContextClose(t *testing.T) {
	e, _, _ := idlePair(t)
	require.NoError(t, e.c.Close())
	require.NoError(t, e.c2.Close())
	idleRunsNothing(t, e, e.f.Stats(), "after every Context closed")

	c, err := e.f.Open("sim0")
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	holdEngine(t, e.f)
	before := e.f.Stats()
	for i := 0; i < 100; i++ {
		c.Idle()
	}
	require.Greater(t, e.f.Stats().StepsExecuted, before.StepsExecuted, "Idle on a reopened device")
	// The closed Contexts share the Fabric: Idle still reaches it.
	require.NotPanics(t, func() { e.c.Idle() })
}

// TestIdleConcurrentPingPong: two ping-pong pairs, each end on its own
// goroutine polling and calling Idle after every empty poll, and two
// goroutines calling Idle in a loop: every message arrives exactly once
// and in order, and every send completes exactly once.
func TestIdleConcurrentPingPong(t *testing.T) {
	// Under the race detector a round is tens of times slower: -short
	// keeps that run to seconds.
	n := 2000
	if testing.Short() {
		n = 500
	}
	e := newEnv(t, Options{Mode: Engine})
	type pair struct{ a, b *testQP }
	var pairs [2]pair
	for i := range pairs {
		a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
		b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
		e.connectRC(a, b, 7, 1)
		for j := 0; j < 32; j++ {
			a.postRecv()
			b.postRecv()
		}
		pairs[i] = pair{a, b}
	}
	before := e.f.Stats()
	deadline := time.Now().Add(120 * time.Second)
	errs := make(chan error, 8)
	// await polls cq until one CQE arrives; it also counts the send
	// completions of the same QP (sends) as they come.
	await := func(c *ctx.Context, cq, scq *testCQ, sends *int) (cqe, error) {
		for n := 0; ; n++ {
			if x, ok := cq.poll(); ok {
				return x, nil
			}
			for {
				x, ok := scq.poll()
				if !ok {
					break
				}
				if x.op != prm.CQEReq {
					return x, fmt.Errorf("send completion %+v", x)
				}
				*sends++
			}
			c.Idle()
			if n%1024 == 0 && time.Now().After(deadline) {
				return cqe{}, fmt.Errorf("no completion by the deadline; stats %+v", e.f.Stats())
			}
		}
	}
	// end runs one end: the initiator posts message i and waits for its
	// echo; the echo waits for message i and answers it.
	end := func(name string, c *ctx.Context, q *testQP, raddr uint64, rkey uint32, initiator bool) {
		sends := 0
		for i := 0; i < n; i++ {
			if initiator {
				q.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, uint32(i), raddrSeg(raddr, rkey), inlineSeg([]byte{byte(i)}))
			}
			x, err := await(c, q.rcq, q.scq, &sends)
			if err == nil && (x.op != prm.CQERespWrImm || x.imm != uint32(i)) {
				err = fmt.Errorf("message %d: %+v", i, x)
			}
			if err != nil {
				errs <- fmt.Errorf("%s: %w", name, err)
				return
			}
			q.postRecv()
			if !initiator {
				q.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, uint32(i), raddrSeg(raddr, rkey), inlineSeg([]byte{byte(i)}))
			}
		}
		// The last send completions, then nothing more.
		for sends < n {
			x, ok := q.scq.poll()
			if !ok {
				c.Idle()
				if time.Now().After(deadline) {
					errs <- fmt.Errorf("%s: %d send completions of %d", name, sends, n)
					return
				}
				continue
			}
			if x.op != prm.CQEReq {
				errs <- fmt.Errorf("%s: send completion %+v", name, x)
				return
			}
			sends++
		}
		for k := 0; k < 1000; k++ {
			c.Idle()
		}
		if x, ok := q.rcq.poll(); ok {
			errs <- fmt.Errorf("%s: an extra receive completion %+v", name, x)
		}
		if x, ok := q.scq.poll(); ok {
			errs <- fmt.Errorf("%s: an extra send completion %+v", name, x)
		}
	}
	var wg sync.WaitGroup
	for i, p := range pairs {
		wg.Add(2)
		go func() {
			defer wg.Done()
			end(fmt.Sprintf("pair %d initiator", i), e.c, p.a, e.addr2(64*i), e.mr2.RKey(), true)
		}()
		go func() {
			defer wg.Done()
			end(fmt.Sprintf("pair %d echo", i), e.c2, p.b, e.addr(64*i), e.mr.RKey(), false)
		}()
	}
	stop := make(chan struct{})
	var idlers sync.WaitGroup
	for _, c := range []*ctx.Context{e.c, e.c2} {
		idlers.Add(1)
		go func() {
			defer idlers.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				// A round from Idle does not yield: a loop with
				// nothing else to do gives the pollers a turn.
				c.Idle()
				runtime.Gosched()
			}
		}()
	}
	wg.Wait()
	close(stop)
	idlers.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	after := e.f.Stats()
	require.Equal(t, uint64(2*2*n), after.WQEs-before.WQEs, "WQEs executed")
	require.Equal(t, uint64(2*2*2*n), after.CQEs-before.CQEs, "CQEs written")
	require.Zero(t, after.ErrorCQEs-before.ErrorCQEs)
	require.Zero(t, after.Retries-before.Retries)
}

// TestSharedIdleOnlyRoundTrips: with an echo child on a shared fabric and
// this process's engine held off, a loop that only polls and calls Idle
// sees every answer the child commits, once and in order (drain, which
// polls the marks of the rings with a sender, misses none).
func TestSharedIdleOnlyRoundTrips(t *testing.T) {
	skipOnEmulatedCPU(t)
	n := 2000
	if testing.Short() {
		n = 500
	}
	p := startEcho(t, 20)
	a, ch, e := p.a, p.ch, p.e
	holdEngine(t, e.f)
	before := e.f.Stats()
	for i := 0; i < n; i++ {
		a.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, uint32(i), raddrSeg(ch.info.Addr, ch.info.RKey), inlineSeg([]byte{byte(i)}))
		end := time.Now().Add(10 * time.Second)
		for k := 0; ; k++ {
			if c, ok := a.rcq.poll(); ok {
				require.Equal(t, prm.CQERespWrImm, c.op, "round %d: %+v", i, c)
				require.Equal(t, uint32(i), c.imm, "round %d", i)
				break
			}
			e.c.Idle()
			e.f.drivenAt.Store(math.MaxInt64 / 2)
			if k%1024 == 0 && time.Now().After(end) {
				t.Fatalf("round %d: no answer within 10s; stats %+v", i, e.f.Stats())
			}
		}
		a.postRecv()
		for _, c := range a.scq.drain() {
			require.Equal(t, prm.CQEReq, c.op, "round %d: %+v", i, c)
		}
	}
	// The last send completion may follow the last answer.
	for end := time.Now().Add(10 * time.Second); ; {
		s := e.f.Stats()
		if s.CQEs-before.CQEs >= uint64(2*n) {
			break
		}
		require.True(t, time.Now().Before(end), "completions %d of %d", s.CQEs-before.CQEs, 2*n)
		e.c.Idle()
		e.f.drivenAt.Store(math.MaxInt64 / 2)
	}
	_, ok := a.rcq.poll()
	require.False(t, ok, "an extra answer")
	after := e.f.Stats()
	require.Equal(t, uint64(2*n), after.CQEs-before.CQEs, "this process's completions")
	require.Zero(t, after.ErrorCQEs-before.ErrorCQEs)
	require.Zero(t, after.Retries-before.Retries, "ACK timeouts")
	require.Zero(t, after.RepeatsServed-before.RepeatsServed, "the child's requests seen twice")
}
