// Command mlx5kit-pingpong measures the latency of an RC ping-pong the way
// perftest's ib_write_lat does: two RC queue pairs send each other
// RDMA_WRITE with immediate (inline, signaled, through BlueFlame) of -size
// bytes, one waiting for the other's message before answering, both
// busy-polling their completion queues; the latency is half the round trip.
// It prints a table of t_min, t_typical (the median), t_avg, the 99th and
// 99.9th percentiles and t_max in microseconds, and says which provider and
// device ran it.
//
// Usage:
//
//	mlx5kit-pingpong [flags]                              both ends in this process
//	mlx5kit-pingpong -server :18515 -key-file k [flags]   wait for a client
//	mlx5kit-pingpong -client host:18515 -key-file k [flags]
//
// The two ends talk over TCP. With a key (-key-file, or $MLX5KIT_KEY: at
// least 16 random bytes, e.g. head -c 32 /dev/urandom | base64) each first
// proves to the other that it holds the same key; only then does the
// client send its -size, -iters and -warmup (the ones used), sealed, the
// server open its queue pair and receive area, and the ends swap their
// endpoints (QPN, LID or GID, PSN, MTU, and the address and rkey of their
// receive area). Without a key both ends must be on this host: -server
// then needs a loopback address such as 127.0.0.1:18515. A server greets
// up to 128 connections at once (past that it closes the one that has
// waited longest without proving the key, of a host holding more than a
// quarter of them if one does), keeps waiting (ten -timeout in
// all) after a connection it refuses (another key or none, closed, silent
// for -timeout, and with a key garbage), printing one line for each on
// stderr, and serves the first good client; without a key garbage ends it
// with a message. With neither -server nor -client
// both ends run in this process on one device, two queue pairs in
// loopback: on hardware one goroutine per end, each pinned to its own CPU
// (MLX5KIT_CPUS picks them), on the software HCA one goroutine that plays
// both ends in turn while the model's engine runs on the other CPU.
//
// With -provider sim or MLX5KIT_PROVIDER=sim it runs on the software HCA;
// with neither and no mlx5 device it chooses the software HCA itself. Both
// ways it says so: the numbers are then those of the model, a goroutine
// polling doorbell records, not of a NIC. With -server or -client the
// software HCA joins the fabric shared by the processes that name it
// ($MLX5KIT_SIM_FABRIC, "default" when unset), so a server and a client in
// two processes of this host reach each other on it.
//
// Every message is checked: its completion must carry the expected
// immediate, its first bytes the sequence number, and the whole receive
// area is compared with the last message at the end.
//
// Flags:
//
//	-size n        message size in bytes (default 2)
//	-iters n       measured iterations (default 1000)
//	-warmup n      iterations run before measuring (default 100)
//	-device name   device to open (default: the first)
//	-provider p    mlx5 or sim (default: MLX5KIT_PROVIDER, else mlx5, else sim with a note)
//	-gid-index n   local GID table entry on RoCE (default: MLX5KIT_GID_INDEX, or a RoCE v2 GID)
//	-ib-port n     local port (default 1)
//	-inline        send the payload inline when it fits (default true)
//	-threads n     with both ends here: 1 one goroutine, 2 one per end, 0 choose (default 0)
//	-hist          also print the latency histogram
//	-timeout d     give up when a message or the exchange takes longer (default 10s)
//	-key-file f    the pre-shared key of -server and -client (default: $MLX5KIT_KEY)
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/affinity"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/histogram"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
)

func main() {
	perftool.Main(func() int { return run(os.Args[1:], os.Stdout, os.Stderr) })
}

// maxSize is the largest message: ib_write_lat's limit.
const maxSize = 8 << 20

// config is what the flags ask for.
type config struct {
	size, iters, warmup int
	device, provider    string
	gidIndex            int
	port                int
	inline              bool
	threads             int
	hist                bool
	timeout             time.Duration
	server, client      string
	keyFile             string
	security            endpoint.Security
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, code := parseFlags(args, stderr)
	if code >= 0 {
		return code
	}
	return perftool.Run("mlx5kit-pingpong", cfg.server, cfg.client, stdout, stderr,
		func() error { return perftool.ProbeDevice(cfg.provider, cfg.device) },
		func(ln net.Listener) error { return serve(cfg, ln, stdout, stderr) },
		func() error { return dial(cfg, stdout) },
		func() error { return local(cfg, stdout) })
}

