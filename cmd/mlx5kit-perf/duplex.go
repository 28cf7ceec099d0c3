package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"net"
	"sync/atomic"
	"time"

	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/transport"
)

// duplex reports whether both ends of the bandwidth test run a loop at
// once: with -b both post, and in send_bw the peer takes the SENDs into
// receives it reposts.
func (c config) duplex() bool { return !c.mode.latency() && (c.bidir || c.mode == sendBW) }

// serverReports reports whether the server prints a table too: it
// measures what it sends (-b) or receives (send_bw), as perftest's does.
func (c config) serverReports() bool { return c.duplex() }

// streamCheck returns what forbids -b and -e in the configuration, or "".
func (c config) streamCheck() string {
	switch {
	case c.bidir && c.mode.latency():
		return fmt.Sprintf("-b: bidirectional is only available in the bandwidth modes (write_bw, read_bw, send_bw, atomic_bw), not %s (as in perftest)", c.mode)
	case c.events && c.timed():
		return "-e: -D and --run_infinitely do not work with events (as in perftest)"
	case c.events && c.perftestPeer && c.mode == writeLat:
		return "-e with --perftest-peer: perftest's write_lat polls the buffer's last byte, there is no completion to wait for (perftest: events are not available on WRITE)"
	}
	return ""
}

// capRecvDepth caps send_bw's receive queue at the messages of a size,
// the warm-up's and -n (perftest, without a warm-up, caps it at -n): more
// receives than messages serve nothing.
func (c config) capRecvDepth() config {
	if c.mode == sendBW && c.rxDepth > c.warmup+c.iters {
		c.rxDepth = c.warmup + c.iters
	}
	return c
}

// recvTimes are the times a phase of a duplex test took its receives.
type recvTimes struct {
	start, last uint64 // the phase's start, the last receive's completion
}

// streamBoth posts n operations of mode m (SENDs in send_bw) of size
// bytes as stream does, over the end's lanes (-c UD|DC, -q: batch b on
// lane b mod their number, at most qd outstanding on each) or its one RC
// queue pair, in batches of batch, and takes recvN SENDs of size bytes
// from the peer, reposting a receive for each on the queue that took it,
// until both are done. The atomics of -b fetch into the source area: the
// receive area holds the counters the peer's atomics change. st gets the
// batches' times, rx the receives'. service, when set, is called after
// each poll (the peer's receives, in this goroutine). It allocates
// nothing (with -e, the waits do).
func (x *end) streamBoth(m mode, size, n, recvN, qd, batch int, st stamps, rx *recvTimes, service func() error) error {
	ls := x.streamLanes()
	op := streamOp(m, x.compareSwap)
	inline := (op == opWrite || op == perftool.OpSend) && size <= x.MaxInline
	for _, l := range ls {
		l.outstanding = 0
	}
	posted, done, batches := 0, 0, 0
	// SENDs of the next phase that an earlier poll took count here.
	received := min(x.early, recvN)
	x.early -= received
	var since time.Time
	rx.start = cycles.Now()
	for spins := 1; done < n || received < recvN; spins++ {
		var err error
		if posted, err = x.postBatches(ls, m, op, size, n, qd, batch, posted, inline, x.SrcAddr, st); err != nil {
			return err
		}
		got := x.Poller.Poll(pollBatch, func(c *transport.Completion) {
			switch {
			case c.Match != transport.MatchOK:
				x.Fail(c)
			case c.Opcode == prm.CQEReq && int(c.WRID) < len(st.completed):
				b := int(c.WRID)
				k := min(batch, n-b*batch)
				l := ls[b%len(ls)]
				l.outstanding -= k
				l.completed += k
				done += k
				st.complete(batches, done)
				batches++
			case c.Opcode == prm.CQERespSend && c.ByteCount == uint32(size+x.grh()):
				// The peer's next phase may have begun: one polled with
				// the last of this one counts in the next.
				if received < recvN {
					received++
					rx.last = cycles.Now()
				} else {
					x.early++
				}
				x.takeRecv(c.Queue)
			default:
				x.Fail(c)
			}
		})
		if err := x.ringRecv(); err != nil {
			return err
		}
		if x.Failed {
			return x.CompletionError(uint32(done + received))
		}
		if service != nil {
			if err := service(); err != nil {
				return err
			}
		}
		if got == 0 {
			if err := x.Idle(spins, &since, uint32(done+received)); err != nil {
				return err
			}
		}
	}
	return nil
}

