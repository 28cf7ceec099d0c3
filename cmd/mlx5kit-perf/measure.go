package main

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// maxBatch is the most WQEs posted with one doorbell (and retired by one
// signaled completion) in a bandwidth test.
const maxBatch = 16

// pollBatch is the most completions one poll of a bandwidth test takes.
const pollBatch = 4

// peakWindow is the longest run of batches BW peak looks at.
const peakWindow = 256

// latency is what a latency test recorded, in counter ticks.
type latency = perftool.Latency

// measureLatency runs warmup+iters iterations of step and records each
// measured one.
func measureLatency(warmup, iters int, l *latency, step func(seq uint32) error) error {
	return l.Measure(warmup, iters, step)
}

// localStep returns one iteration of a latency test with both ends in the
// calling goroutine: a ping-pong round trip, or one read by a.
func localStep(m mode, a, b *end, size int) func(seq uint32) error {
	if m.oneSided() {
		return func(seq uint32) error {
			if err := a.postLatency(m, size, seq); err != nil {
				return err
			}
			return a.drain()
		}
	}
	return func(seq uint32) error {
		if err := a.postLatency(m, size, seq); err != nil {
			return err
		}
		if err := b.await(m, size, seq); err != nil {
			return err
		}
		if err := b.postLatency(m, size, seq); err != nil {
			return err
		}
		return a.await(m, size, seq)
	}
}

// clientStep returns one iteration of a latency test on the measuring end
// when the peer is another goroutine or process.
func clientStep(m mode, x *end, size int) func(seq uint32) error {
	if m.oneSided() {
		return func(seq uint32) error {
			if err := x.postLatency(m, size, seq); err != nil {
				return err
			}
			return x.drain()
		}
	}
	return func(seq uint32) error {
		if err := x.postLatency(m, size, seq); err != nil {
			return err
		}
		return x.await(m, size, seq)
	}
}

// answer is the answering end of a ping-pong: it waits for each of n
// messages and sends it back, then waits for its sends to complete.
func answer(m mode, x *end, size, n int) error {
	if err := answerFrom(m, x, size, 0, n); err != nil {
		return err
	}
	return x.drain()
}

// answerFrom answers n messages whose sequence numbers begin at first. It
// leaves its last sends outstanding: a drain would take the next
// message's receive for an error.
func answerFrom(m mode, x *end, size int, first uint32, n int) error {
	for i := 0; i < n; i++ {
		seq := first + uint32(i)
		if err := x.await(m, size, seq); err != nil {
			return err
		}
		if err := x.postLatency(m, size, seq); err != nil {
			return err
		}
	}
	return nil
}

// measureRounds runs a ping-pong latency test for a time against a peer
// in another process: warmup iterations of step, then rounds of iters,
// each after next(true), until ticks counter ticks have passed since the
// first round began (or stop says so), then next(false). The peer answers
// whole rounds, so it knows each round's count; it learns of a round from
// the round mark next sends over TCP, so the first iteration of a round
// waits for that mark to reach it, and is not measured (unless a round is
// one iteration). It records each measured iteration and returns the
// iterations run after the warmup (steps), how many of them it measured
// (n) and the ticks those took: the rounds' spans, each from the end of
// its first iteration to the end of its last, without the round marks
// between them.
func measureRounds(l *latency, warmup, iters int, ticks uint64, stop func() bool, next func(more bool) error, step func(seq uint32) error) (steps, n int, total uint64, err error) {
	seq := uint32(0)
	for ; int(seq) < warmup; seq++ {
		if err := step(seq); err != nil {
			return 0, 0, 0, err
		}
	}
	skip := 0
	if iters > 1 {
		skip = 1
	}
	begin := cycles.Now()
	last := begin
	for rounds := 0; ; rounds++ {
		more := rounds == 0 || last-begin < ticks && !stop()
		if err := next(more); err != nil {
			return steps, n, 0, err
		}
		if !more {
			return steps, n, total, nil
		}
		start := uint64(0)
		for i := 0; i < iters; i++ {
			t0 := cycles.Start()
			if err := step(seq); err != nil {
				return steps, n, 0, err
			}
			t1 := cycles.Stop()
			seq++
			steps++
			last = t1
			if i < skip {
				start = t1
				continue
			}
			if i == 0 {
				start = t0
			}
			n++
			l.Record(t1 - t0)
		}
		total += last - start
	}
}

