package sim

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Benchmarks of a fabric shared by two processes (docs/benchmarks.md):
//
//	go test -run '^$' -bench 'SharedRoundTrip|CacheLineBounce' -benchtime 20000x ./sim
//
// BenchmarkSharedRoundTrip: an RC write-with-immediate round trip between
// this process and a child that answers each one. BenchmarkCacheLineBounce:
// two processes bouncing one cache line through shared memory, the floor
// of any exchange between them. Both report the median (p50-ns) and the
// 99th percentile (p99-ns) of the round trip. The round-trip benchmarks
// (and BenchmarkLocalRoundTrip, both ends in one process) then measure
// the bounce in the same run and report it (bounce-p50-ns) and the round
// trip in bounces (p50/bounce, p99/bounce), the engine's rounds and sleeps
// per round trip, its ACK timeouts (retries/op) and the requests a
// responder saw twice (repeats/op). MLX5KIT_SIM_SPIN=0 turns the engine's
// spin off for an A/B comparison (docs/benchmarks.md).

// reportRoundTrips sorts the samples and reports their percentiles.
func reportRoundTrips(b *testing.B, rt []time.Duration) {
	slices.Sort(rt)
	if len(rt) == 0 {
		return
	}
	b.ReportMetric(float64(rt[len(rt)/2].Nanoseconds()), "p50-ns")
	b.ReportMetric(float64(rt[len(rt)*99/100].Nanoseconds()), "p99-ns")
	b.ReportMetric(0, "ns/op")
}

// envBenchPoll chooses what the poll loops of these benchmarks do after an
// empty poll (pollPause): "yield" leaves the model to its engine
// goroutine; anything else (the default) calls ctx.Context.Idle, as the
// kit's own polling loops do. Child processes inherit it.
const envBenchPoll = "MLX5KIT_SIM_BENCH_POLL"

// benchYield is envBenchPoll=yield, read once.
var benchYield = os.Getenv(envBenchPoll) == "yield"

// pollPause is what the poll loops of these benchmarks do after an empty
// poll on c: Context.Idle (one round of the model here), or with
// envBenchPoll=yield yield the processor to the engine, after every poll,
// or after every 64th when the engine spins (engineSpins: processors to
// spare, where a yield only moves the goroutine between threads). n counts
// the empty polls.
func pollPause(c *ctx.Context, spin bool, n *int) {
	*n++
	if !benchYield {
		c.Idle()
		return
	}
	if !spin || *n%64 == 0 {
		runtime.Gosched()
	}
}

// echoChild answers every write with immediate on q with one carrying the
// same immediate, written to the parent's buffer. Once stop is closed it
// waits (up to 5 s) for the completions of its answers still in flight,
// whose ACKs can reach it after the parent saw the last answer, so that
// its counters are final when it returns.
func echoChild(q *testQP, p peerInfo, stop chan struct{}) {
	spin, empty := engineSpins(), 0
	out := 0                            // answers posted and not completed
	w := writeImmWQE(q, p.Addr, p.RKey) // posted without allocating
	completed := func() {
		for {
			c, ok := q.scq.poll()
			if !ok {
				return
			}
			out--
			if c.op != prm.CQEReq {
				fmt.Fprintf(os.Stderr, "echo: send completion %+v\n", c)
			}
		}
	}
	for {
		select {
		case <-stop:
			for end := time.Now().Add(5 * time.Second); out > 0 && time.Now().Before(end); {
				completed()
				pollPause(q.e.c, spin, &empty)
			}
			return
		default:
		}
		completed()
		op, imm, ok := q.rcq.pollImm()
		if !ok {
			pollPause(q.e.c, spin, &empty) // the model of this process must run
			continue
		}
		if op != prm.CQERespWrImm {
			fmt.Fprintf(os.Stderr, "echo: receive completion %v\n", op)
		}
		// The answer first, then the receive it replaces: the round
		// trip waits for the answer only (31 more receives are
		// posted).
		q.postWQE(w, imm)
		q.postRecvNone()
		out++
	}
}

// echoPair is the parent's end of a round trip with an echo child: an RC
// QP connected to the child's, 32 receives posted.
type echoPair struct {
	e  *env
	a  *testQP
	ch *child
	w  []byte // the write with immediate, posted without allocating
}

