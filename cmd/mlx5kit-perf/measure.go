package main

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// maxBatch is the most WQEs posted with one doorbell (and retired by one
// signaled completion) in a bandwidth test.
const maxBatch = 16

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
	if m == readLat {
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
	if m == readLat {
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
	for i := 0; i < n; i++ {
		seq := uint32(i)
		if err := x.await(m, size, seq); err != nil {
			return err
		}
		if err := x.postLatency(m, size, seq); err != nil {
			return err
		}
	}
	return x.drain()
}

// stamps are the times of a bandwidth test's batches: posted[b] when the
// doorbell of batch b rang, completed[b] when its completion was polled.
type stamps struct {
	posted, completed []uint64
}

// newStamps makes room for a stream of n messages with qd in flight.
func newStamps(n, qd int) stamps {
	batch := min(maxBatch, qd)
	b := (n + batch - 1) / batch
	return stamps{posted: make([]uint64, b), completed: make([]uint64, b)}
}

// stream runs n RDMA_WRITEs (write_bw) or RDMA_READs (read_bw) of size
// bytes with at most qd outstanding, posted in batches with one doorbell
// each; the last WQE of a batch is signaled and its work request id is the
// batch's index. st (room for n messages at qd) gets the batches' times. It
// allocates nothing.
func (x *end) stream(m mode, size, n, qd int, st stamps) error {
	batch := min(maxBatch, qd)
	inline := m == writeBW && size <= x.MaxInline
	posted, outstanding, done := 0, 0, 0
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
				if m == readBW {
					err = s.RdmaRead(x.PeerSrc, x.RKey).SGE(x.RecvAddr, uint32(size), x.LKey).Finish()
				} else if inline {
					err = s.RdmaWrite(x.PeerRecv, x.RKey).Inline(x.Src[:size]).Finish()
				} else {
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
		got := x.Poller.Poll(4, func(c *rc.Completion) {
			if c.Status != rc.StatusOK || c.Opcode != prm.CQEReq || int(c.WRID) >= len(st.completed) {
				x.Bad, x.Failed = *c, true
				return
			}
			b := int(c.WRID)
			st.completed[b] = cycles.Now()
			k := min(batch, n-b*batch)
			outstanding -= k
			done += k
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
	return nil
}

// bandwidth is what a bandwidth test measured.
type bandwidth struct {
	n            int
	bytes        float64
	seconds      float64 // first doorbell to last completion
	peakBytesSec float64
}

// rates turns a stream's stamps into its rates.
func rates(st stamps, n, size, qd int, counter cycles.Info) bandwidth {
	batch := min(maxBatch, qd)
	nb := (n + batch - 1) / batch
	bw := bandwidth{n: n, bytes: float64(n) * float64(size)}
	bw.seconds = counter.Nanoseconds(float64(st.completed[nb-1]-st.posted[0])) / 1e9
	for i := 0; i < nb; i++ {
		for j := i; j < nb && j < i+peakWindow; j++ {
			if st.completed[j] <= st.posted[i] {
				continue
			}
			msgs := min((j+1)*batch, n) - i*batch
			sec := counter.Nanoseconds(float64(st.completed[j]-st.posted[i])) / 1e9
			if r := float64(msgs) * float64(size) / sec; r > bw.peakBytesSec {
				bw.peakBytesSec = r
			}
		}
	}
	return bw
}

// header is what the report says before its table.
type header struct {
	mode    mode
	device  string
	ends    string
	counter cycles.Info
	inline  int
	qd      int
}

// mebibyte is perftest's MB.
const mebibyte = 1 << 20

func writeHeader(w io.Writer, h header) error {
	var b strings.Builder
	fmt.Fprintf(&b, "mlx5kit-perf %s: %s\n", h.mode, h.mode.describe())
	perftool.WriteSetting(&b, h.device, h.ends, h.counter)
	if h.mode != readLat && h.mode != readBW {
		fmt.Fprintf(&b, "inline:  payloads of up to %d bytes\n", h.inline)
	}
	switch h.mode {
	case writeLat, sendLat:
		b.WriteString("latency: half the round trip, in microseconds\n")
		b.WriteString(latencyColumns)
	case readLat:
		b.WriteString("latency: the whole read, in microseconds\n")
		b.WriteString(latencyColumns)
	default:
		fmt.Fprintf(&b, "queue:   %d in flight, batches of %d per doorbell, the last of each signaled\n", h.qd, min(maxBatch, h.qd))
		fmt.Fprintf(&b, "rates:   MB = 2^20 bytes; average over first doorbell to last completion, peak over up to %d batches\n", peakWindow)
		fmt.Fprintf(&b, "%8s %12s %18s %21s %15s\n", "#bytes", "#iterations", "BW peak[MB/sec]", "BW average[MB/sec]", "MsgRate[Mpps]")
	}
	_, err := io.WriteString(w, b.String())
	return err
}

var latencyColumns = fmt.Sprintf("%8s %12s %12s %12s %16s %12s %14s %12s %14s\n",
	"#bytes", "#iterations", "t_min[usec]", "t_max[usec]", "t_typical[usec]", "t_avg[usec]", "t_stdev[usec]", "99%[usec]", "99.9%[usec]")

// writeLatencyRow prints one size's latency line; ping-pongs report half
// the round trip.
func writeLatencyRow(w io.Writer, m mode, size int, l *latency, counter cycles.Info) error {
	div := 1.0
	if m.pingPong() {
		div = 2
	}
	r := l.Summarize(counter, div)
	_, err := fmt.Fprintf(w, "%8d %12d %12.2f %12.2f %16.2f %12.2f %14.2f %12.2f %14.2f\n",
		size, r.Count, r.Min, r.Max, r.Typical, r.Avg, r.Stdev, r.Percentile99, r.Percentile999)
	return err
}

// writeBandwidthRow prints one size's bandwidth line.
func writeBandwidthRow(w io.Writer, size int, bw bandwidth) error {
	_, err := fmt.Fprintf(w, "%8d %12d %18.2f %21.2f %15.6f\n",
		size, bw.n, bw.peakBytesSec/mebibyte, bw.bytes/bw.seconds/mebibyte, float64(bw.n)/bw.seconds/1e6)
	return err
}