// streamOp is what a bandwidth stream of mode m posts.
func streamOp(m mode, compareSwap bool) perftool.Op {
	switch {
	case m == readBW:
		return perftool.OpRead
	case m.atomic() && compareSwap:
		return perftool.OpCompareSwap
	case m.atomic():
		return perftool.OpFetchAdd
	case m.verb() == "Send":
		return perftool.OpSend
	}
	return opWrite
}

// streamLanes are the queue pairs a stream posts to: the end's lanes, or
// a lane of its one RC queue pair (made once, pointed at the peer's areas
// each time).
func (x *end) streamLanes() []*lane {
	if x.lanes != nil {
		return x.lanes.all
	}
	if x.solo == nil {
		x.solo = []*lane{{rc: x.QP, send: &x.QP.Queue}}
	}
	l := x.solo[0]
	l.peerRecv, l.peerSrc, l.rkey = x.PeerRecv, x.PeerSrc, x.RKey
	return x.solo
}

// grh is the space in front of every receive of the end: UD's GRH.
func (x *end) grh() int {
	if x.lanes == nil {
		return 0
	}
	return x.lanes.grh
}

// takeRecv posts a receive in place of the one q consumed: on the end's
// own RC queue pair without its doorbell (ringRecv rings it once for a
// poll's worth), elsewhere with it (repost). The first error is kept for
// ringRecv. It allocates nothing.
func (x *end) takeRecv(q *transport.Queue) {
	var err error
	if q == &x.QP.Queue {
		err = q.BeginRecv(0).SGE(x.RecvAddr, uint32(len(x.End.Recv)), x.LKey).Finish()
		x.recvPending++
	} else {
		err = x.repost(q)
	}
	if err != nil && x.recvErr == nil {
		x.recvErr = fmt.Errorf("%s: repost receive: %w", x.Name, err)
	}
}

// ringRecv rings the doorbell of the receives takeRecv posted on the
// end's own queue pair and returns the first error of a repost.
func (x *end) ringRecv() error {
	if x.recvPending > 0 {
		x.QP.RingRecvDoorbell()
		x.recvPending = 0
	}
	err := x.recvErr
	x.recvErr = nil
	return err
}

// duplexRun runs the end's side of a duplex test of one size: the
// warm-up, then -n measured, each posting n when sends is set and taking
// the peer's n SENDs when recvs is set. It returns what the measured
// phase's sends and receives took. With -q the measured phase is -n per
// queue pair.
func (x *end) duplexRun(cfg config, size int, sends, recvs bool, st stamps, rx *recvTimes) error {
	for _, n := range []int{cfg.warmup, cfg.streamIters()} {
		if n == 0 {
			continue
		}
		sendN, recvN := 0, 0
		if sends {
			sendN = n
		}
		if recvs {
			recvN = n
		}
		if err := x.streamBoth(cfg.mode, size, sendN, recvN, cfg.qd, cfg.batch(), st, rx, nil); err != nil {
			return err
		}
	}
	return nil
}

// roles says what each end of a duplex test does: the client (the
// measuring end) sends; the server sends with -b; each takes SENDs in
// send_bw when the other sends them.
func (c config) roles(client bool) (sends, recvs bool) {
	sends = client || c.bidir
	peerSends := !client || c.bidir
	return sends, c.mode == sendBW && peerSends
}

// endRates is what one end of a duplex test measured: the rates of its
// sends, or (a send_bw server) of its receives, from the phase's start to
// the last, with no peak (perftest measures none there).
func endRates(cfg config, size int, sends bool, st stamps, rx recvTimes, counter cycles.Info) bandwidth {
	n := cfg.streamIters()
	if sends {
		return rates(st, n, size, cfg.batch(), counter)
	}
	return bandwidth{n: n, bytes: float64(n) * float64(size),
		seconds: counter.Nanoseconds(float64(rx.last-rx.start)) / 1e9}
}

// sumRates adds the rates of the two directions of -b, as perftest's
// report does on each side: BW peak, BW average and MsgRate are the sums,
// #iterations this end's.
func sumRates(a, b bandwidth) bandwidth {
	f := a.seconds / b.seconds
	return bandwidth{n: a.n, bytes: a.bytes + b.bytes*f, seconds: a.seconds,
		peakBytesSec: a.peakBytesSec + b.peakBytesSec, msgs: float64(a.n) + float64(b.n)*f}
}

