package main

import (
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
)

// sizeRun measures one size on the active end x (with the passive end y
// in this process, or nil), prints its table line and returns the number
// of iterations run after the warmup: -n, or as many as ran in -D seconds
// (of which a timed ping-pong with a peer process measures all but each
// round's first, measureRounds).
func sizeRun(w io.Writer, cfg config, size int, x, y *end, counter cycles.Info) (int, error) {
	m := cfg.mode
	if m.latency() {
		var step func(seq uint32) error
		if y != nil {
			step = localStep(m, x, y, size)
		} else {
			step = clientStep(m, x, size)
		}
		n := cfg.iters
		measured := n // of the n run after the warmup
		var l latency
		var total uint64
		var err error
		switch {
		case cfg.timed() && x.peerRounds != nil:
			n, measured, total, err = measureRounds(&l, cfg.warmup, cfg.iters, uint64(counter.Ticks(cfg.interval())), cfg.stop, x.peerRounds, step)
		case cfg.timed():
			n, total, err = l.MeasureFor(cfg.warmup, uint64(counter.Ticks(cfg.interval())), cfg.stop, step)
			measured = n
		default:
			l.Reserve(cfg.iters)
			err = measureLatency(cfg.warmup, cfg.iters, &l, step)
		}
		if err != nil {
			return 0, err
		}
		if err := x.drain(); err != nil {
			return 0, err
		}
		if y != nil {
			if err := y.drain(); err != nil {
				return 0, err
			}
		}
		if cfg.timed() {
			return n, writeLatencyDurationRow(w, cfg, size, measured, total, &l, counter)
		}
		return n, writeLatencyRow(w, cfg, size, &l, counter)
	}
	if cfg.duplex() {
		return duplexLocal(w, cfg, size, x, y, counter)
	}
	batch := cfg.batch()
	iters := cfg.streamIters() // -n per queue pair
	st := newStamps(max(cfg.warmup, iters), batch)
	if cfg.warmup > 0 {
		if err := x.stream(m, size, cfg.warmup, cfg.qd, batch, st); err != nil {
			return 0, err
		}
	}
	if !cfg.timed() {
		if err := x.stream(m, size, iters, cfg.qd, batch, st); err != nil {
			return 0, err
		}
		return iters, writeBandwidthRow(w, cfg, size, rates(st, iters, size, batch, counter))
	}
	// For a time: streams of -n messages until it has passed; the average
	// runs from the first doorbell of the first stream to the last
	// completion of the last, the peak is the best of any stream's.
	var bw bandwidth
	var first uint64
	limit := uint64(counter.Ticks(cfg.interval()))
	for k := 0; ; k++ {
		if err := x.stream(m, size, iters, cfg.qd, batch, st); err != nil {
			return 0, err
		}
		r := rates(st, iters, size, batch, counter)
		if k == 0 {
			first = st.posted[0]
		}
		bw.n += r.n
		bw.bytes += r.bytes
		bw.peakBytesSec = max(bw.peakBytesSec, r.peakBytesSec)
		last := st.completed[(iters+batch-1)/batch-1]
		if last-first >= limit || cfg.stop() {
			bw.seconds = counter.Nanoseconds(float64(last-first)) / 1e9
			break
		}
	}
	return bw.n, writeBandwidthRow(w, cfg, size, bw)
}

// interval is how long a timed test measures before it reports: -D, or
// perftest's 5 seconds (DEF_DURATION) for --run_infinitely without it.
func (c config) interval() time.Duration {
	if c.duration > 0 {
		return time.Duration(c.duration) * time.Second
	}
	return 5 * time.Second
}

// syncTimeout bounds a wait for the peer, whose measurement may run for
// -D seconds: the timeout and the interval, or the longest duration when
// their sum overflows. A client that says it is there while it measures
// (peerAlive) moves it on each time (perftool.Sync), and is given four of
// its intervals at least.
func (c config) syncTimeout() time.Duration {
	t := max(c.timeout, 4*c.peerAlive)
	if c.timed() {
		return min(t, math.MaxInt64-c.interval()) + c.interval()
	}
	return t
}