// parseFlags returns the configuration and -1, or an exit status.
func parseFlags(args []string, stderr io.Writer) (config, int) {
	var cfg config
	fs := flag.NewFlagSet("mlx5kit-pingpong", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.size, "size", 2, "message size in bytes")
	fs.IntVar(&cfg.iters, "iters", 1000, "measured iterations")
	fs.IntVar(&cfg.warmup, "warmup", 100, "iterations run before measuring")
	fs.BoolVar(&cfg.inline, "inline", true, "send the payload inline when it fits")
	fs.IntVar(&cfg.threads, "threads", 0, "with both ends in this process: 1 one goroutine, 2 one per end, 0 choose")
	fs.BoolVar(&cfg.hist, "hist", false, "also print the latency histogram")
	peer := perftool.Flags{Device: &cfg.device, Provider: &cfg.provider, GIDIndex: &cfg.gidIndex, Port: &cfg.port,
		Timeout: &cfg.timeout, Server: &cfg.server, Client: &cfg.client, KeyFile: &cfg.keyFile}
	peer.Register(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return cfg, 0 // the usage asked for, printed
		}
		return cfg, 2
	}
	bad := func(format string, a ...any) (config, int) {
		fmt.Fprintf(stderr, "mlx5kit-pingpong: "+format+"\n", a...)
		return cfg, 2
	}
	switch {
	case fs.NArg() != 0:
		return bad("unexpected arguments %q", fs.Args())
	case cfg.size < 0 || cfg.size > maxSize:
		return bad("-size %d: want 0 to %d", cfg.size, maxSize)
	case cfg.iters < 1 || cfg.iters > 1<<31:
		return bad("-iters %d: want 1 to %d", cfg.iters, 1<<31)
	case cfg.warmup < 0 || cfg.warmup > 1<<31:
		return bad("-warmup %d: want 0 to %d", cfg.warmup, 1<<31)
	case cfg.threads < 0 || cfg.threads > 2:
		return bad("-threads %d: want 0, 1 or 2", cfg.threads)
	}
	if msg := peer.Check(); msg != "" {
		return bad("%s", msg)
	}
	var msg string
	if cfg.security, msg = peer.Security(); msg != "" {
		return bad("%s", msg)
	}
	return cfg, -1
}

// openEnds opens the device cfg names and makes the named ends on it.
func openEnds(cfg config, names ...string) (*perftool.Setup, []*end, error) {
	return perftool.OpenEnds(cfg.provider, cfg.device, endConfig(cfg.size, cfg.inline, cfg.port, cfg.gidIndex, cfg.timeout), wrapper(cfg.inline), names...)
}

// result is what a run measured.
type result struct {
	size, iters int
	device      string // what ran it
	ends        string // how the ends were run
	payload     string // inline or SGE
	rtt         perftool.Latency
	counter     cycles.Info
}

// local runs both ends in this process on one device.
func local(cfg config, stdout io.Writer) error {
	s, made, err := openEnds(cfg, "ping", "pong")
	if err != nil {
		return err
	}
	defer s.Close()
	c, a, b := s.Context, made[0], made[1]
	if err := firstErr(a.connect(b.endpoint()), b.connect(a.endpoint())); err != nil {
		return err
	}
	res := &result{size: cfg.size, iters: cfg.iters, device: s.What, payload: payloadKind(a, cfg.inline), counter: cycles.Frequency()}
	threads := cfg.threads
	if threads == 0 {
		threads = 1
		if cpus, _ := affinity.CPUs(); !perftool.OnModel(c) && len(cpus) >= 2 {
			threads = 2
		}
	}
	pins, why := choosePins(c, threads)
	last := uint32(cfg.warmup + cfg.iters - 1)
	if threads == 1 {
		var runErr error
		note := pinned(pins[0], why, func() {
			runErr = res.rtt.Measure(cfg.warmup, cfg.iters, func(seq uint32) error { return roundTrip(a, b, seq) })
		})
		res.ends = "both in this process, one goroutine alternating between them" + note
		if runErr != nil {
			return runErr
		}
	} else {
		var abort atomic.Bool
		a.Abort, b.Abort = &abort, &abort
		var wg sync.WaitGroup
		var errB error
		var noteB string
		ready := make(chan struct{})
		wg.Add(1)
		go func() {
			defer wg.Done()
			noteB = pinned(pins[1], why, func() {
				close(ready)
				errB = serveLoop(cfg, b)
			})
			if errB != nil {
				abort.Store(true)
			}
		}()
		<-ready
		var errA error
		noteA := pinned(pins[0], why, func() {
			errA = res.rtt.Measure(cfg.warmup, cfg.iters, a.ping)
		})
		if errA != nil {
			abort.Store(true)
		}
		wg.Wait()
		res.ends = "both in this process, one goroutine each: ping" + noteA + ", pong" + noteB
		// The end that failed first says why; the other only saw the abort.
		for _, err := range []error{errA, errB} {
			if err != nil && !errors.Is(err, errAborted) {
				return err
			}
		}
		if err := firstErr(errA, errB); err != nil {
			return err
		}
	}
	if err := firstErr(a.drain(), b.drain(), a.verify(last), b.verify(last)); err != nil {
		return err
	}
	return report(stdout, res, cfg.hist)
}