// takeSends polls the end's CQ, without waiting, until it is empty, for
// SENDs of size bytes: each counts against *want while it is positive
// (then in early) and gets its receive reposted. It allocates nothing
// unless it fails.
func (x *end) takeSends(size int, want *int, rx *recvTimes) error {
	for {
		got := x.Poller.Poll(pollBatch, func(c *transport.Completion) {
			if c.Match != transport.MatchOK || c.Opcode != prm.CQERespSend || c.ByteCount != uint32(size+x.grh()) {
				x.Fail(c)
				return
			}
			if *want > 0 {
				*want--
				rx.last = cycles.Now()
			} else {
				x.early++
			}
			x.takeRecv(c.Queue)
		})
		if err := x.ringRecv(); err != nil {
			return err
		}
		if x.Failed {
			return x.CompletionError(0)
		}
		if got < pollBatch {
			return nil
		}
	}
}

// sendLocal runs send_bw one way with both ends in this goroutine, as
// the other modes run: a's stream takes b's receives in turn after each
// poll, and b takes what is left after it.
func sendLocal(cfg config, size int, a, b *end, st stamps, ra, rb *recvTimes) error {
	for _, n := range []int{cfg.warmup, cfg.streamIters()} {
		if err := sendPhase(cfg, size, n, a, b, st, ra, rb); err != nil {
			return err
		}
	}
	return nil
}

// sendPhase is one phase of sendLocal: a sends n messages, b takes them.
func sendPhase(cfg config, size, n int, a, b *end, st stamps, ra, rb *recvTimes) error {
	if n == 0 {
		return nil
	}
	want := n - min(b.early, n)
	b.early -= n - want
	rb.start = cycles.Now()
	if err := a.streamBoth(sendBW, size, n, 0, cfg.qd, cfg.batch(), st, ra, func() error { return b.takeSends(size, &want, rb) }); err != nil {
		return err
	}
	return b.streamBoth(sendBW, size, 0, want, cfg.qd, cfg.batch(), st, rb, nil)
}

// timedRates adds up the rounds of a duplex test run for a time (-D,
// --run_infinitely): each round is a phase of -n messages each way; the
// counts and bytes add, the peak is the best of any round's, and the time
// runs from the first round's start to the last round's end.
type timedRates struct {
	bw     bandwidth
	first  uint64 // the first round's start, in counter ticks
	rounds int
}

// add counts a round that sent (sends) or took (else) -n messages, whose
// times are in st or rx.
func (t *timedRates) add(cfg config, size int, sends bool, st stamps, rx recvTimes, counter cycles.Info) {
	r := endRates(cfg, size, sends, st, rx, counter)
	start, last := rx.start, rx.last
	if sends {
		nb := (cfg.streamIters() + cfg.batch() - 1) / cfg.batch()
		start, last = st.posted[0], st.completed[nb-1]
	}
	if t.rounds == 0 {
		t.first = start
	}
	t.rounds++
	t.bw.n += r.n
	t.bw.bytes += r.bytes
	t.bw.peakBytesSec = max(t.bw.peakBytesSec, r.peakBytesSec)
	t.bw.seconds = counter.Nanoseconds(float64(max(last, t.first)-t.first)) / 1e9
}

// more reports whether the end that decides runs another round: always a
// first one, then until the interval has passed since the first began.
func (t *timedRates) more(cfg config, counter cycles.Info) bool {
	return t.rounds == 0 || cycles.Now()-t.first < uint64(counter.Ticks(cfg.interval())) && !cfg.stop()
}

// duplexRounds runs the end's side of a duplex test of one size for a
// time: the warm-up, then rounds of -n messages each way (as duplexRun's
// measured phase) for as long as next says, which the deciding end
// answers with more and tells the peer, and the other end learns from it.
// Both ends run the same rounds, so each receiving end knows its count.
func (x *end) duplexRounds(cfg config, size int, sends, recvs bool, st stamps, rx *recvTimes, counter cycles.Info, next func(t *timedRates) (bool, error)) (timedRates, error) {
	var t timedRates
	count := func(send bool, n int) int {
		if send {
			return n
		}
		return 0
	}
	if cfg.warmup > 0 {
		if err := x.streamBoth(cfg.mode, size, count(sends, cfg.warmup), count(recvs, cfg.warmup), cfg.qd, cfg.batch(), st, rx, nil); err != nil {
			return t, err
		}
	}
	n := cfg.streamIters()
	for {
		ok, err := next(&t)
		if err != nil || !ok {
			return t, err
		}
		if err := x.streamBoth(cfg.mode, size, count(sends, n), count(recvs, n), cfg.qd, cfg.batch(), st, rx, nil); err != nil {
			return t, err
		}
		t.add(cfg, size, sends, st, *rx, counter)
	}
}