// startEcho starts an echo child on a fresh shared fabric and connects to
// it; timeout is the ACK timeout (exponent) of both QPs. It returns once
// the child's QP is ready for the first request.
func startEcho(t testing.TB, timeout uint8) *echoPair {
	name := testFabricName(t)
	ch := startChild(t, "echo", name)
	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	connectTo(t, a, ch.info, timeout, 7)
	ch.send(t, peerInfo{QPN: a.qp.QPN(), LID: lidOf(t, e.c), Addr: e.addr(0), RKey: e.mr.RKey(), Timeout: timeout})
	ch.line(t) // the child's QP is connected
	for i := 0; i < 32; i++ {
		a.postRecv()
	}
	return &echoPair{e: e, a: a, ch: ch, w: writeImmWQE(a, ch.info.Addr, ch.info.RKey)}
}

// round runs round trip i: a write with immediate i to the child, and the
// child's answer. It returns the time from the post to the answer.
func (p *echoPair) round(t testing.TB, i int) time.Duration {
	a := p.a
	spin, empty := engineSpins(), 0
	t0 := time.Now()
	a.postWQE(p.w, uint32(i))
	end := t0.Add(10 * time.Second)
	for {
		op, imm, ok := a.rcq.pollImm()
		if ok {
			if op != prm.CQERespWrImm || imm != uint32(i) {
				t.Fatalf("round %d: %v imm %#x", i, op, imm)
			}
			break
		}
		pollPause(p.e.c, spin, &empty)
		if empty%64 == 0 && time.Now().After(end) {
			t.Fatalf("round %d: no answer within 10s; send CQEs %+v; stats %+v", i, a.scq.drain(), p.e.f.Stats())
		}
	}
	d := time.Since(t0)
	a.postRecvNone()
	for {
		c, ok := a.scq.poll()
		if !ok {
			break
		}
		if c.op != prm.CQEReq {
			t.Fatalf("round %d: send completion %+v", i, c)
		}
	}
	return d
}

func BenchmarkSharedRoundTrip(b *testing.B) {
	p := startEcho(b, 14)
	for i := 0; i < 1000; i++ { // warm-up
		p.round(b, i)
	}
	before := p.e.f.Stats()
	rt := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rt = append(rt, p.round(b, 1000+i))
	}
	b.StopTimer()
	after := p.e.f.Stats()
	reportRoundTrips(b, rt)
	reportEngine(b, before, after)
	// The child's requests repeated to this process, and this process's
	// repeated to the child, over the whole run (warm-up included): each
	// is a retry after an ACK timeout.
	cs := p.ch.stats(b)
	b.ReportMetric(float64(after.RepeatsServed+cs.RepeatsServed)/float64(b.N+1000), "repeats/op")
	reportBounce(b, rt)
}

// reportEngine reports the engine's back-off sleeps and rounds per round
// trip between two snapshots of its counters.
func reportEngine(b *testing.B, before, after Stats) {
	b.ReportMetric(float64(after.EngineSleeps-before.EngineSleeps)/float64(b.N), "sleeps/op")
	b.ReportMetric(float64(after.StepsExecuted-before.StepsExecuted)/float64(b.N), "rounds/op")
	b.ReportMetric(float64(after.Retries-before.Retries)/float64(b.N), "retries/op")
}

// bounceChild bounces the cache line of the file envChildFabric names: it
// answers every odd value with the next even one, until the value is
// all ones.
func bounceChild(t *testing.T) {
	fd, err := unix.Open(os.Getenv(envChildFabric), unix.O_RDWR, 0)
	require.NoError(t, err)
	mem, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	line := (*uint64)(unsafe.Pointer(&mem[0]))
	b, _ := json.Marshal(peerInfo{})
	os.Stdout.WriteString(childMark + string(b) + "\n")
	for {
		v := atomic.LoadUint64(line)
		if v == ^uint64(0) {
			return
		}
		if v&1 == 1 {
			atomic.StoreUint64(line, v+1)
		}
	}
}

// bounce measures n round trips of a cache line bounced with a child
// process (after 1000 not counted).
func bounce(t testing.TB, n int) []time.Duration {
	path := filepath.Join(shmDir, "mlx5kit-bench-bounce-"+strconv.Itoa(os.Getpid()))
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC, 0o600)
	require.NoError(t, err)
	defer func() { _ = os.Remove(path) }()
	require.NoError(t, unix.Ftruncate(fd, 4096))
	mem, err := unix.Mmap(fd, 0, 4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	require.NoError(t, err)
	_ = unix.Close(fd)
	defer func() { _ = unix.Munmap(mem) }()
	line := (*uint64)(unsafe.Pointer(&mem[0]))
	startChild(t, "bounce", path)
	defer atomic.StoreUint64(line, ^uint64(0))
	round := func(i int) time.Duration {
		t0 := time.Now()
		atomic.StoreUint64(line, uint64(2*i+1))
		for atomic.LoadUint64(line) != uint64(2*i+2) {
		}
		return time.Since(t0)
	}
	for i := 0; i < 1000; i++ {
		round(i)
	}
	rt := make([]time.Duration, 0, n)
	for i := 0; i < n; i++ {
		rt = append(rt, round(1000+i))
	}
	return rt
}