// payloadKind says how an end sends its payload.
func payloadKind(x *end, inlineAsked bool) string {
	switch {
	case x.inline || x.size == 0:
		return "inline"
	case !inlineAsked:
		return "by SGE (-inline=false)"
	}
	return "by SGE (longer than the device's max inline)"
}

// serveLoop is the answering end: it waits for each message and sends it
// back, then waits for its last send to complete.
func serveLoop(cfg config, x *end) error {
	total := cfg.warmup + cfg.iters
	for i := 0; i < total; i++ {
		seq := uint32(i)
		if err := x.await(seq); err != nil {
			return err
		}
		if err := x.post(seq); err != nil {
			return err
		}
	}
	return x.drain()
}

// choosePins returns the CPU each of n measuring goroutines is pinned to
// (-1: not pinned) and, when they are not pinned, why. On hardware they get
// the first CPUs of MLX5KIT_CPUS (or of the allowed set). On the software
// HCA they are not pinned: a busy-polling loop there runs a round of the
// model after each empty poll (ctx.Context.Idle) and yields its processor
// when another goroutine is running one, and a goroutine locked to its
// thread pays a thread hand-off for every yield (measured: a median of
// tens of microseconds instead of about one).
func choosePins(c *ctx.Context, n int) ([]int, string) {
	pins := []int{-1, -1}
	if perftool.Emulated(c) {
		return pins, "on an emulated device the loop runs a round of the model after each empty poll"
	}
	if perftool.OnModel(c) {
		return pins, "on the software HCA the loop runs a round of the model after each empty poll"
	}
	cpus, err := affinity.CPUs()
	switch {
	case err != nil:
		return pins, err.Error()
	case len(cpus) < n:
		return pins, fmt.Sprintf("%d CPUs for %d goroutines", len(cpus), n)
	}
	copy(pins, cpus[:n])
	return pins, ""
}

// pinned runs fn on the calling goroutine bound to cpu (not bound when cpu
// < 0, for the reason why) and returns a note saying where it ran.
func pinned(cpu int, why string, fn func()) string {
	if cpu < 0 {
		fn()
		return " (not pinned: " + why + ")"
	}
	p, err := affinity.Pin(cpu)
	if err != nil {
		fn()
		return fmt.Sprintf(" (not pinned: %v)", err)
	}
	fn()
	_ = p.Release()
	return fmt.Sprintf(" (pinned to CPU %d)", cpu)
}

// params is what the client tells the server before the exchange.
type params struct {
	Magic               uint32
	Size, Iters, Warmup uint32
}

const paramsMagic = 0x4d58504e // "MXPN"

// check refuses parameters the client's flags could not have given, with
// an error matching perftool.ErrBadParams that names the field (the magic
// number is perftool.Accept's to check).
func (p params) check() error {
	switch {
	case p.Size > maxSize:
		return fmt.Errorf("%w: -size %d: want 0 to %d", perftool.ErrBadParams, p.Size, maxSize)
	case p.Iters < 1 || p.Iters > 1<<31:
		return fmt.Errorf("%w: -iters %d: want 1 to %d", perftool.ErrBadParams, p.Iters, 1<<31)
	case p.Warmup > 1<<31:
		return fmt.Errorf("%w: -warmup %d: want 0 to %d", perftool.ErrBadParams, p.Warmup, 1<<31)
	}
	return nil
}

// serve runs the answering end for one client that connects to ln; the
// connections it refuses before that one are reported on stderr.
func serve(cfg config, ln net.Listener, stdout, stderr io.Writer) error {
	var p params
	conn, err := perftool.Accept(ln, cfg.timeout, cfg.security, paramsMagic, &p, func() error { return p.check() }, perftool.Refusals(stderr, "mlx5kit-pingpong"))
	if err != nil {
		return err
	}
	defer conn.Close()
	cfg.size, cfg.iters, cfg.warmup = int(p.Size), int(p.Iters), int(p.Warmup)
	s, made, err := openEnds(cfg, "server")
	if err != nil {
		return err
	}
	defer s.Close()
	c, x := s.Context, made[0]
	if err := handshake(cfg, conn, endpoint.AcceptSide, c, x); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "device:  %s\nanswering %d+%d messages of %d bytes from %v\n", s.What, cfg.warmup, cfg.iters, cfg.size, conn.RemoteAddr())
	var loopErr error
	pins, why := choosePins(c, 1)
	note := pinned(pins[0], why, func() { loopErr = serveLoop(cfg, x) })
	failed := loopErr
	if failed == nil {
		failed = x.verify(uint32(cfg.warmup + cfg.iters - 1))
	}
	if err := firstErr(failed, barrier(cfg, conn, failed)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "done%s\n", note)
	return nil
}