// Round marks of a test run for a time between two processes: the client
// writes one on the TCP connection before each round of -n (a duplex
// test's, or a ping-pong's) and, with --run_infinitely, before each line
// (roundNext), and one when it runs no more (roundEnd). Neither is a sync
// status.
const (
	roundNext = 'R'
	roundEnd  = 'E'
)

// remoteRounds is duplexRounds' next over conn: the client decides and
// writes a round mark, the server reads it.
func remoteRounds(cfg config, conn net.Conn, client bool, counter cycles.Info) func(t *timedRates) (bool, error) {
	return func(t *timedRates) (bool, error) {
		if client {
			ok := t.more(cfg, counter)
			return ok, writeRoundMark(cfg, conn, ok)
		}
		return readRoundMark(cfg, conn)
	}
}

// writeRoundMark tells the peer on conn whether another round (or, with
// --run_infinitely, another line) follows.
func writeRoundMark(cfg config, conn net.Conn, more bool) error {
	_ = conn.SetDeadline(time.Now().Add(cfg.syncTimeout()))
	b := [1]byte{roundEnd}
	if more {
		b[0] = roundNext
	}
	if _, err := conn.Write(b[:]); err != nil {
		return fmt.Errorf("tell the peer whether a round follows: %w", err)
	}
	return nil
}

// readRoundMark reads the peer's round mark from conn: whether another
// round follows. Any byte but a round mark is perftool.ErrPeerFailed.
func readRoundMark(cfg config, conn net.Conn) (bool, error) {
	_ = conn.SetDeadline(time.Now().Add(cfg.syncTimeout()))
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return false, fmt.Errorf("read whether a round follows: %w", err)
	}
	switch b[0] {
	case roundNext:
		return true, nil
	case roundEnd:
		return false, nil
	}
	return false, fmt.Errorf("read whether a round follows: the peer sent %#x: %w", b[0], perftool.ErrPeerFailed)
}

// duplexLocal runs a duplex test of one size with both ends in this
// process and prints its line: send_bw one way in this goroutine, -b and
// -e (whose waits sleep on one end's CQ) in a goroutine per end.
func duplexLocal(w io.Writer, cfg config, size int, a, b *end, counter cycles.Info) (int, error) {
	n := max(cfg.warmup, cfg.streamIters())
	sa, sb := newStamps(n, cfg.batch()), newStamps(n, cfg.batch())
	var ra, rb recvTimes
	if !cfg.bidir && !cfg.events && !cfg.timed() {
		if err := sendLocal(cfg, size, a, b, sa, &ra, &rb); err != nil {
			return 0, err
		}
		return cfg.streamIters(), writeBandwidthRow(w, cfg, size, endRates(cfg, size, true, sa, ra, counter))
	}
	if !cfg.bidir && !cfg.events {
		// send_bw one way for a time: rounds of -n until it has passed.
		if err := sendPhase(cfg, size, cfg.warmup, a, b, sa, &ra, &rb); err != nil {
			return 0, err
		}
		var t timedRates
		for t.more(cfg, counter) {
			if err := sendPhase(cfg, size, cfg.streamIters(), a, b, sa, &ra, &rb); err != nil {
				return 0, err
			}
			t.add(cfg, size, true, sa, ra, counter)
		}
		return t.bw.n, writeBandwidthRow(w, cfg, size, t.bw)
	}
	var abort atomic.Bool
	a.Abort, b.Abort = &abort, &abort
	defer func() { a.Abort, b.Abort = nil, nil }()
	// For a time, a decides whether a round follows and tells b.
	rounds := make(chan struct{}, 1)
	var ta, tb timedRates
	errB := make(chan error, 1)
	go func() {
		sends, recvs := cfg.roles(false)
		var err error
		if cfg.timed() {
			tb, err = b.duplexRounds(cfg, size, sends, recvs, sb, &rb, counter, func(*timedRates) (bool, error) {
				_, ok := <-rounds
				return ok, nil
			})
			for range rounds { // a runs on until it closes rounds
			}
		} else {
			err = b.duplexRun(cfg, size, sends, recvs, sb, &rb)
		}
		if err != nil {
			abort.Store(true)
		}
		errB <- err
	}()
	sends, recvs := cfg.roles(true)
	var err error
	if cfg.timed() {
		ta, err = a.duplexRounds(cfg, size, sends, recvs, sa, &ra, counter, func(t *timedRates) (bool, error) {
			ok := t.more(cfg, counter) && !abort.Load()
			if ok {
				rounds <- struct{}{}
			}
			return ok, nil
		})
	} else {
		err = a.duplexRun(cfg, size, sends, recvs, sa, &ra)
	}
	close(rounds)
	if err != nil {
		abort.Store(true)
	}
	if err := firstErr(err, <-errB); err != nil {
		return 0, err
	}
	if cfg.timed() {
		bw := ta.bw
		if cfg.bidir {
			bw = sumRates(bw, tb.bw)
		}
		return ta.bw.n, writeBandwidthRow(w, cfg, size, bw)
	}
	bw := endRates(cfg, size, true, sa, ra, counter)
	if cfg.bidir {
		bw = sumRates(bw, endRates(cfg, size, true, sb, rb, counter))
	}
	return cfg.streamIters(), writeBandwidthRow(w, cfg, size, bw)
}