func BenchmarkCacheLineBounce(b *testing.B) {
	b.ResetTimer()
	rt := bounce(b, b.N)
	b.StopTimer()
	reportRoundTrips(b, rt)
}

// reportBounce measures the cache-line bounce between two processes right
// after a round-trip benchmark (rt, sorted) and reports its median
// (bounce-p50-ns) and the round trip's p50 and p99 as multiples of it
// (p50/bounce, p99/bounce; the target of docs/benchmarks.md is a p50
// within 4 bounces). Under -short it reports nothing (no second process).
func reportBounce(b *testing.B, rt []time.Duration) {
	if len(rt) == 0 || testing.Short() {
		return // -short: no second process
	}
	br := bounce(b, 20000)
	slices.Sort(br)
	floor := float64(br[len(br)/2].Nanoseconds())
	b.ReportMetric(floor, "bounce-p50-ns")
	b.ReportMetric(float64(rt[len(rt)/2].Nanoseconds())/floor, "p50/bounce")
	b.ReportMetric(float64(rt[len(rt)*99/100].Nanoseconds())/floor, "p99/bounce")
}

// BenchmarkLocalRoundTrip is BenchmarkSharedRoundTrip with both ends in
// one process on a private Fabric (the echo in a goroutine).
func BenchmarkLocalRoundTrip(b *testing.B) {
	e := newEnv(b, Options{Mode: Engine})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	q := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, recvDepth: 64})
	e.connectRC(a, q, 7, 1)
	for i := 0; i < 32; i++ {
		a.postRecv()
		q.postRecv()
	}
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		echoChild(q, peerInfo{Addr: e.addr(0), RKey: e.mr.RKey()}, stop)
	}()
	stopEcho := sync.OnceFunc(func() { close(stop); <-done })
	defer stopEcho()
	rt := make([]time.Duration, 0, b.N)
	spin := engineSpins()
	w := writeImmWQE(a, e.addr2(0), e.mr2.RKey())
	round := func(i int) time.Duration {
		empty := 0
		t0 := time.Now()
		a.postWQE(w, uint32(i))
		for {
			if c, ok := a.rcq.poll(); ok {
				if c.imm != uint32(i) {
					b.Fatalf("round %d: %+v", i, c)
				}
				break
			}
			pollPause(e.c, spin, &empty)
		}
		d := time.Since(t0)
		a.postRecvNone()
		for _, ok := a.scq.poll(); ok; _, ok = a.scq.poll() {
		}
		return d
	}
	for i := 0; i < 1000; i++ {
		round(i)
	}
	before := e.f.Stats()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		rt = append(rt, round(1000+i))
	}
	b.StopTimer()
	reportRoundTrips(b, rt)
	reportEngine(b, before, e.f.Stats())
	stopEcho()
	reportBounce(b, rt)
}

// BenchmarkSharedWriteBandwidth streams 64 KiB RDMA WRITEs to a child
// process, 16 outstanding.
func BenchmarkSharedWriteBandwidth(b *testing.B) {
	const size, window = 64 << 10, 16
	name := testFabricName(b)
	ch := startChild(b, "rc", name)
	e := newEnv(b, Options{Mode: Engine, Fabric: name})
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC, sendDepth: 64})
	connectTo(b, a, ch.info, 14, 7)
	ch.send(b, peerInfo{QPN: a.qp.QPN(), LID: lidOf(b, e.c)})
	b.SetBytes(size)
	out := 0
	post := func(i int) {
		a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(ch.info.Addr+uint64(i%8)*size, ch.info.RKey), dataSeg(size, e.mr.LKey(), e.addr(0)))
		out++
	}
	b.ResetTimer()
	for i := 0; i < b.N; {
		for out < window && i < b.N {
			post(i)
			i++
		}
		for _, c := range a.scq.drain() {
			if c.op != prm.CQEReq {
				b.Fatalf("write: %+v", c)
			}
			out--
		}
		runtime.Gosched()
	}
	for out > 0 {
		for _, c := range a.scq.drain() {
			if c.op != prm.CQEReq {
				b.Fatalf("write: %+v", c)
			}
			out--
		}
		runtime.Gosched()
	}
}
