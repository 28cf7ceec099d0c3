// Command mlx5kit-perf measures RC latency and bandwidth the way perftest's
// ib_write_lat, ib_write_bw, ib_send_lat, ib_read_lat and ib_read_bw do, and
// prints tables in their format, on an mlx5 NIC or on the software HCA.
//
// Usage:
//
//	mlx5kit-perf MODE [flags]                                  both ends in this process
//	mlx5kit-perf MODE -server :18515 -key-file k [flags]       wait for a client
//	mlx5kit-perf MODE -client host:18515 -key-file k [flags]   measure against a server
//
// # Modes
//
//   - write_lat: RDMA_WRITE_IMM ping-pong; one end writes, the other waits
//     for the write's completion (ib_write_lat polls the last byte of the
//     buffer instead) and writes back. The latency is half the round trip.
//   - send_lat: SEND/RECV ping-pong, half the round trip.
//   - read_lat: one RDMA_READ at a time; the latency is the whole read.
//   - write_bw: a stream of RDMA_WRITEs, -qd in flight.
//   - read_bw: a stream of RDMA_READs, -qd in flight.
//
// Latency tests post one signaled WQE at a time through BlueFlame, inline
// when the payload fits in -inline bytes, and busy-poll the completion
// queue. They print t_min, t_max, t_typical (the median), t_avg, t_stdev and
// the 99th and 99.9th percentiles in microseconds. Bandwidth tests keep -qd
// WQEs in flight, posted in batches of up to 16 with one doorbell each and
// only the last WQE of a batch signaled; they print BW peak and BW average
// in MB/s (MB = 2^20 bytes, as perftest) and the message rate in Mpps. BW
// average is the bytes moved over the time from the first doorbell to the
// last completion; BW peak is the best rate over any run of up to 256
// consecutive batches, from the doorbell of the first to the completion of
// the last.
//
// The header says which provider and device ran the test. With no mlx5
// device (or -provider sim) the test runs on the software HCA and says so:
// the numbers are then those of the model, a goroutine polling doorbell
// records, not of a NIC. The software HCA lives inside one process, so
// -server and -client in two processes cannot reach each other on it; with
// neither flag both ends run in this process, one goroutine playing both in
// turn while the model's engine (or the NIC) does the rest.
//
// The two ends swap their endpoints (QPN, LID or GID, PSN, MTU, and the
// address and rkey of their buffers) over TCP, after each has proved to the
// other that it holds the same key (-key-file, or $MLX5KIT_KEY: at least 16
// random bytes); without a key both ends must be on this host. The
// client's mode, sizes and counts are the ones used. Data is checked: latency tests stamp each
// message with its sequence number and check it on arrival, and after each
// size the end that received data compares its whole buffer with the
// payload and checks that nothing was written past it.
//
// The measured loops allocate nothing per iteration.
//
// # Flags
//
//	-size n        message size in bytes (default 2, 65536 for bandwidth)
//	-a             every size from 2 to -max-size in powers of two
//	-max-size n    the largest size of -a (default 8388608)
//	-iters n       iterations per size (default 1000, 5000 for bandwidth)
//	-warmup n      iterations run before measuring each size (default 100)
//	-qd n          bandwidth tests: WQEs in flight (default 64)
//	-inline n      payloads of up to n bytes go inline (default 220, 0: never)
//	-device name   device to open (default: the first)
//	-provider p    mlx5 or sim (default: mlx5 when a device is present)
//	-server addr   listen on addr (e.g. :18515) for one client
//	-client h:p    connect to a server
//	-gid-index n   local GID table entry on RoCE (default: MLX5KIT_GID_INDEX, or a RoCE v2 GID)
//	-ib-port n     local port (default 1)
//	-timeout d     give up when a message or the exchange takes longer (default 10s)
//	-key-file f    the pre-shared key of -server and -client (default: $MLX5KIT_KEY)
//
// perftest's one-letter names work too: -s (size), -n (iters), -t (qd),
// -I (inline), -d (device), -i (ib-port), -x (gid-index); -a is the same
// in both.
package main

import (
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strings"
	"time"

	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
)

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// maxSize is the largest message, perftest's limit for -a.
const maxSize = 8 << 20

// mode is the test run.
type mode uint32

// The modes, in the order of modeNames.
const (
	writeLat mode = iota
	writeBW
	sendLat
	readLat
	readBW
	numModes
)

var modeNames = [numModes]string{"write_lat", "write_bw", "send_lat", "read_lat", "read_bw"}

func (m mode) String() string {
	if m < numModes {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint32(m))
}

// latency reports whether the mode measures latency (else bandwidth).
func (m mode) latency() bool { return m == writeLat || m == sendLat || m == readLat }

// pingPong reports whether both ends take turns sending.
func (m mode) pingPong() bool { return m == writeLat || m == sendLat }

// describe says what the mode posts.
func (m mode) describe() string {
	switch m {
	case writeLat:
		return "RC RDMA_WRITE_IMM ping-pong, signaled, BlueFlame, busy polling"
	case sendLat:
		return "RC SEND/RECV ping-pong, signaled, BlueFlame, busy polling"
	case readLat:
		return "RC RDMA_READ, one at a time, signaled, BlueFlame, busy polling"
	case writeBW:
		return "RC RDMA_WRITE stream"
	}
	return "RC RDMA_READ stream"
}

func parseMode(s string) (mode, bool) {
	for i, n := range modeNames {
		if s == n {
			return mode(i), true
		}
	}
	return 0, false
}

