package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"time"

	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
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
	case c.duplex() && c.timed():
		return fmt.Sprintf("-D and --run_infinitely: %s runs -n iterations (the receiving end needs the count)", c.title(" "))
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
// bytes as stream does, at most qd outstanding in batches of batch, and
// takes recvN SENDs of size bytes from the peer, reposting a receive for
// each, until both are done. The atomics of -b fetch into the source
// area: the receive area holds the counter the peer's atomics change. st
// gets the batches' times, rx the receives'. service, when set, is called
// after each poll (the peer's receives, in this goroutine). It allocates
// nothing (with -e, the waits do).
func (x *end) streamBoth(m mode, size, n, recvN, qd, batch int, st stamps, rx *recvTimes, service func() error) error {
	inline := (m == writeBW || m == sendBW) && size <= x.MaxInline
	posted, outstanding, done := 0, 0, 0
	// SENDs of the next phase that an earlier poll took count here.
	received := min(x.early, recvN)
	x.early -= received
	var since time.Time
	var recvErr error
	rx.start = cycles.Now()
	for spins := 1; done < n || received < recvN; spins++ {
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
					err = s.AtomicCS(x.PeerRecv, x.RKey, i, i+1).Result(x.SrcAddr, x.LKey).Finish()
				case m == atomicBW:
					err = s.AtomicFA(x.PeerRecv, x.RKey, 1).Result(x.SrcAddr, x.LKey).Finish()
				case m == readBW:
					err = s.RdmaRead(x.PeerSrc, x.RKey).SGE(x.RecvAddr, uint32(size), x.LKey).Finish()
				case m == sendBW && inline:
					err = s.Send().Inline(x.Src[:size]).Finish()
				case m == sendBW:
					err = s.Send().SGE(x.SrcAddr, uint32(size), x.LKey).Finish()
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
		reposted := 0
		got := x.Poller.Poll(pollBatch, func(c *transport.Completion) {
			switch {
			case c.Match != transport.MatchOK:
				x.Bad, x.Failed = *c, true
			case c.Opcode == prm.CQEReq && int(c.WRID) < len(st.completed):
				b := int(c.WRID)
				st.completed[b] = cycles.Now()
				k := min(batch, n-b*batch)
				outstanding -= k
				done += k
			case c.Opcode == prm.CQERespSend && c.ByteCount == uint32(size):
				// The peer's next phase may have begun: one polled with
				// the last of this one counts in the next.
				if received < recvN {
					received++
					rx.last = cycles.Now()
				} else {
					x.early++
				}
				if err := x.QP.BeginRecv(0).SGE(x.RecvAddr, uint32(len(x.Recv)), x.LKey).Finish(); err != nil && recvErr == nil {
					recvErr = fmt.Errorf("%s: repost receive: %w", x.Name, err)
				}
				reposted++
			default:
				x.Bad, x.Failed = *c, true
			}
		})
		if reposted > 0 {
			x.QP.RingRecvDoorbell()
		}
		if recvErr != nil {
			return recvErr
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
	if m == atomicBW {
		x.atomics += uint64(n)
	}
	return nil
}

// duplexRun runs the end's side of a duplex test of one size: the
// warm-up, then -n measured, each posting n when sends is set and taking
// the peer's n SENDs when recvs is set. It returns what the measured
// phase's sends and receives took.
func (x *end) duplexRun(cfg config, size int, sends, recvs bool, st stamps, rx *recvTimes) error {
	for _, n := range []int{cfg.warmup, cfg.iters} {
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
	if sends {
		return rates(st, cfg.iters, size, cfg.batch(), counter)
	}
	return bandwidth{n: cfg.iters, bytes: float64(cfg.iters) * float64(size),
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

// takeSends polls the end's CQ once, without waiting, for SENDs of size
// bytes: each counts against *want while it is positive (then in early)
// and gets its receive reposted. It allocates nothing unless it fails.
func (x *end) takeSends(size int, want *int, rx *recvTimes) error {
	reposted := 0
	var err error
	x.Poller.Poll(pollBatch, func(c *transport.Completion) {
		if c.Match != transport.MatchOK || c.Opcode != prm.CQERespSend || c.ByteCount != uint32(size) {
			x.Bad, x.Failed = *c, true
			return
		}
		if *want > 0 {
			*want--
			rx.last = cycles.Now()
		} else {
			x.early++
		}
		if e := x.QP.BeginRecv(0).SGE(x.RecvAddr, uint32(len(x.Recv)), x.LKey).Finish(); e != nil && err == nil {
			err = fmt.Errorf("%s: repost receive: %w", x.Name, e)
		}
		reposted++
	})
	if reposted > 0 {
		x.QP.RingRecvDoorbell()
	}
	if err != nil {
		return err
	}
	if x.Failed {
		return x.CompletionError(0)
	}
	return nil
}

// sendLocal runs send_bw one way with both ends in this goroutine, as
// the other modes run: a's stream takes b's receives in turn after each
// poll, and b takes what is left after it.
func sendLocal(cfg config, size int, a, b *end, st stamps, ra, rb *recvTimes) error {
	for _, n := range []int{cfg.warmup, cfg.iters} {
		if n == 0 {
			continue
		}
		want := n - min(b.early, n)
		b.early -= n - want
		rb.start = cycles.Now()
		if err := a.streamBoth(sendBW, size, n, 0, cfg.qd, cfg.batch(), st, ra, func() error { return b.takeSends(size, &want, rb) }); err != nil {
			return err
		}
		if err := b.streamBoth(sendBW, size, 0, want, cfg.qd, cfg.batch(), st, rb, nil); err != nil {
			return err
		}
	}
	return nil
}

// duplexLocal runs a duplex test of one size with both ends in this
// process and prints its line: send_bw one way in this goroutine, -b and
// -e (whose waits sleep on one end's CQ) in a goroutine per end.
func duplexLocal(w io.Writer, cfg config, size int, a, b *end, counter cycles.Info) (int, error) {
	n := max(cfg.warmup, cfg.iters)
	sa, sb := newStamps(n, cfg.batch()), newStamps(n, cfg.batch())
	var ra, rb recvTimes
	if !cfg.bidir && !cfg.events {
		if err := sendLocal(cfg, size, a, b, sa, &ra, &rb); err != nil {
			return 0, err
		}
		return cfg.iters, writeBandwidthRow(w, cfg, size, endRates(cfg, size, true, sa, ra, counter))
	}
	var abort atomic.Bool
	a.Abort, b.Abort = &abort, &abort
	defer func() { a.Abort, b.Abort = nil, nil }()
	errB := make(chan error, 1)
	go func() {
		sends, recvs := cfg.roles(false)
		err := b.duplexRun(cfg, size, sends, recvs, sb, &rb)
		if err != nil {
			abort.Store(true)
		}
		errB <- err
	}()
	sends, recvs := cfg.roles(true)
	err := a.duplexRun(cfg, size, sends, recvs, sa, &ra)
	if err != nil {
		abort.Store(true)
	}
	if err := firstErr(err, <-errB); err != nil {
		return 0, err
	}
	bw := endRates(cfg, size, true, sa, ra, counter)
	if cfg.bidir {
		bw = sumRates(bw, endRates(cfg, size, true, sb, rb, counter))
	}
	return cfg.iters, writeBandwidthRow(w, cfg, size, bw)
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
	if w.Seconds <= 0 || w.N == 0 {
		return bandwidth{}, fmt.Errorf("the peer's rates %+v: no time or no messages", w)
	}
	return bandwidth{n: int(w.N), bytes: w.Bytes, seconds: w.Seconds, peakBytesSec: w.Peak}, nil
}

// duplexRemote runs this end (the client when client is set, else the
// server) of a duplex test of one size against the peer on conn: both
// run their loops, say they are done, swap their rates with -b, print
// their line and check what they received.
func duplexRemote(w io.Writer, cfg config, conn net.Conn, size int, x *end, client bool, counter cycles.Info) error {
	n := max(cfg.warmup, cfg.iters)
	st := newStamps(n, cfg.batch())
	var rx recvTimes
	sends, recvs := cfg.roles(client)
	runErr := x.duplexRun(cfg, size, sends, recvs, st, &rx)
	// Only once both loops are done is the data complete.
	if err := firstErr(runErr, sync(cfg, conn, runErr)); err != nil {
		return err
	}
	bw := endRates(cfg, size, sends, st, rx, counter)
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
	vErr := verifyDuplex(cfg, x, size, client)
	return firstErr(vErr, sync(cfg, conn, vErr))
}

// verifyDuplex checks what an end of a duplex test holds after a size:
// the last message written or sent into it, what it read, or the counter
// the peer's atomics incremented.
func verifyDuplex(cfg config, x *end, size int, client bool) error {
	sends := client || cfg.bidir
	peerSends := !client || cfg.bidir
	switch {
	case cfg.mode == readBW && sends:
		return x.verify(size, false, 0)
	case (cfg.mode == writeBW || cfg.mode == sendBW) && peerSends:
		return x.verify(size, false, 0)
	case cfg.mode == atomicBW && peerSends:
		return x.verifyCounter(x.recv, uint64(cfg.warmup+cfg.iters), "the counter the atomics incremented")
	}
	return nil
}