// dial runs the measuring end against the server at cfg.client.
func dial(cfg config, stdout io.Writer) error {
	p := params{Magic: paramsMagic, Size: uint32(cfg.size), Iters: uint32(cfg.iters), Warmup: uint32(cfg.warmup)}
	conn, err := perftool.Dial(cfg.client, cfg.timeout, cfg.security, p)
	if err != nil {
		return err
	}
	defer conn.Close()
	s, made, err := openEnds(cfg, "client")
	if err != nil {
		return err
	}
	defer s.Close()
	c, x := s.Context, made[0]
	if err := handshake(cfg, conn, endpoint.DialSide, c, x); err != nil {
		return err
	}
	res := &result{size: cfg.size, iters: cfg.iters, device: s.What, payload: payloadKind(x, cfg.inline), counter: cycles.Frequency()}
	pins, why := choosePins(c, 1)
	var loopErr error
	note := pinned(pins[0], why, func() {
		loopErr = res.rtt.Measure(cfg.warmup, cfg.iters, x.ping)
	})
	failed := loopErr
	if failed == nil {
		failed = firstErr(x.drain(), x.verify(uint32(cfg.warmup+cfg.iters-1)))
	}
	if err := firstErr(failed, barrier(cfg, conn, failed)); err != nil {
		return err
	}
	res.ends = "client of " + conn.RemoteAddr().String() + note
	return report(stdout, res, cfg.hist)
}

// handshake swaps endpoints over conn (this end on side of it), connects
// the queue pair and waits until the peer's is connected too. From then on
// the waits look at conn for a peer gone (End.Peer).
func handshake(cfg config, conn net.Conn, side endpoint.Side, c *ctx.Context, x *end) error {
	if err := perftool.Handshake(conn, side, cfg.security, cfg.timeout, c, x.QP.QPN(), x.endpoint(), x.connect); err != nil {
		return err
	}
	x.Peer = conn
	return nil
}

// sameModel refuses a peer the software HCA cannot reach (see
// perftool.SameModel).
func sameModel(c *ctx.Context, x *end, peer endpoint.Endpoint) error {
	return perftool.SameModel(c, x.QP.QPN(), peer)
}

// barrier tells the peer whether this end is done (failed nil) or failed,
// and waits for the peer to say the same: a peer still waiting for a
// message then stops with perftool.ErrPeerFailed rather than find the
// connection closed.
func barrier(cfg config, conn net.Conn, failed error) error {
	return perftool.Sync(conn, cfg.timeout, failed)
}

// report prints the header and the table.
func report(w io.Writer, r *result, hist bool) error {
	h := &r.rtt.H
	sum := r.rtt.Summarize(r.counter, 2)
	var b strings.Builder
	fmt.Fprintf(&b, "RC ping-pong: RDMA_WRITE_IMM, signaled, BlueFlame, payload %s, busy polling\n", r.payload)
	perftool.WriteSetting(&b, r.device, r.ends, r.counter)
	fmt.Fprintf(&b, "latency: half the round trip, in microseconds (as ib_write_lat)\n")
	fmt.Fprintf(&b, "%8s %12s %12s %16s %12s %12s %14s %12s\n",
		"#bytes", "#iterations", "t_min[usec]", "t_typical[usec]", "t_avg[usec]", "99%[usec]", "99.9%[usec]", "t_max[usec]")
	fmt.Fprintf(&b, "%8d %12d %12.2f %16.2f %12.2f %12.2f %14.2f %12.2f\n",
		r.size, sum.Count, sum.Min, sum.Typical, sum.Avg, sum.Percentile99, sum.Percentile999, sum.Max)
	if hist {
		b.WriteString("\nround trips (µs):\n")
		if err := h.WriteText(&b, histogram.Scale{Factor: r.counter.Nanoseconds(1) / 1000, Unit: "µs"}); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// firstErr returns the first non-nil error.
var firstErr = perftool.FirstErr