// config is what the command line asks for.
type config struct {
	mode             mode
	size, maxSize    int
	all              bool
	iters, warmup    int
	qd, inline       int
	device, provider string
	gidIndex, port   int
	timeout          time.Duration
	server, client   string
	keyFile          string
	security         endpoint.Security
}

// sizes returns the message sizes to run.
func (c config) sizes() []int {
	if !c.all {
		return []int{c.size}
	}
	var s []int
	for n := 2; n <= c.maxSize; n *= 2 {
		s = append(s, n)
	}
	return s
}

// bufferSize is the size of each end's areas.
func (c config) bufferSize() int {
	if c.all {
		return c.maxSize
	}
	return c.size
}

// sendDepth is the send queue size of each end.
func (c config) sendDepth() int {
	if c.mode.latency() {
		return 16
	}
	return c.qd
}

func run(args []string, stdout, stderr io.Writer) int {
	cfg, code := parseFlags(args, stderr)
	if code >= 0 {
		return code
	}
	return perftool.Run("mlx5kit-perf", cfg.server, cfg.client, stdout, stderr,
		func(ln net.Listener) error { return serve(cfg, ln, stdout) },
		func() error { return dial(cfg, stdout) },
		func() error { return local(cfg, stdout) })
}

const usage = "usage: mlx5kit-perf write_lat|write_bw|send_lat|read_lat|read_bw [flags]"

// parseFlags returns the configuration and -1, or an exit status.
func parseFlags(args []string, stderr io.Writer) (config, int) {
	var cfg config
	bad := func(format string, a ...any) (config, int) {
		fmt.Fprintf(stderr, "mlx5kit-perf: "+format+"\n", a...)
		return cfg, 2
	}
	if len(args) == 0 || strings.HasPrefix(args[0], "-") {
		if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
			fmt.Fprintln(stderr, usage)
			return cfg, 0
		}
		return bad("%s", usage)
	}
	m, ok := parseMode(args[0])
	if !ok {
		return bad("unknown mode %q; %s", args[0], usage)
	}
	cfg.mode = m
	fs := flag.NewFlagSet("mlx5kit-perf "+m.String(), flag.ContinueOnError)
	fs.SetOutput(stderr)
	defSize, defIters := 2, 1000
	if !m.latency() {
		defSize, defIters = 65536, 5000
	}
	fs.IntVar(&cfg.size, "size", defSize, "message size in bytes")
	fs.BoolVar(&cfg.all, "a", false, "every size from 2 to -max-size in powers of two")
	fs.IntVar(&cfg.maxSize, "max-size", maxSize, "the largest size of -a")
	fs.IntVar(&cfg.iters, "iters", defIters, "iterations per size")
	fs.IntVar(&cfg.warmup, "warmup", 100, "iterations run before measuring each size")
	fs.IntVar(&cfg.qd, "qd", 64, "bandwidth tests: WQEs in flight")
	fs.IntVar(&cfg.inline, "inline", 220, "payloads of up to this many bytes go inline (0: never)")
	cfg.peerFlags().Register(fs)
	// perftest's one-letter names for the same flags (the same values).
	for _, a := range [][2]string{{"s", "size"}, {"n", "iters"}, {"t", "qd"}, {"I", "inline"},
		{"d", "device"}, {"i", "ib-port"}, {"x", "gid-index"}} {
		fs.Var(fs.Lookup(a[1]).Value, a[0], "same as -"+a[1]+" (perftest's name)")
	}
	if err := fs.Parse(args[1:]); err != nil {
		if err == flag.ErrHelp {
			return cfg, 0
		}
		return cfg, 2
	}
	if msg := cfg.check(); msg != "" {
		return bad("%s", msg)
	}
	if fs.NArg() != 0 {
		return bad("unexpected arguments %q", fs.Args())
	}
	var msg string
	if cfg.security, msg = cfg.peerFlags().Security(); msg != "" {
		return bad("%s", msg)
	}
	return cfg, -1
}

// check returns what is wrong with the configuration, or "".
func (c config) check() string {
	switch {
	case c.mode >= numModes:
		return fmt.Sprintf("unknown mode %d", uint32(c.mode))
	case c.size < 1 || c.size > maxSize:
		return fmt.Sprintf("-size %d: want 1 to %d", c.size, maxSize)
	case c.maxSize < 2 || c.maxSize > maxSize:
		return fmt.Sprintf("-max-size %d: want 2 to %d", c.maxSize, maxSize)
	case c.iters < 1 || c.iters > 1<<30:
		return fmt.Sprintf("-iters %d: want 1 to %d", c.iters, 1<<30)
	case c.warmup < 0 || c.warmup > 1<<30:
		return fmt.Sprintf("-warmup %d: want 0 to %d", c.warmup, 1<<30)
	case c.qd < 1 || c.qd > 4096:
		return fmt.Sprintf("-qd %d: want 1 to 4096", c.qd)
	case c.inline < 0 || c.inline > 4096:
		return fmt.Sprintf("-inline %d: want 0 to 4096", c.inline)
	}
	return c.peerFlags().Check()
}

// peerFlags points at the fields of the flags every measuring command
// takes.
func (c *config) peerFlags() perftool.Flags {
	return perftool.Flags{Device: &c.device, Provider: &c.provider, GIDIndex: &c.gidIndex, Port: &c.port,
		Timeout: &c.timeout, Server: &c.server, Client: &c.client, KeyFile: &c.keyFile}
}

// firstErr returns the first non-nil error.
var firstErr = perftool.FirstErr