// stop reports whether a timed test should end early: never, today.
func (c config) stop() bool { return false }

// runSizes measures every size (or, with --run_infinitely, the one size
// again and again, a line each -D seconds, until c.reports lines when it
// is set), each checked by check with the number of iterations it ran.
func runSizes(w io.Writer, cfg config, x, y *end, counter cycles.Info, before func() error, check func(size, n int) error) error {
	sizes := cfg.sizes()
	for k := 0; k < len(sizes) || cfg.infinite; k++ {
		size := sizes[min(k, len(sizes)-1)]
		if cfg.infinite && cfg.reports > 0 && k >= cfg.reports {
			break
		}
		if err := before(); err != nil {
			return err
		}
		n, err := sizeRun(w, cfg, size, x, y, counter)
		if err == nil {
			err = check(size, n)
		}
		if err != nil {
			return fmt.Errorf("%s, %d bytes: %w", cfg.mode, size, err)
		}
	}
	return writeFooter(w, cfg)
}

// verifyActive checks what the measuring end received after a size; the
// passive end checks with verifyPassive.
func verifyActive(cfg config, x *end, size int) error {
	if cfg.duplex() {
		return verifyDuplex(cfg, x, size, true)
	}
	switch cfg.mode {
	case writeLat, sendLat:
		return x.verify(size, true, uint32(cfg.warmup+cfg.iters-1))
	case readLat, readBW:
		return x.verify(size, false, 0)
	case atomicLat:
		// Each atomic turned the counter from its sequence number to the
		// next: the last one fetched the number before the last.
		return x.verifyCounter(x.recv, uint64(cfg.warmup+cfg.iters-1), "the last atomic fetched")
	}
	return nil
}

func verifyPassive(cfg config, y *end, size int) error {
	if cfg.duplex() {
		return verifyDuplex(cfg, y, size, false)
	}
	switch cfg.mode {
	case writeLat, sendLat:
		return y.verify(size, true, uint32(cfg.warmup+cfg.iters-1))
	case writeBW:
		return y.verify(size, false, 0)
	case atomicLat, atomicBW:
		if cfg.timed() {
			return nil // this end does not know how many ran
		}
		if cfg.mode == atomicBW {
			return y.verifyCounters(cfg.qps(), uint64(cfg.warmup+cfg.streamIters()))
		}
		return y.verifyCounter(y.recv, uint64(cfg.warmup+cfg.iters), "the counter the atomics incremented")
	}
	return nil
}

// local runs both ends in this process on one device, one goroutine
// playing both in turn.
func local(cfg config, stdout io.Writer) error {
	s, made, err := openEnds(cfg, "client", "server")
	if err != nil {
		return err
	}
	defer s.Close()
	a, b := made[0], made[1]
	a.compareSwap = cfg.atomicType == cmpAndSwap
	b.compareSwap = a.compareSwap
	if err := connectEnds(a, b); err != nil {
		return err
	}
	if cfg, err = checkPathSize(cfg, a); err != nil {
		return err
	}
	counter := cycles.Frequency()
	ends := "both in this process, one goroutine playing both in turn, not pinned"
	switch {
	case cfg.bidir || cfg.mode == sendBW && cfg.events:
		ends = "both in this process, a goroutine posting and polling on each, not pinned"
	case cfg.mode == sendBW:
		ends = "both in this process, one goroutine posting and polling on the client and taking the server's receives in turn, not pinned"
	case !cfg.mode.pingPong():
		ends = "both in this process, one goroutine posting and polling on the client, the server passive, not pinned"
	}
	in, err := describe(cfg, s.Setup, a, b.endpoint(), ends, counter)
	if err != nil {
		return err
	}
	cfg.device = in.deviceName
	if err := writeInfo(stdout, cfg, in); err != nil {
		return err
	}
	return runSizes(stdout, cfg, a, b, counter, func() error {
		a.reset()
		b.reset()
		return nil
	}, func(size, n int) error {
		ran := cfg
		ran.iters = n
		if !cfg.mode.latency() {
			ran.iters = n / cfg.qps() // n counts the messages of every queue pair
		}
		return firstErr(verifyActive(ran, a, size), verifyPassive(ran, b, size))
	})
}

