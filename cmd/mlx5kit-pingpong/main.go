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
//	mlx5kit-pingpong [flags]                  both ends in this process
//	mlx5kit-pingpong -server :18515 [flags]   wait for a client
//	mlx5kit-pingpong -client host:18515 [flags]
//
// The two ends swap their endpoints (QPN, LID or GID, PSN, MTU, and the
// address and rkey of their receive area) over TCP; the client's -size,
// -iters and -warmup are the ones used. With neither -server nor -client
// both ends run in this process on one device, two queue pairs in
// loopback: on hardware one goroutine per end, each pinned to its own CPU
// (MLX5KIT_CPUS picks them), on the software HCA one goroutine that plays
// both ends in turn while the model's engine runs on the other CPU.
//
// With no mlx5 device (or -provider sim) it runs on the software HCA and
// says so: the numbers are then those of the model, a goroutine polling
// doorbell records, not of a NIC. The software HCA lives inside one process,
// so -server and -client in two processes cannot reach each other on it.
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
//	-provider p    mlx5 or sim (default: mlx5 when a device is present)
//	-gid-index n   local GID table entry on RoCE (default: MLX5KIT_GID_INDEX, or a RoCE v2 GID)
//	-ib-port n     local port (default 1)
//	-inline        send the payload inline when it fits (default true)
//	-threads n     with both ends here: 1 one goroutine, 2 one per end, 0 choose (default 0)
//	-hist          also print the latency histogram
//	-timeout d     give up when a message or the exchange takes longer (default 10s)
package main

import (
	"context"
	"encoding/binary"
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

	"github.com/mlx5kit/mlx5kit"
	"github.com/mlx5kit/mlx5kit/cgo"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/affinity"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/histogram"
	"github.com/mlx5kit/mlx5kit/internal/scenario"
	"github.com/mlx5kit/mlx5kit/sim"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

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
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, code := parseFlags(args, stderr)
	if code >= 0 {
		return code
	}
	var err error
	switch {
	case cfg.server != "":
		var ln net.Listener
		if ln, err = net.Listen("tcp", cfg.server); err == nil {
			fmt.Fprintf(stdout, "listening on %v\n", ln.Addr())
			err = serve(cfg, ln, stdout)
		}
	case cfg.client != "":
		err = dial(cfg, stdout)
	default:
		err = local(cfg, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "mlx5kit-pingpong: %v\n", err)
		return 1
	}
	return 0
}