// answerRounds is the answering end of measureRounds: the warm-up, then a
// round of iters for each round mark the client sends on conn until it
// says no more, and waits for its sends to complete. It returns the
// number of rounds answered.
func answerRounds(cfg config, conn net.Conn, x *end, size int) (int, error) {
	if err := answerFrom(cfg.mode, x, size, 0, cfg.warmup); err != nil {
		return 0, err
	}
	seq := uint32(cfg.warmup)
	for rounds := 0; ; rounds++ {
		more, err := readRoundMark(cfg, conn)
		if err != nil {
			return rounds, err
		}
		if !more {
			return rounds, x.drain()
		}
		if err := answerFrom(cfg.mode, x, size, seq, cfg.iters); err != nil {
			return rounds, err
		}
		seq += uint32(cfg.iters)
	}
}

// stamps are the times of a bandwidth test's batches: posted[b] when the
// doorbell of batch b rang; completed[k] when the (k+1)-th completion of a
// batch was polled, in the order they were polled, and done[k] the
// messages completed by then. Over several queue pairs the batches do not
// complete in the order they were posted: stamped by batch number, a
// window from one batch's post to a later batch's completion would count
// messages of earlier batches not completed yet, and the last batch's
// completion would not be the stream's end.
type stamps struct {
	posted, completed []uint64
	done              []int
}

// newStamps makes room for a stream of n messages posted batch at a time.
func newStamps(n, batch int) stamps {
	b := (n + batch - 1) / batch
	return stamps{posted: make([]uint64, b), completed: make([]uint64, b), done: make([]int, b)}
}

// complete stamps the k-th completion of a batch (from 0), after which
// done messages have completed.
func (st stamps) complete(k, done int) {
	st.completed[k] = cycles.Now()
	st.done[k] = done
}

// stream runs n RDMA_WRITEs (write_bw), RDMA_READs (read_bw) of size
// bytes, or 8-byte atomics on the peer's counter (atomic_bw), with at most qd outstanding, posted in batches of batch (at most
// qd) with one doorbell each; the last WQE of a batch is signaled and its
// work request id is the batch's index. st (room for n messages in such
// batches) gets the batches' times. It allocates nothing.
func (x *end) stream(m mode, size, n, qd, batch int, st stamps) error {
	if x.lanes != nil {
		return x.laneStream(m, size, n, qd, batch, st)
	}
	inline := m == writeBW && size <= x.MaxInline
	posted, outstanding, done, batches := 0, 0, 0, 0
	var since time.Time
	for spins := 1; done < n; spins++ {
		for outstanding+batch <= qd && posted < n {
			k := min(batch, n-posted)
			b := posted / batch
			for j := 0; j < k; j++ {
				flags := wqebuilder.Flags(0)
				if j == k-1 {
					flags = wqebuilder.Signaled
				}
				s, err := x.QP.Post(uint64(b), flags)
				if err != nil {
					return err
				}
				switch {
				case m == atomicBW && x.compareSwap:
					i := x.atomics + uint64(posted+j)
					err = s.AtomicCS(x.PeerRecv, x.RKey, i, i+1).Result(x.RecvAddr, x.LKey).Finish()
				case m == atomicBW:
					err = s.AtomicFA(x.PeerRecv, x.RKey, 1).Result(x.RecvAddr, x.LKey).Finish()
				case m == readBW:
					err = s.RdmaRead(x.PeerSrc, x.RKey).SGE(x.RecvAddr, uint32(size), x.LKey).Finish()
				case inline:
					err = s.RdmaWrite(x.PeerRecv, x.RKey).Inline(x.Src[:size]).Finish()
				default:
					err = s.RdmaWrite(x.PeerRecv, x.RKey).SGE(x.SrcAddr, uint32(size), x.LKey).Finish()
				}
				if err != nil {
					return err
				}
			}
			x.QP.RingDoorbell()
			st.posted[b] = cycles.Now()
			posted += k
			outstanding += k
		}
		got := x.Poller.Poll(pollBatch, func(c *transport.Completion) {
			if c.Match != transport.MatchOK || c.Opcode != prm.CQEReq || int(c.WRID) >= len(st.completed) {
				x.Fail(c)
				return
			}
			b := int(c.WRID)
			k := min(batch, n-b*batch)
			outstanding -= k
			done += k
			st.complete(batches, done)
			batches++
		})
		if x.Failed {
			return x.CompletionError(uint32(done))
		}
		if got == 0 {
			if err := x.Idle(spins, &since, uint32(done)); err != nil {
				return err
			}
		}
	}
	if m == atomicBW {
		x.atomics += uint64(n)
	}
	return nil
}