// describe gathers what the report's header says about the measuring end
// x on s and its peer.
func describe(cfg config, s *perftool.Setup, x *end, peer endpoint.Endpoint, ends string, counter cycles.Info) (info, error) {
	port, err := s.Context.QueryPort(uint8(cfg.port))
	if err != nil {
		return info{}, err
	}
	ep := x.endpoint()
	gid := cfg.gidIndex >= 0 || port.LinkLayer == ctx.LinkLayerEthernet
	gidIndex := -1
	if gid {
		gidIndex = int(ep.GIDIndex)
	}
	outReads := cfg.outReads
	if outReads == 0 {
		outReads = 16 // rc.Config's default
	}
	in := info{
		notes:  pathNotes(cfg, port.LinkLayer, peer),
		device: s.What, deviceName: s.Context.DeviceName(), ends: ends, counter: counter,
		link: port.LinkLayer, mtu: ep.MTU.Bytes(), gidIndex: gidIndex, inline: x.MaxInline, outReads: outReads,
		local:  addressOf("local", cfg.mode, ep, outReads, gid),
		remote: addressOf("remote", cfg.mode, peer, outReads, gid),
	}
	if cfg.sizeLowered {
		in.notes = append(in.notes, fmt.Sprintf("-s: a UD datagram carries at most the path MTU: the size is %d bytes (perftest: Max msg size in UD is MTU %d, Changing to this MTU)", cfg.size, cfg.size))
	}
	if x.lanes != nil {
		in.local, in.remote = address{}, address{}
		in.locals, in.remotes = laneAddresses(cfg, x, outReads, gid)
		in.mtu = x.lanes.all[0].local.MTU.Bytes()
	}
	return in, nil
}

// params is what the client tells the server before the exchange.
type params struct {
	Magic                     uint32
	Mode                      uint32
	Size, MaxSize, All        uint32
	Iters, Warmup, QD, Inline uint32
	Duration                  uint32 // -D, seconds
	Batch                     uint32 // -Q or -l
	Conn, QueuePairs          uint32 // -c, -q
	Bidirectional             uint32 // -b: 1
	SizeSet                   uint32 // -s given: 1
	Infinite                  uint32 // --run_infinitely: 1
	// Alive is how often, in milliseconds, the client of a mode whose
	// server only waits (READ, WRITE and atomics, whose server posts
	// nothing) tells the server it is there while it measures
	// (perftool.KeepAlive), so that a run may last longer than the
	// server's --timeout.
	Alive uint32
}

const paramsMagic = 0x4d585046 // "MXPF"

func (p params) config(base config) config {
	base.mode, base.size, base.maxSize, base.all = mode(p.Mode), int(p.Size), int(p.MaxSize), p.All != 0
	base.iters, base.warmup, base.qd, base.inline = int(p.Iters), int(p.Warmup), int(p.QD), int(p.Inline)
	base.duration, base.cqMod, base.postList = int(p.Duration), int(p.Batch), 0
	base.conn, base.numQueuePairs = connection(p.Conn), int(p.QueuePairs)
	base.bidir = p.Bidirectional != 0
	base.sizeSet = p.SizeSet != 0
	base.infinite = p.Infinite != 0
	base.peerAlive = time.Duration(p.Alive) * time.Millisecond
	if base.mode == sendBW && base.rxDepth == recvDepth {
		// The server was not told the mode: its -r default is send_bw's.
		base.rxDepth = sendRecvDepth
	}
	return base.capRecvDepth()
}