// parseFlags returns the configuration and -1, or an exit status.
func parseFlags(args []string, stderr io.Writer) (config, int) {
	var cfg config
	fs := flag.NewFlagSet("mlx5kit-pingpong", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.IntVar(&cfg.size, "size", 2, "message size in bytes")
	fs.IntVar(&cfg.iters, "iters", 1000, "measured iterations")
	fs.IntVar(&cfg.warmup, "warmup", 100, "iterations run before measuring")
	fs.StringVar(&cfg.device, "device", "", "device to open (default: the first)")
	fs.StringVar(&cfg.provider, "provider", "", "mlx5 or sim (default: mlx5 when a device is present, else sim)")
	fs.IntVar(&cfg.gidIndex, "gid-index", -1, "local GID table entry on RoCE (default: $"+scenario.EnvGIDIndex+", or a RoCE v2 GID)")
	fs.IntVar(&cfg.port, "ib-port", 1, "local port")
	fs.BoolVar(&cfg.inline, "inline", true, "send the payload inline when it fits")
	fs.IntVar(&cfg.threads, "threads", 0, "with both ends in this process: 1 one goroutine, 2 one per end, 0 choose")
	fs.BoolVar(&cfg.hist, "hist", false, "also print the latency histogram")
	fs.DurationVar(&cfg.timeout, "timeout", 10*time.Second, "give up when a message or the exchange takes longer")
	fs.StringVar(&cfg.server, "server", "", "listen on this TCP address (e.g. :18515) for a client")
	fs.StringVar(&cfg.client, "client", "", "connect to a server at HOST:PORT")
	if err := fs.Parse(args); err != nil {
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
		return bad("-iters %d: want at least 1", cfg.iters)
	case cfg.warmup < 0 || cfg.warmup > 1<<31:
		return bad("-warmup %d: want 0 or more", cfg.warmup)
	case cfg.provider != "" && cfg.provider != ctx.ProviderHardware && cfg.provider != ctx.ProviderSoftware:
		return bad("-provider %q: want %s or %s", cfg.provider, ctx.ProviderHardware, ctx.ProviderSoftware)
	case cfg.gidIndex > 255:
		return bad("-gid-index %d: want 0 to 255", cfg.gidIndex)
	case cfg.port < 1 || cfg.port > 255:
		return bad("-ib-port %d: want 1 to 255", cfg.port)
	case cfg.threads < 0 || cfg.threads > 2:
		return bad("-threads %d: want 0, 1 or 2", cfg.threads)
	case cfg.timeout <= 0:
		return bad("-timeout %v: want a positive duration", cfg.timeout)
	case cfg.server != "" && cfg.client != "":
		return bad("-server and -client exclude each other")
	}
	return cfg, -1
}

// open opens the device the configuration names and returns what it is:
// its description and, on the software HCA, a note saying so and why.
func open(cfg config) (*ctx.Context, string, error) {
	c, err := mlx5kit.Open(mlx5kit.Options{Provider: cfg.provider, Device: cfg.device})
	if err != nil {
		return nil, "", err
	}
	what := c.String()
	if c.Kind() == ctx.KindSoftware {
		why := "asked for with -provider sim"
		switch {
		case cfg.provider == "" && os.Getenv(ctx.EnvProvider) != "":
			why = "asked for with " + ctx.EnvProvider + "=" + os.Getenv(ctx.EnvProvider)
		case cfg.provider == "":
			why = "no mlx5 device: " + cgo.NoDeviceReason()
		}
		what += "\nnote:    the software HCA, not a NIC: the numbers are those of the model (" + why + ")"
	}
	return c, what, nil
}

// gidIndex resolves the GID index: the flag, else MLX5KIT_GID_INDEX, else
// one picked from the port's table.
func gidIndex(cfg config, c *ctx.Context) (uint8, error) {
	if cfg.gidIndex >= 0 {
		return uint8(cfg.gidIndex), nil
	}
	o, err := scenario.FromEnv()
	if err != nil {
		return 0, err
	}
	if o.GIDIndex >= 0 {
		return uint8(o.GIDIndex), nil
	}
	return scenario.PickGIDIndex(c, uint8(cfg.port))
}

// newEndOn creates an end on c as cfg says.
func newEndOn(name string, c *ctx.Context, cfg config) (*end, error) {
	gid, err := gidIndex(cfg, c)
	if err != nil {
		return nil, err
	}
	x, err := newEnd(name, c, cfg.size, cfg.inline, uint8(cfg.port), gid, cfg.timeout)
	if err != nil {
		return nil, fmt.Errorf("%s: set up on %v: %w", name, c, err)
	}
	return x, nil
}

// result is what a run measured.
type result struct {
	size, iters int
	device      string // what ran it
	ends        string // how the ends were run
	payload     string // inline or SGE
	rtt         histogram.Histogram
	counter     cycles.Info
}

// local runs both ends in this process on one device.
func local(cfg config, stdout io.Writer) error {
	c, what, err := open(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	a, err := newEndOn("ping", c, cfg)
	if err != nil {
		return err
	}
	defer a.close()
	b, err := newEndOn("pong", c, cfg)
	if err != nil {
		return err
	}
	defer b.close()
	if err := firstErr(a.connect(b.endpoint()), b.connect(a.endpoint())); err != nil {
		return err
	}
	res := &result{size: cfg.size, iters: cfg.iters, device: what, payload: payloadKind(a, cfg.inline), counter: cycles.Frequency()}
	threads := cfg.threads
	if threads == 0 {
		threads = 1
		if cpus, _ := affinity.CPUs(); c.Kind() == ctx.KindHardware && len(cpus) >= 2 {
			threads = 2
		}
	}
	pins, why := choosePins(c, threads)
	last := uint32(cfg.warmup + cfg.iters - 1)
	if threads == 1 {
		var runErr error
		note := pinned(pins[0], why, func() {
			runErr = measure(cfg, &res.rtt, func(seq uint32) error { return roundTrip(a, b, seq) })
		})
		res.ends = "both in this process, one goroutine alternating between them" + note
		if runErr != nil {
			return runErr
		}
	} else {
		var abort atomic.Bool
		a.abort, b.abort = &abort, &abort
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
			errA = measure(cfg, &res.rtt, func(seq uint32) error {
				if err := a.post(seq); err != nil {
					return err
				}
				return a.await(seq)
			})
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

// measure runs warmup+iters iterations of step and records the round trip
// of each measured one in ticks of the cycle counter.
func measure(cfg config, h *histogram.Histogram, step func(seq uint32) error) error {
	total := cfg.warmup + cfg.iters
	for i := 0; i < total; i++ {
		t0 := cycles.Start()
		if err := step(uint32(i)); err != nil {
			return err
		}
		t1 := cycles.Stop()
		if i >= cfg.warmup {
			h.Record(t1 - t0)
		}
	}
	return nil
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
// HCA they are not pinned: a busy-polling loop there yields its processor
// after each empty poll so that the model's engine goroutine runs, and a
// goroutine locked to its thread pays a thread hand-off for every yield
// (measured: a median of tens of microseconds instead of about one).
func choosePins(c *ctx.Context, n int) ([]int, string) {
	pins := []int{-1, -1}
	if c.Kind() == ctx.KindSoftware {
		return pins, "on the software HCA the loop yields to the model's engine after each empty poll"
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

// serve runs the answering end for one client that connects to ln.
func serve(cfg config, ln net.Listener, stdout io.Writer) error {
	defer ln.Close()
	if d, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
		_ = d.SetDeadline(time.Now().Add(10 * cfg.timeout))
	}
	conn, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(cfg.timeout))
	var p params
	if err := binary.Read(conn, binary.BigEndian, &p); err != nil {
		return fmt.Errorf("read the client's parameters: %w", err)
	}
	if p.Magic != paramsMagic || p.Size > maxSize || p.Iters < 1 || p.Iters > 1<<31 || p.Warmup > 1<<31 {
		return fmt.Errorf("the client sent bad parameters %+v", p)
	}
	cfg.size, cfg.iters, cfg.warmup = int(p.Size), int(p.Iters), int(p.Warmup)
	c, what, err := open(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	x, err := newEndOn("server", c, cfg)
	if err != nil {
		return err
	}
	defer x.close()
	if err := handshake(cfg, conn, c, x); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "device:  %s\nanswering %d+%d messages of %d bytes from %v\n", what, cfg.warmup, cfg.iters, cfg.size, conn.RemoteAddr())
	var loopErr error
	pins, why := choosePins(c, 1)
	note := pinned(pins[0], why, func() { loopErr = serveLoop(cfg, x) })
	if loopErr != nil {
		return loopErr
	}
	if err := firstErr(x.verify(uint32(cfg.warmup+cfg.iters-1)), barrier(cfg, conn)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "done%s\n", note)
	return nil
}

// dial runs the measuring end against the server at cfg.client.
func dial(cfg config, stdout io.Writer) error {
	d := net.Dialer{Timeout: cfg.timeout}
	conn, err := d.Dial("tcp", cfg.client)
	if err != nil {
		return err
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(cfg.timeout))
	p := params{Magic: paramsMagic, Size: uint32(cfg.size), Iters: uint32(cfg.iters), Warmup: uint32(cfg.warmup)}
	if err := binary.Write(conn, binary.BigEndian, p); err != nil {
		return fmt.Errorf("send the parameters: %w", err)
	}
	c, what, err := open(cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	x, err := newEndOn("client", c, cfg)
	if err != nil {
		return err
	}
	defer x.close()
	if err := handshake(cfg, conn, c, x); err != nil {
		return err
	}
	res := &result{size: cfg.size, iters: cfg.iters, device: what, payload: payloadKind(x, cfg.inline), counter: cycles.Frequency()}
	pins, why := choosePins(c, 1)
	var loopErr error
	note := pinned(pins[0], why, func() {
		loopErr = measure(cfg, &res.rtt, func(seq uint32) error {
			if err := x.post(seq); err != nil {
				return err
			}
			return x.await(seq)
		})
	})
	if loopErr != nil {
		return loopErr
	}
	res.ends = "client of " + conn.RemoteAddr().String() + note
	if err := firstErr(x.drain(), x.verify(uint32(cfg.warmup+cfg.iters-1)), barrier(cfg, conn)); err != nil {
		return err
	}
	return report(stdout, res, cfg.hist)
}

// handshake swaps endpoints over conn, connects the queue pair and waits
// until the peer's is connected too, so that no message reaches a queue
// pair that is not ready for it.
func handshake(cfg config, conn net.Conn, c *ctx.Context, x *end) error {
	tctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	peer, err := endpoint.Exchange(tctx, conn, x.endpoint())
	if err != nil {
		return fmt.Errorf("exchange endpoints: %w", err)
	}
	if err := sameModel(c, x, peer); err != nil {
		return err
	}
	if err := x.connect(peer); err != nil {
		return err
	}
	return barrier(cfg, conn)
}

// sameModel refuses a peer the software HCA cannot reach: the model lives
// inside one process, so a peer in another process has a queue pair this
// process's model does not know (or one with this end's own number).
func sameModel(c *ctx.Context, x *end, peer endpoint.Endpoint) error {
	f := sim.FromContext(c)
	if f == nil {
		return nil
	}
	if _, err := f.QPState(peer.QPN); err != nil || peer.QPN == x.qp.QPN() {
		return fmt.Errorf("the peer's QP %#x is not on this process's software HCA: the model lives inside one process, so run both ends in one (no -server/-client) or use a NIC", peer.QPN)
	}
	return nil
}

// barrier sends one byte and waits for the peer's.
func barrier(cfg config, conn net.Conn) error {
	_ = conn.SetDeadline(time.Now().Add(cfg.timeout))
	if _, err := conn.Write([]byte{1}); err != nil {
		return fmt.Errorf("synchronize with the peer: %w", err)
	}
	var b [1]byte
	if _, err := io.ReadFull(conn, b[:]); err != nil {
		return fmt.Errorf("synchronize with the peer: %w", err)
	}
	return nil
}

// report prints the header and the table.
func report(w io.Writer, r *result, hist bool) error {
	us := func(ticks float64) float64 { return r.counter.Nanoseconds(ticks) / 2 / 1000 }
	h := &r.rtt
	var b strings.Builder
	fmt.Fprintf(&b, "RC ping-pong: RDMA_WRITE_IMM, signaled, BlueFlame, payload %s, busy polling\n", r.payload)
	fmt.Fprintf(&b, "device:  %s\n", r.device)
	fmt.Fprintf(&b, "ends:    %s\n", r.ends)
	fmt.Fprintf(&b, "counter: %v\n", r.counter)
	fmt.Fprintf(&b, "latency: half the round trip, in microseconds (as ib_write_lat)\n")
	fmt.Fprintf(&b, "%8s %12s %12s %16s %12s %12s %14s %12s\n",
		"#bytes", "#iterations", "t_min[usec]", "t_typical[usec]", "t_avg[usec]", "99%[usec]", "99.9%[usec]", "t_max[usec]")
	fmt.Fprintf(&b, "%8d %12d %12.2f %16.2f %12.2f %12.2f %14.2f %12.2f\n",
		r.size, h.Count(), us(float64(h.Min())), us(float64(h.Percentile(50))), us(h.Mean()),
		us(float64(h.Percentile(99))), us(float64(h.Percentile(99.9))), us(float64(h.Max())))
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
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