// wireRates is a bandwidth as the ends of -b swap it.
type wireRates struct {
	N                    uint64
	Bytes, Seconds, Peak float64
}

// swapRates sends this end's rates to the peer and returns the peer's.
func swapRates(cfg config, conn net.Conn, mine bandwidth) (bandwidth, error) {
	_ = conn.SetDeadline(time.Now().Add(cfg.timeout))
	w := wireRates{N: uint64(mine.n), Bytes: mine.bytes, Seconds: mine.seconds, Peak: mine.peakBytesSec}
	if err := binary.Write(conn, binary.BigEndian, w); err != nil {
		return bandwidth{}, fmt.Errorf("send the rates to the peer: %w", err)
	}
	if err := binary.Read(conn, binary.BigEndian, &w); err != nil {
		return bandwidth{}, fmt.Errorf("read the peer's rates: %w", err)
	}
	finite := func(f float64) bool { return !math.IsNaN(f) && !math.IsInf(f, 0) }
	if !(w.Seconds > 0) || !finite(w.Seconds) || !(w.Bytes >= 0) || !finite(w.Bytes) || !(w.Peak >= 0) || !finite(w.Peak) ||
		w.N == 0 || w.N > math.MaxInt64 {
		return bandwidth{}, fmt.Errorf("the peer's rates %+v: want a positive, finite time, bytes and peak and a message count", w)
	}
	return bandwidth{n: int(w.N), bytes: w.Bytes, seconds: w.Seconds, peakBytesSec: w.Peak}, nil
}

// duplexRemote runs this end (the client when client is set, else the
// server) of a duplex test of one size against the peer on conn: both
// run their loops, say they are done, swap their rates with -b, print
// their line and check what they received.
func duplexRemote(w io.Writer, cfg config, conn net.Conn, size int, x *end, client bool, counter cycles.Info) error {
	n := max(cfg.warmup, cfg.streamIters())
	st := newStamps(n, cfg.batch())
	var rx recvTimes
	sends, recvs := cfg.roles(client)
	var runErr error
	var timed timedRates
	if cfg.timed() {
		timed, runErr = x.duplexRounds(cfg, size, sends, recvs, st, &rx, counter, remoteRounds(cfg, conn, client, counter))
	} else {
		runErr = x.duplexRun(cfg, size, sends, recvs, st, &rx)
	}
	// Only once both loops are done is the data complete.
	if err := firstErr(runErr, sync(cfg, conn, runErr)); err != nil {
		return err
	}
	bw := endRates(cfg, size, sends, st, rx, counter)
	ran := cfg
	if cfg.timed() {
		// Both ends ran the same rounds of -n.
		bw = timed.bw
		ran.iters *= timed.rounds
	}
	if cfg.bidir {
		peer, err := swapRates(cfg, conn, bw)
		if err != nil {
			return err
		}
		bw = sumRates(bw, peer)
	}
	if err := writeBandwidthRow(w, cfg, size, bw); err != nil {
		return err
	}
	vErr := verifyDuplex(ran, x, size, client)
	return firstErr(vErr, sync(cfg, conn, vErr))
}

// verifyDuplex checks what an end of a duplex test holds after a size:
// the last message written or sent into it, what it read, or the counters
// the peer's atomics incremented (one per queue pair).
func verifyDuplex(cfg config, x *end, size int, client bool) error {
	sends := client || cfg.bidir
	peerSends := !client || cfg.bidir
	switch {
	case cfg.mode == readBW && sends:
		return x.verify(size, false, 0)
	case (cfg.mode == writeBW || cfg.mode == sendBW) && peerSends:
		return x.verify(size, false, 0)
	case cfg.mode == atomicBW && peerSends:
		return x.verifyCounters(cfg.qps(), uint64(cfg.warmup+cfg.streamIters()))
	}
	return nil
}