// serve runs the passive end for one client that connects to ln; the
// connections it refuses before that one are reported on stderr.
func serve(cfg config, ln net.Listener, stdout, stderr io.Writer) error {
	var p params
	check := func() error {
		if p.Conn > uint32(connDC) {
			return fmt.Errorf("%w: -c %d: want RC (%d), UD (%d) or DC (%d)", perftool.ErrBadParams, p.Conn, connRC, connUD, connDC)
		}
		cfg = p.config(cfg)
		if msg := cfg.check(); msg != "" {
			return fmt.Errorf("%w: %s", perftool.ErrBadParams, msg)
		}
		if msg := cfg.checkMemory(1); msg != "" {
			return fmt.Errorf("%w: %s", perftool.ErrBadParams, msg)
		}
		return nil
	}
	conn, err := perftool.Accept(ln, cfg.timeout, cfg.security, paramsMagic, &p, check, perftool.Refusals(stderr, "mlx5kit-perf"))
	if errors.Is(err, perftool.ErrPerftestClient) {
		return fmt.Errorf("%w: --perftest-peer speaks it, for write_lat and send_lat", err)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	s, made, err := openEnds(cfg, "server")
	if err != nil {
		return err
	}
	defer s.Close()
	y := made[0]
	y.compareSwap = cfg.atomicType == cmpAndSwap
	if err := handshake(cfg, conn, endpoint.AcceptSide, s.Context, y); err != nil {
		return err
	}
	if cfg, err = checkPathSize(cfg, y); err != nil {
		return err
	}
	ends := fmt.Sprintf("server of %v: %d+%d iterations per size, sizes %v", conn.RemoteAddr(), cfg.warmup, cfg.iters, cfg.sizes())
	in, err := describe(cfg, s.Setup, y, y.peer, ends, cycles.Frequency())
	if err != nil {
		return err
	}
	in.server = true
	fmt.Fprintf(stdout, "serving %s for %v\n", cfg.mode, conn.RemoteAddr())
	if err := writeInfo(stdout, cfg, in); err != nil {
		return err
	}
	counter := in.counter
	sizes := cfg.sizes()
	for k := 0; k < len(sizes) || cfg.infinite; k++ {
		size := sizes[min(k, len(sizes)-1)]
		if cfg.infinite {
			// The client says whether another line follows.
			more, err := readRoundMark(cfg, conn)
			if err != nil {
				return err
			}
			if !more {
				break
			}
		}
		y.reset()
		if err := sync(cfg, conn, nil); err != nil {
			return err
		}
		if cfg.duplex() {
			if err := duplexRemote(stdout, cfg, conn, size, y, false, counter); err != nil {
				return fmt.Errorf("%s, %d bytes: %w", cfg.mode, size, err)
			}
			continue
		}
		var runErr error
		ran := cfg
		switch {
		case cfg.mode.pingPong() && cfg.timed():
			// Rounds of -n until the client says the time is up.
			var rounds int
			rounds, runErr = answerRounds(cfg, conn, y, size)
			ran.iters = rounds * cfg.iters
		case cfg.mode.pingPong():
			runErr = answer(cfg.mode, y, size, cfg.warmup+cfg.iters)
		}
		// The client's last operation has completed once it says so: only
		// then is the data complete.
		err := firstErr(runErr, sync(cfg, conn, runErr))
		if err == nil {
			vErr := verifyPassive(ran, y, size)
			err = firstErr(vErr, sync(cfg, conn, vErr))
		}
		if err != nil {
			return fmt.Errorf("%s, %d bytes: %w", cfg.mode, size, err)
		}
	}
	if cfg.serverReports() {
		if err := writeFooter(stdout, cfg); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout, "done")
	return nil
}

// dial runs the measuring end against the server at cfg.client.
func dial(cfg config, stdout io.Writer) error {
	all := uint32(0)
	if cfg.all {
		all = 1
	}
	p := params{Magic: paramsMagic, Mode: uint32(cfg.mode), Size: uint32(cfg.size), MaxSize: uint32(cfg.maxSize), All: all,
		Iters: uint32(cfg.iters), Warmup: uint32(cfg.warmup), QD: uint32(cfg.qd), Inline: uint32(cfg.inline),
		Duration: uint32(cfg.duration), Batch: uint32(cfg.batch()), Conn: uint32(cfg.conn), QueuePairs: uint32(cfg.qps()),
		Alive: uint32(perftool.AliveEvery / time.Millisecond)}
	if cfg.bidir {
		p.Bidirectional = 1
	}
	if cfg.sizeSet {
		p.SizeSet = 1
	}
	if cfg.infinite {
		p.Infinite = 1
	}
	conn, err := perftool.Dial(cfg.client, cfg.timeout, cfg.security, p)
	if errors.Is(err, perftool.ErrPerftestServer) {
		return fmt.Errorf("%w: --perftest-peer speaks it, for write_lat and send_lat", err)
	}
	if err != nil {
		return err
	}
	defer conn.Close()
	s, made, err := openEnds(cfg, "client")
	if err != nil {
		return err
	}
	defer s.Close()
	x := made[0]
	x.compareSwap = cfg.atomicType == cmpAndSwap
	if err := handshake(cfg, conn, endpoint.DialSide, s.Context, x); err != nil {
		return err
	}
	if cfg, err = checkPathSize(cfg, x); err != nil {
		return err
	}
	counter := cycles.Frequency()
	ends := "client of " + conn.RemoteAddr().String() + ", not pinned"
	in, err := describe(cfg, s.Setup, x, x.peer, ends, counter)
	if err != nil {
		return err
	}
	cfg.device = in.deviceName
	if err := writeInfo(stdout, cfg, in); err != nil {
		return err
	}
	if cfg.mode.pingPong() && cfg.timed() {
		// The server answers rounds of -n until told the time is up.
		x.peerRounds = func(more bool) error { return writeRoundMark(cfg, conn, more) }
	}
	sizes := cfg.sizes()
	for k := 0; k < len(sizes) || cfg.infinite; k++ {
		size := sizes[min(k, len(sizes)-1)]
		if cfg.infinite {
			// Tell the server whether another line follows.
			more := cfg.reports == 0 || k < cfg.reports
			if err := writeRoundMark(cfg, conn, more); err != nil {
				return err
			}
			if !more {
				break
			}
		}
		x.reset()
		if err := sync(cfg, conn, nil); err != nil {
			return err
		}
		if cfg.duplex() {
			if err := duplexRemote(stdout, cfg, conn, size, x, true, counter); err != nil {
				return fmt.Errorf("%s, %d bytes: %w", cfg.mode, size, err)
			}
			continue
		}
		var stopAlive func()
		if !cfg.mode.pingPong() {
			// The server waits in sync for as long as this end measures.
			stopAlive = perftool.KeepAlive(conn)
		}
		n, runErr := sizeRun(stdout, cfg, size, x, nil, counter)
		if stopAlive != nil {
			stopAlive()
		}
		if runErr == nil {
			ran := cfg
			ran.iters = n
			runErr = verifyActive(ran, x, size)
		}
		err := firstErr(runErr, sync(cfg, conn, runErr))
		if err == nil {
			// The server checks what it received.
			err = sync(cfg, conn, nil)
		}
		if err != nil {
			return fmt.Errorf("%s, %d bytes: %w", cfg.mode, size, err)
		}
	}
	return writeFooter(stdout, cfg)
}

// handshake swaps endpoints over conn (this end on side of it), connects
// the queue pair and waits until the peer's is connected too. From then on
// the waits look at conn for a peer gone (End.Peer).
func handshake(cfg config, conn net.Conn, side endpoint.Side, c *ctx.Context, x *end) error {
	var err error
	if x.lanes != nil {
		err = handshakeAll(cfg, conn, side, c, x)
	} else {
		err = perftool.Handshake(conn, side, cfg.security, cfg.timeout, c, x.QP.QPN(), x.endpoint(), x.connect)
	}
	if err == nil {
		x.Peer = conn
	}
	return err
}

// sync tells the peer whether this end is fine (failed nil) and waits for
// the peer to say the same; a peer that failed is an error.
func sync(cfg config, conn net.Conn, failed error) error {
	return perftool.Sync(conn, cfg.syncTimeout(), failed)
}
