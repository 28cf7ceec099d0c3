package main

import (
	"fmt"
	"io"
	"net"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
)

// sizeRun measures one size on the active end x (with the passive end y
// in this process, or nil) and prints its table line.
func sizeRun(w io.Writer, cfg config, size int, x, y *end, counter cycles.Info) error {
	m := cfg.mode
	if m.latency() {
		var step func(seq uint32) error
		if y != nil {
			step = localStep(m, x, y, size)
		} else {
			step = clientStep(m, x, size)
		}
		var l latency
		if err := measureLatency(cfg.warmup, cfg.iters, &l, step); err != nil {
			return err
		}
		if err := x.drain(); err != nil {
			return err
		}
		if y != nil {
			if err := y.drain(); err != nil {
				return err
			}
		}
		return writeLatencyRow(w, m, size, &l, counter)
	}
	st := newStamps(max(cfg.warmup, cfg.iters), cfg.qd)
	if cfg.warmup > 0 {
		if err := x.stream(m, size, cfg.warmup, cfg.qd, st); err != nil {
			return err
		}
	}
	if err := x.stream(m, size, cfg.iters, cfg.qd, st); err != nil {
		return err
	}
	return writeBandwidthRow(w, size, rates(st, cfg.iters, size, cfg.qd, counter))
}

// verifyActive checks what the measuring end received after a size; the
// passive end checks with verifyPassive.
func verifyActive(cfg config, x *end, size int) error {
	switch cfg.mode {
	case writeLat, sendLat:
		return x.verify(size, true, uint32(cfg.warmup+cfg.iters-1))
	case readLat, readBW:
		return x.verify(size, false, 0)
	}
	return nil
}

func verifyPassive(cfg config, y *end, size int) error {
	switch cfg.mode {
	case writeLat, sendLat:
		return y.verify(size, true, uint32(cfg.warmup+cfg.iters-1))
	case writeBW:
		return y.verify(size, false, 0)
	}
	return nil
}

// local runs both ends in this process on one device, one goroutine
// playing both in turn.
func local(cfg config, stdout io.Writer) error {
	s, made, err := perftool.OpenEnds(cfg.provider, cfg.device, cfg.endConfig(), wrap, "client", "server")
	if err != nil {
		return err
	}
	defer s.Close()
	a, b := made[0], made[1]
	if err := firstErr(a.connect(b.endpoint()), b.connect(a.endpoint())); err != nil {
		return err
	}
	counter := cycles.Frequency()
	ends := "both in this process, one goroutine playing both in turn, not pinned"
	if !cfg.mode.pingPong() {
		ends = "both in this process, one goroutine posting and polling on the client, the server passive, not pinned"
	}
	if err := writeHeader(stdout, header{mode: cfg.mode, device: s.What, ends: ends, counter: counter, inline: a.MaxInline, qd: cfg.qd}); err != nil {
		return err
	}
	for _, size := range cfg.sizes() {
		clear(a.recv)
		clear(b.recv)
		if err := sizeRun(stdout, cfg, size, a, b, counter); err != nil {
			return fmt.Errorf("%s, %d bytes: %w", cfg.mode, size, err)
		}
		if err := firstErr(verifyActive(cfg, a, size), verifyPassive(cfg, b, size)); err != nil {
			return err
		}
	}
	return nil
}

// params is what the client tells the server before the exchange.
type params struct {
	Magic                     uint32
	Mode                      uint32
	Size, MaxSize, All        uint32
	Iters, Warmup, QD, Inline uint32
}

const paramsMagic = 0x4d585046 // "MXPF"

func (p params) config(base config) config {
	base.mode, base.size, base.maxSize, base.all = mode(p.Mode), int(p.Size), int(p.MaxSize), p.All != 0
	base.iters, base.warmup, base.qd, base.inline = int(p.Iters), int(p.Warmup), int(p.QD), int(p.Inline)
	return base
}

// serve runs the passive end for one client that connects to ln.
func serve(cfg config, ln net.Listener, stdout io.Writer) error {
	var p params
	conn, err := perftool.Accept(ln, cfg.timeout, &p)
	if err != nil {
		return err
	}
	defer conn.Close()
	if p.Magic != paramsMagic {
		return fmt.Errorf("the client sent bad parameters %+v", p)
	}
	cfg = p.config(cfg)
	if msg := cfg.check(); msg != "" {
		return fmt.Errorf("the client sent bad parameters: %s", msg)
	}
	s, made, err := perftool.OpenEnds(cfg.provider, cfg.device, cfg.endConfig(), wrap, "server")
	if err != nil {
		return err
	}
	defer s.Close()
	y := made[0]
	if err := handshake(cfg, conn, endpoint.AcceptSide, s.Context, y); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "device:  %s\nserving %s for %v: %d+%d iterations per size, sizes %v\n", s.What, cfg.mode, conn.RemoteAddr(), cfg.warmup, cfg.iters, cfg.sizes())
	for _, size := range cfg.sizes() {
		clear(y.recv)
		if err := sync(cfg, conn, nil); err != nil {
			return err
		}
		var runErr error
		if cfg.mode.pingPong() {
			runErr = answer(cfg.mode, y, size, cfg.warmup+cfg.iters)
		}
		// The client's last operation has completed once it says so: only
		// then is the data complete.
		err := firstErr(sync(cfg, conn, runErr), runErr)
		if err == nil {
			vErr := verifyPassive(cfg, y, size)
			err = firstErr(sync(cfg, conn, vErr), vErr)
		}
		if err != nil {
			return fmt.Errorf("%s, %d bytes: %w", cfg.mode, size, err)
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
		Iters: uint32(cfg.iters), Warmup: uint32(cfg.warmup), QD: uint32(cfg.qd), Inline: uint32(cfg.inline)}
	conn, err := perftool.Dial(cfg.client, cfg.timeout, p)
	if err != nil {
		return err
	}
	defer conn.Close()
	s, made, err := perftool.OpenEnds(cfg.provider, cfg.device, cfg.endConfig(), wrap, "client")
	if err != nil {
		return err
	}
	defer s.Close()
	x := made[0]
	if err := handshake(cfg, conn, endpoint.DialSide, s.Context, x); err != nil {
		return err
	}
	counter := cycles.Frequency()
	ends := "client of " + conn.RemoteAddr().String() + ", not pinned"
	if err := writeHeader(stdout, header{mode: cfg.mode, device: s.What, ends: ends, counter: counter, inline: x.MaxInline, qd: cfg.qd}); err != nil {
		return err
	}
	for _, size := range cfg.sizes() {
		clear(x.recv)
		if err := sync(cfg, conn, nil); err != nil {
			return err
		}
		runErr := sizeRun(stdout, cfg, size, x, nil, counter)
		if runErr == nil {
			runErr = verifyActive(cfg, x, size)
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
	return nil
}

// handshake swaps endpoints over conn (this end on side of it), connects
// the queue pair and waits until the peer's is connected too.
func handshake(cfg config, conn net.Conn, side endpoint.Side, c *ctx.Context, x *end) error {
	return perftool.Handshake(conn, side, cfg.security, cfg.timeout, c, x.QP.QPN(), x.endpoint(), x.connect)
}

// sync tells the peer whether this end is fine (failed nil) and waits for
// the peer to say the same; a peer that failed is an error.
func sync(cfg config, conn net.Conn, failed error) error {
	return perftool.Sync(conn, cfg.timeout, failed)
}