// bandwidth is what a bandwidth test measured.
type bandwidth struct {
	n            int
	bytes        float64
	seconds      float64 // first doorbell to last completion
	peakBytesSec float64
	// msgs is the messages of the rate when it is not n (both directions
	// of -b, counted over seconds).
	msgs float64
}

// rates turns the stamps of a stream of n messages of size bytes, posted
// batch at a time, into its rates.
func rates(st stamps, n, size, batch int, counter cycles.Info) bandwidth {
	nb := (n + batch - 1) / batch
	bw := bandwidth{n: n, bytes: float64(n) * float64(size)}
	bw.seconds = counter.Nanoseconds(float64(st.completed[nb-1]-st.posted[0])) / 1e9
	for i := 0; i < nb; i++ {
		for j := i; j < nb && j < i+peakWindow; j++ {
			if st.completed[j] <= st.posted[i] {
				continue
			}
			// Of the messages completed by completed[j], at most
			// i*batch were posted before posted[i].
			msgs := st.done[j] - i*batch
			if msgs <= 0 {
				continue
			}
			sec := counter.Nanoseconds(float64(st.completed[j]-st.posted[i])) / 1e9
			if r := float64(msgs) * float64(size) / sec; r > bw.peakBytesSec {
				bw.peakBytesSec = r
			}
		}
	}
	// The whole stream is a run of batches too: a window of at most
	// peakWindow batches pays the stream's start-up latency over fewer
	// messages, and on a steady stream of more batches would report a
	// peak below the average.
	if bw.seconds > 0 {
		bw.peakBytesSec = max(bw.peakBytesSec, bw.bytes/bw.seconds)
	}
	return bw
}

// recordBytes is the memory one end keeps for a run's records: a latency
// test's samples (8 bytes each, none when timed), a bandwidth test's
// stamps (24 bytes a batch).
func (c config) recordBytes() uint64 {
	if c.mode.latency() {
		if c.timed() {
			return 0
		}
		return 8 * uint64(c.iters)
	}
	n := uint64(max(c.warmup, c.streamIters()))
	b := uint64(c.batch())
	return 24 * ((n + b - 1) / b)
}

// memoryAvailable returns the memory the kernel says it can hand out
// without swapping (MemAvailable in /proc/meminfo), or false where it does
// not say.
var memoryAvailable = func() (uint64, bool) {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "MemAvailable:" && f[2] == "kB" {
			kb, err := strconv.ParseUint(f[1], 10, 64)
			return kb << 10, err == nil
		}
	}
	return 0, false
}

// checkMemory returns what is wrong with a run whose records, on ends ends
// in this process, would take more than half the memory available, or "".
// perftest sizes its arrays from -n the same way and would fail their
// allocation or swap; a server checks its client's parameters so, as
// they are its memory a client's -n spends.
func (c config) checkMemory(ends int) string {
	avail, ok := memoryAvailable()
	need := c.recordBytes() * uint64(ends)
	if !ok || need <= avail/2 {
		return ""
	}
	gib := func(n uint64) float64 { return float64(n) / (1 << 30) }
	return fmt.Sprintf("-n %d: the records of a size take %.1f GiB, more than half of the %.1f GiB of memory available here",
		c.iters, gib(need), gib(avail))
}
