// Command mlx5kit-perf measures RC, UD and DC latency and bandwidth the way perftest's
// ib_write_lat, ib_write_bw, ib_send_lat, ib_send_bw, ib_read_lat,
// ib_read_bw, ib_atomic_lat and ib_atomic_bw do, takes their command line and prints
// their report, on an mlx5 NIC or on the software HCA.
//
// Usage:
//
//	mlx5kit-perf MODE [flags]                       both ends in this process
//	mlx5kit-perf MODE [flags] --server :18515       wait for a client
//	mlx5kit-perf MODE [flags] SERVER                measure against SERVER:18515 (-p)
//	ib_write_lat [flags]                            a link named after perftest's program:
//	ib_write_lat [flags] SERVER                     perftest's roles (no SERVER: wait on -p)
//
// MODE is write_lat, write_bw, send_lat, send_bw, read_lat, read_bw,
// atomic_lat or atomic_bw, or perftest's program name for it
// (ib_write_lat).
//
// # Modes
//
//   - write_lat: RDMA_WRITE_IMM ping-pong; one end writes, the other waits
//     for the write's completion (ib_write_lat polls the last byte of the
//     buffer instead) and writes back. The latency is half the round trip.
//   - send_lat: SEND/RECV ping-pong, half the round trip.
//   - read_lat: one RDMA_READ at a time; the latency is the whole read.
//   - atomic_lat: one 8-byte atomic at a time (-A FETCH_AND_ADD, the
//     default, or CMP_AND_SWAP) on a counter in the peer's memory.
//   - write_bw, read_bw, atomic_bw: a stream of RDMA_WRITEs, RDMA_READs or
//     atomics, -t in flight.
//   - send_bw: a stream of SENDs, -t in flight, into receives the peer
//     reposts as each completes (-r of them posted, default 512); the
//     receiving end reports its receive rate without a peak, as perftest's.
//
// With -b (bandwidth modes) both ends stream at once, each in its own
// loop (both in this process: a goroutine each), and each reports the
// sum of the two directions' rates, as perftest does. With -e the waits
// sleep on the CQ's completion channel (package completion) after an
// empty poll instead of spinning. -m sets the path MTU (refused above the
// port's active MTU, where perftest lowers it) and -T the traffic class of
// the path's GRH (RoCE; a path by LID has none, and the report says so).
//
// Latency tests post one signaled WQE at a time through BlueFlame, inline
// when the payload fits in -I bytes, and busy-poll the completion queue.
// Bandwidth tests keep -t WQEs in flight, posted in batches (-Q or -l,
// default 16) with one doorbell each and only the last WQE of a batch
// signaled. BW average is the bytes moved over the time from the first
// doorbell to the last completion; BW peak is the best rate over any
// window from a batch's doorbell to one of the next 256 completions,
// counting the messages completed by then (over several queue pairs,
// batches complete out of the order they were posted).
//
// # Report
//
// The first lines say which mode, provider and device ran the test (with no
// mlx5 device, or --provider sim, the software HCA: the numbers are then
// those of the model, a goroutine polling doorbell records, not of a NIC),
// how the ends ran and the cycle counter. Then come perftest's information
// block, its local and remote address lines and its table, in perftest's
// header and line formats (src/perftest_parameters.h): BW peak and BW
// average in MiB/s (Gb/s with --report_gbits) and MsgRate in Mpps;
// t_min, t_max, t_typical, t_avg, t_stdev and the 99% and 99.9% percentiles
// in microseconds by perftest's rules (the samples sorted, the two largest
// left out); with -D, t_avg and tps average, then the two percentiles
// perftest leaves out. --output prints only the number, --out_json writes
// perftest's JSON file.
//
// The two ends talk over TCP. With a key (--key-file, or $MLX5KIT_KEY: at
// least 16 random bytes) each first proves to the other that it holds the
// same key; only then does the client send its parameters (mode, sizes,
// counts: the ones used), sealed, and the server open its queue pairs and
// buffers, and the ends swap their endpoints (QPN, LID or GID, PSN, MTU,
// and the address and rkey of their buffers). Without a key both ends must
// be on this host. A server greets up to 128 connections at once (past
// that it closes the one that has waited longest without proving the
// key, of a host holding more than a quarter of them if one does), keeps waiting (ten --timeout in all) after a connection it refuses
// (another key or none, closed, silent for --timeout, and with a key
// garbage or a perftest client), printing one line for each on stderr, and
// serves the first good client; a client of another tool, and without a
// key garbage or a perftest client, ends it with a message. On the
// software HCA a
// server and a client join the fabric shared by the processes that name it
// ($MLX5KIT_SIM_FABRIC, "default" when unset), so two processes of this
// host reach each other on it. Data is checked: latency tests stamp each message
// with its sequence number and check it on arrival, after each size the
// end that received data compares its whole buffer with the payload and
// checks that nothing was written past it, and the atomic modes check the
// counter.
//
// The measured loops allocate nothing per iteration.
//
// # Flags
//
// perftest's syntax (getopt's: -s 8, -s8, --size 8, --size=8, -aF; the
// server's address anywhere) and names:
//
//	-d, --ib-dev name        device (default: the first)
//	-i, --ib-port n          local port (default 1)
//	-x, --gid-index n        local GID table entry on RoCE (default: MLX5KIT_GID_INDEX, or a RoCE v2 GID)
//	-s, --size n             message size (default 2, 65536 for bandwidth, 8 for atomics)
//	-a, --all                every size from 2 to --max-size in powers of two
//	-n, --iters n            iterations per size (default 1000, 5000 for bandwidth)
//	                         (at most 2^30, and records within half the available memory)
//	-I, --inline_size n      payloads of up to n bytes go inline (default 220; send_lat 236,
//	                         UD 188, DC 150, as perftest's latency tests; its bandwidth
//	                         tests default to 0; 0: never)
//	-t, --tx-depth n         bandwidth tests: WQEs in flight (default 64)
//	-F, --CPU-freq           accepted; the counter's frequency is measured
//	-p, --port n             TCP port of the exchange (default 18515)
//	-D, --duration s         run for s seconds instead of -n iterations (send_bw, -b, and
//	                         write_lat/send_lat between two processes: rounds of -n)
//	    --run_infinitely     a line every -D seconds (default 5), until interrupted (also
//	                         between a server and a client)
//	-q, --qp n               bandwidth tests: n queue pairs per end (default 1, at most 256)
//	-c, --connection t       RC (default), UD (send_lat, send_bw) or DC
//	-l, --post_list n        WQEs per doorbell
//	-Q, --cq-mod n           WQEs per signaled completion (the same batch as -l)
//	-o, --outs n             reads and atomics outstanding (default 16)
//	-S, --sl n               service level
//	-u, --qp-timeout n       local ACK timeout code
//	-r, --rx-depth n         receive queue size (default 128, 512 for send_bw)
//	-b, --bidirectional      bandwidth modes: both ends stream, the rates summed
//	-e, --events             wait for completions by CQ events, not busy polling
//	-m, --mtu n              path MTU: 256, 512, 1024, 2048 or 4096, at most the port's active one
//	-T, --tclass, --tos n    traffic class of the GRH (0 to 255)
//	-A, --atomic_type t      FETCH_AND_ADD or CMP_AND_SWAP
//	    --report_gbits       bandwidth in Gb/s
//	    --output=k           print only bandwidth, message_rate or latency
//	    --out_json           write perftest's JSON report (--out_json_file, default perftest_out.json)
//
// mlx5kit-perf's own:
//
//	--provider p     mlx5 or sim (default: MLX5KIT_PROVIDER, else mlx5, else sim with a note)
//	--warmup n       iterations run before measuring each size (default 100)
//	--max-size n     the largest size of -a (default 8388608)
//	--timeout d      give up when a message or the exchange takes longer (default 10s);
//	                 a server of read, write and atomic modes, which posts
//	                 nothing, waits for its client's whole run, which says
//	                 every 250 ms that it is there
//	--server addr    listen on addr (e.g. :18515) for one client (refused connections aside)
//	--client h:p     connect to a server
//	--key-file f     the pre-shared key of the two ends (default: $MLX5KIT_KEY)
//	--perftest-peer  write_lat or send_lat against perftest's ib_write_lat or
//	                 ib_send_lat (server or client): perftest's TCP exchange
//	                 and its loops (plain RDMA_WRITEs whose last byte is
//	                 polled; SENDs), no warm-up; the
//	                 exchange has no authentication, so it also needs
//	                 --accept-unauthenticated and refuses --key-file and
//	                 $MLX5KIT_KEY; both ends need the same -s, -a and -n
//
// # Connections and queue pairs
//
// -c UD runs send_lat and send_bw over UD queue pairs (perftest allows UD
// with SEND only): each send names the peer's address handle, QPN and
// perftest's qkey, every receive holds the 40 bytes of GRH space before
// the payload, and a message is at most the path MTU (-a stops there, a
// larger -s is refused, send_bw's default size is lowered to it). -c DC runs every mode from a DC initiator to the peer's DC
// target (perftest's DC access key), whose receives come from an SRQ; the
// address lines end in the SRQ number as perftest's do. With -q n a
// bandwidth test opens n queue pairs per end (n DCIs and n DCTs for DC),
// posts its batches to them round-robin, -t in flight on each, and counts
// -n messages per queue pair (#iterations is n times -n, as perftest's);
// latency tests refuse -q above 1, as perftest does. send_bw's receiving
// end reposts on the queue pair (or DC's SRQ) that took each SEND. -b,
// -e, -m and -T apply to every queue pair: both ends stream on all of
// them, their waits sleep on the CQ they share, their paths have the MTU
// and traffic class (DC's initiators and targets, UD's and DC's address
// vectors included). The ends swap one
// endpoint per queue pair (QPN and qkey for UD, DCT number and DC key for
// DC, LID or GID), each exchange authenticated.
//
// perftest's other flags are refused with a line naming them (-R, -z, -g,
// -M, -N, -C, -H, -U, -O, ...), as are -c UC|XRC|SRD|
// raw_eth, -c UD outside SEND, -q above 1 in latency tests, and -c UD
// send_bw with -r below -t (a datagram that finds no receive is lost);
// docs/guide.md lists them.
package main

import (
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
)

func main() {
	perftool.Main(func() int { return runAs(filepath.Base(os.Args[0]), os.Args[1:], os.Stdout, os.Stderr) })
}

// maxSize is the largest message, perftest's limit for -a.
const maxSize = 8 << 20

// defaultTCPPort is perftest's port for the exchange (DEF_PORT).
const defaultTCPPort = 18515

// mode is the test run.
type mode uint32

// The modes, in the order of modeNames.
const (
	writeLat mode = iota
	writeBW
	sendLat
	readLat
	readBW
	atomicLat
	atomicBW
	sendBW
	numModes
)

var modeNames = [numModes]string{"write_lat", "write_bw", "send_lat", "read_lat", "read_bw", "atomic_lat", "atomic_bw", "send_bw"}

// atomicSize is the size of an atomic, the only size of the atomic modes.
const atomicSize = 8

// Values of -A (perftest's atomicTypesStr).
const (
	fetchAndAdd = "FETCH_AND_ADD"
	cmpAndSwap  = "CMP_AND_SWAP"
)

// refusedPrograms are perftest programs without a mode here, and why.
var refusedPrograms = map[string]string{}

func (m mode) String() string {
	if m < numModes {
		return modeNames[m]
	}
	return fmt.Sprintf("mode(%d)", uint32(m))
}

// latency reports whether the mode measures latency (else bandwidth).
func (m mode) latency() bool { return m == writeLat || m == sendLat || m == readLat || m == atomicLat }

// oneSided reports whether the measuring end reads or does atomics: the
// peer's memory answers, and the time is the whole operation.
func (m mode) oneSided() bool { return m == readLat || m == readBW || m == atomicLat || m == atomicBW }

// atomic reports whether the mode posts atomics.
func (m mode) atomic() bool { return m == atomicLat || m == atomicBW }

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
	case atomicLat:
		return "RC atomic, one at a time, signaled, BlueFlame, busy polling"
	case atomicBW:
		return "RC atomic stream, all on the same 8 bytes"
	case sendBW:
		return "RC SEND stream into receives reposted as they complete"
	}
	return "RC RDMA_READ stream"
}

// parseMode finds the mode named s: a name of modeNames, or the perftest
// program that runs it (ib_write_lat). A perftest program without a mode
// here is an error saying so.
func parseMode(s string) (mode, error) {
	name := strings.TrimPrefix(s, "ib_")
	for i, n := range modeNames {
		if name == n {
			return mode(i), nil
		}
	}
	if why, ok := refusedPrograms[s]; ok {
		return 0, fmt.Errorf("%s is not supported: %s", s, why)
	}
	return 0, fmt.Errorf("unknown mode %q", s)
}

// Values of --output.
const (
	outputBandwidth   = "bandwidth"
	outputMessageRate = "message_rate"
	outputLatency     = "latency"
)

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
	// peerAlive is, on a server, how often its client says it is there
	// while it measures (params.Alive; perftool.KeepAlive).
	peerAlive      time.Duration
	server, client string
	keyFile        string
	security       endpoint.Security

	// perftest's flags.
	program     bool   // the mode came from the program's name (ib_write_lat)
	tcpPort     int    // -p
	host        string // the positional server
	reportGbits bool   // --report_gbits
	duration    int    // -D, seconds; 0: a count of iterations
	durationSet bool   // -D was given (perftest refuses -D 0)
	infinite    bool   // --run_infinitely
	reports     int    // --run_infinitely: stop after this many reports (0: never; for tests)
	cqMod       int    // -Q; 0: not given
	postList    int    // -l; 0: not given
	outReads    int    // -o; 0: the queue pair's default
	sl          int    // -S
	qpTimeout   int    // -u; 0: the queue pair's default
	rxDepth     int    // -r
	output      string // --output
	outJSON     bool   // --out_json
	jsonFile    string // --out_json_file
	atomicType  string // -A
	mtu         int    // -m, bytes; 0: the port's active MTU
	tclass      int    // -T, --tclass: the GRH's traffic class
	events      bool   // -e: sleep on completion events
	bidir       bool   // -b: both ends stream

	// -c, -q and whether -I was given (else -c picks perftest's default)
	// and -s (else UD's size is lowered to the path MTU).
	conn          connection
	numQueuePairs int
	inlineSet     bool
	sizeSet       bool
	// sizeLowered: UD lowered the default size to the path MTU.
	sizeLowered bool

	// perftestPeer speaks perftest's exchange and data loop
	// (--perftest-peer), which acceptUnauthenticated must allow.
	perftestPeer, acceptUnauthenticated bool
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
	if c.mode.atomic() {
		return atomicSize * c.qps() // a counter per queue pair
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

// batch is how many WQEs a bandwidth test posts with one doorbell, the
// last of them signaled: -Q (perftest's CQ moderation), else -l (post
// list), else maxBatch; never more than -t.
func (c config) batch() int {
	b := maxBatch
	switch {
	case c.cqMod > 0:
		b = c.cqMod
	case c.postList > 0:
		b = c.postList
	}
	return min(b, c.qd)
}

// run runs the command as mlx5kit-perf with args.
func run(args []string, stdout, stderr io.Writer) int {
	return runAs("mlx5kit-perf", args, stdout, stderr)
}

// runAs runs the command under the program name prog (a perftest name
// such as ib_write_lat selects the mode) with args.
func runAs(prog string, args []string, stdout, stderr io.Writer) int {
	cfg, code := parseCommandLine(prog, args, stdout, stderr)
	if code >= 0 {
		return code
	}
	if cfg.perftestPeer {
		return perftool.Run("mlx5kit-perf", cfg.server, cfg.client, stdout, stderr,
			func() error { return perftool.ProbeDevice(cfg.provider, cfg.device) },
			func(ln net.Listener) error { return perftestServe(cfg, ln, stdout) },
			func() error { return perftestDial(cfg, stdout) },
			func() error { return errors.New("--perftest-peer needs a peer") })
	}
	return perftool.Run("mlx5kit-perf", cfg.server, cfg.client, stdout, stderr,
		func() error { return perftool.ProbeDevice(cfg.provider, cfg.device) },
		func(ln net.Listener) error { return serve(cfg, ln, stdout, stderr) },
		func() error { return dial(cfg, stdout) },
		func() error { return local(cfg, stdout) })
}

// refusedFlags lists the flags the option table refuses, by the name
// their refusal names: -X, else --name.
func refusedFlags() []string {
	var names []string
	for _, o := range new(config).options(new(bool)) {
		switch {
		case o.Refuse == "":
		case o.Short != 0:
			names = append(names, "-"+string(o.Short))
		default:
			names = append(names, "--"+o.Long[0])
		}
	}
	return names
}

// usage is the text of -help: usageHead, every refused flag, usageTail.
func usage() string {
	var b strings.Builder
	b.WriteString(usageHead)
	line := "refused with a message:"
	for _, f := range refusedFlags() {
		if len(line)+1+len(f) > 78 {
			b.WriteString("\n" + line)
			line = " "
		}
		line += " " + f
	}
	b.WriteString("\n" + line + ";")
	b.WriteString(usageTail)
	return b.String()
}

const usageHead = `usage: mlx5kit-perf MODE [flags] [SERVER]
       ib_write_lat|ib_write_bw|ib_send_lat|ib_send_bw|ib_read_lat|ib_read_bw|ib_atomic_lat|ib_atomic_bw [flags] [SERVER]
           (a link to mlx5kit-perf under perftest's name)
MODE: write_lat write_bw send_lat send_bw read_lat read_bw atomic_lat atomic_bw (or ib_write_lat ...)
perftest's flags: -d/--ib-dev -i/--ib-port -x/--gid-index -s/--size -a/--all
  -n/--iters -I/--inline_size -t/--tx-depth/--qd -F/--CPU-freq -p/--port
  -D/--duration --run_infinitely -q/--qp N -c/--connection RC|UD|DC -l/--post_list
  -Q/--cq-mod -S/--sl -u/--qp-timeout -r/--rx-depth -o/--outs -A/--atomic_type --report_gbits
  --output=bandwidth|message_rate|latency --out_json --out_json_file=F
  -b/--bidirectional -e/--events -m/--mtu -T/--tclass/--tos (with -q, -c UD|DC: on every queue pair)
  -c UD: send_lat and send_bw
mlx5kit-perf's own: --provider mlx5|sim --warmup N --max-size N --timeout D
  --server ADDR --client HOST:PORT --key-file F
  --perftest-peer --accept-unauthenticated  (write_lat, send_lat against ib_write_lat, ib_send_lat:
      its exchange, which has no authentication, and its loop; no --key-file;
      perftest sends no test parameters: give both ends the same -s, -a, -n;
      refused with it: -D --run_infinitely, -n below 4, -c UD|DC, -q, -b,
      -e with write_lat, --max-size with -a)`

const usageTail = `
  -c UC|XRC|SRD|raw_eth, -c UD outside SEND, -q above 1 in latency tests or
  outside 1..256, -c UD send_bw with -r below -t; any other flag is unknown
See docs/guide.md, "mlx5kit-perf as a perftest drop-in".`

// hostPort reports whether s is HOST:PORT (or [IPv6]:PORT), not a host
// name or a bare IPv6 address.
func hostPort(s string) bool {
	_, port, err := net.SplitHostPort(s)
	return err == nil && port != ""
}

// parseFlags parses args as mlx5kit-perf's: the mode first, then the
// flags.
func parseFlags(args []string, stderr io.Writer) (config, int) {
	return parseCommandLine("mlx5kit-perf", args, io.Discard, stderr)
}

// parseCommandLine returns the configuration and -1, or an exit status:
// the mode comes from prog when it is a perftest program's name, else
// from the first argument.
func parseCommandLine(prog string, args []string, stdout, stderr io.Writer) (config, int) {
	var cfg config
	bad := func(format string, a ...any) (config, int) {
		fmt.Fprintf(stderr, "mlx5kit-perf: "+format+"\n", a...)
		return cfg, 2
	}
	if strings.HasPrefix(prog, "ib_") {
		m, err := parseMode(prog)
		if err != nil {
			return bad("%v", err)
		}
		cfg.mode, cfg.program = m, true
	} else {
		if len(args) == 0 || strings.HasPrefix(args[0], "-") {
			if len(args) > 0 && (args[0] == "-h" || args[0] == "-help" || args[0] == "--help") {
				fmt.Fprintln(stdout, usage()) // asked for: stdout, as perftest's
				return cfg, 0
			}
			return bad("%s", usage())
		}
		m, err := parseMode(args[0])
		if err != nil {
			return bad("%v; %s", err, usage())
		}
		cfg.mode, args = m, args[1:]
	}
	cfg.size, cfg.iters = 2, 1000
	if !cfg.mode.latency() {
		cfg.size, cfg.iters = 65536, 5000
	}
	if cfg.mode.atomic() {
		cfg.size = atomicSize
	}
	cfg.atomicType = fetchAndAdd
	cfg.maxSize, cfg.warmup, cfg.qd, cfg.inline = maxSize, 100, 64, 220
	cfg.gidIndex, cfg.port, cfg.timeout = -1, 1, 10*time.Second
	cfg.tcpPort, cfg.rxDepth, cfg.jsonFile = defaultTCPPort, recvDepth, defaultJSONFile
	if cfg.mode == sendBW {
		cfg.rxDepth = sendRecvDepth
	}
	help := false
	pos, err := perftool.ParseArgs(args, cfg.options(&help))
	if help {
		fmt.Fprintln(stdout, usage())
		return cfg, 0
	}
	if err != nil {
		return bad("%s", strings.TrimPrefix(err.Error(), perftool.ErrUsage.Error()+": "))
	}
	switch len(pos) {
	case 0:
	case 1:
		cfg.host = pos[0]
	default:
		return bad("unexpected arguments %q: at most one, the server", pos)
	}
	cfg.defaultInline()
	if msg := cfg.check(); msg != "" {
		return bad("%s", msg)
	}
	cfg = cfg.capRecvDepth()
	switch {
	case cfg.host != "" && (cfg.server != "" || cfg.client != ""):
		return bad("the server %q and -server or -client exclude each other", cfg.host)
	case cfg.host != "" && hostPort(cfg.host):
		// perftest's SERVER is a host (the port is -p): HOST:PORT would
		// be looked up as a host name and fail with "no such host".
		h, port, _ := net.SplitHostPort(cfg.host)
		return bad("the server %q: a host name, the port going with -p (-p %s %s), or --client %s", cfg.host, port, h, cfg.host)
	case cfg.host != "":
		cfg.client = net.JoinHostPort(cfg.host, strconv.Itoa(cfg.tcpPort))
	case cfg.program && cfg.server == "" && cfg.client == "":
		// perftest's rule: without a server to connect to, wait for a client.
		cfg.server = ":" + strconv.Itoa(cfg.tcpPort)
	}
	ends := 1
	if cfg.server == "" && cfg.client == "" && cfg.duplex() {
		ends = 2 // both ends' stamps in this process
	}
	if msg := cfg.checkMemory(ends); msg != "" {
		return bad("%s", msg)
	}
	if cfg.perftestPeer {
		// perftest's exchange: no key (perftestCheck refused one).
		return cfg, -1
	}
	var msg string
	if cfg.security, msg = cfg.peerFlags().Security(); msg != "" {
		return bad("%s", msg)
	}
	return cfg, -1
}

// defaultJSONFile is perftest's --out_json file (DEFAULT_JSON_FILE_NAME).
const defaultJSONFile = "perftest_out.json"

// errWant is what a value Set refuses wraps.
var errWant = errors.New("want")

// options is the command line's table: perftest's flags, then
// mlx5kit-perf's own, then perftest's that are refused.
func (c *config) options(help *bool) []perftool.Option {
	integer := func(p *int) func(string, string) error {
		return func(_, v string) error {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%q is not an integer", v)
			}
			*p = n
			return nil
		}
	}
	text := func(p *string) func(string, string) error {
		return func(_, v string) error { *p = v; return nil }
	}
	on := func(p *bool) func(string, string) error {
		return func(string, string) error { *p = true; return nil }
	}
	return []perftool.Option{
		{Short: 'd', Long: []string{"ib-dev", "device"}, Value: true, Set: text(&c.device)},
		{Short: 'i', Long: []string{"ib-port"}, Value: true, Set: integer(&c.port)},
		{Short: 'x', Long: []string{"gid-index"}, Value: true, Set: func(f, v string) error {
			// -1, the field's default, means no -x: a value given is an
			// entry of the table (Flags.Check refuses one above 255).
			if err := integer(&c.gidIndex)(f, v); err != nil {
				return err
			}
			if c.gidIndex < 0 {
				return fmt.Errorf("%d: %w 0 to 255", c.gidIndex, errWant)
			}
			return nil
		}},
		{Short: 's', Long: []string{"size"}, Value: true, Set: func(f, v string) error {
			c.sizeSet = true
			return integer(&c.size)(f, v)
		}},
		{Short: 'a', Long: []string{"all"}, Set: on(&c.all)},
		{Short: 'n', Long: []string{"iters"}, Value: true, Set: integer(&c.iters)},
		{Short: 'I', Long: []string{"inline_size", "inline"}, Value: true, Set: func(f, v string) error {
			c.inlineSet = true
			return integer(&c.inline)(f, v)
		}},
		{Short: 't', Long: []string{"tx-depth", "qd"}, Value: true, Set: integer(&c.qd)},
		// perftest's -F only silences its check of the CPU frequency; the
		// cycle counter's frequency is measured here (cycles.Frequency).
		{Short: 'F', Long: []string{"CPU-freq"}, Set: func(string, string) error { return nil }},
		{Short: 'p', Long: []string{"port"}, Value: true, Set: integer(&c.tcpPort)},
		{Short: 'D', Long: []string{"duration"}, Value: true, Set: func(f, v string) error {
			c.durationSet = true
			return integer(&c.duration)(f, v)
		}},
		{Long: []string{"run_infinitely"}, Set: on(&c.infinite)},
		{Long: []string{"report_gbits"}, Set: on(&c.reportGbits)},
		{Short: 'q', Long: []string{"qp"}, Value: true, Set: func(f, v string) error {
			if err := integer(&c.numQueuePairs)(f, v); err != nil {
				return err
			}
			if c.numQueuePairs < 1 || c.numQueuePairs > maxQueuePairs {
				return fmt.Errorf("%d: %w 1 to %d queue pairs", c.numQueuePairs, errWant, maxQueuePairs)
			}
			return nil
		}},
		{Short: 'c', Long: []string{"connection"}, Value: true, Set: func(_, v string) error {
			switch v {
			case "RC":
				c.conn = connRC
			case "UD":
				c.conn = connUD
			case "DC":
				c.conn = connDC
			default:
				return fmt.Errorf("%q is not supported: mlx5kit-perf measures RC, UD or DC", v)
			}
			return nil
		}},
		{Short: 'l', Long: []string{"post_list"}, Value: true, Set: integer(&c.postList)},
		{Short: 'Q', Long: []string{"cq-mod"}, Value: true, Set: integer(&c.cqMod)},
		{Short: 'o', Long: []string{"outs"}, Value: true, Set: integer(&c.outReads)},
		{Short: 'S', Long: []string{"sl"}, Value: true, Set: integer(&c.sl)},
		{Short: 'u', Long: []string{"qp-timeout"}, Value: true, Set: integer(&c.qpTimeout)},
		{Short: 'r', Long: []string{"rx-depth"}, Value: true, Set: integer(&c.rxDepth)},
		{Long: []string{"output"}, Value: true, Set: func(_, v string) error {
			switch v {
			case outputBandwidth, outputMessageRate, outputLatency:
				c.output = v
				return nil
			}
			return fmt.Errorf("%q: %w bandwidth, message_rate or latency", v, errWant)
		}},
		{Long: []string{"out_json"}, Set: on(&c.outJSON)},
		{Long: []string{"out_json_file"}, Value: true, Set: func(_, v string) error {
			c.jsonFile, c.outJSON = v, true
			return nil
		}},
		{Short: 'h', Long: []string{"help"}, Set: on(help)},

		// mlx5kit-perf's own.
		{Long: []string{"provider"}, Value: true, Set: text(&c.provider)},
		{Long: []string{"max-size"}, Value: true, Set: integer(&c.maxSize)},
		{Long: []string{"warmup"}, Value: true, Set: integer(&c.warmup)},
		{Long: []string{"timeout"}, Value: true, Set: func(_, v string) error {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%q is not a duration (10s, 500ms)", v)
			}
			c.timeout = d
			return nil
		}},
		{Long: []string{"server"}, Value: true, Set: text(&c.server)},
		{Long: []string{"client"}, Value: true, Set: text(&c.client)},
		{Long: []string{"key-file"}, Value: true, Set: text(&c.keyFile)},
		{Long: []string{"perftest-peer"}, Set: on(&c.perftestPeer)},
		{Long: []string{"accept-unauthenticated"}, Set: on(&c.acceptUnauthenticated)},

		{Short: 'e', Long: []string{"events"}, Set: on(&c.events)},
		{Short: 'b', Long: []string{"bidirectional"}, Set: on(&c.bidir)},
		{Short: 'm', Long: []string{"mtu"}, Value: true, Set: integer(&c.mtu)},
		{Short: 'T', Long: []string{"tos", "tclass"}, Value: true, Set: integer(&c.tclass)},

		// perftest's, refused.
		{Short: 'R', Long: []string{"rdma_cm"}, Refuse: "(rdma_cm) is not supported: the ends swap endpoints over TCP"},
		{Short: 'z', Long: []string{"com_rdma_cm", "comm_rdma_cm"}, Refuse: "(rdma_cm exchange) is not supported: the ends swap endpoints over TCP"},
		{Short: 'g', Long: []string{"mcg"}, Refuse: "(multicast) is not supported"},
		{Short: 'M', Long: []string{"MGID"}, Value: true, Refuse: "(multicast) is not supported"},
		{Short: 'X', Long: []string{"vector"}, Value: true, Refuse: "(completion vector) is not supported: mlx5kit-perf busy-polls"},
		{Short: 'N', Long: []string{"noPeak"}, Refuse: "(no peak) is not supported"},
		{Short: 'C', Long: []string{"report-cycles"}, Refuse: "(report cycles) is not supported"},
		{Short: 'H', Long: []string{"report-histogrm"}, Refuse: "(report histogram) is not supported"},
		{Short: 'U', Long: []string{"report-unsorted"}, Refuse: "(report unsorted) is not supported"},
		{Short: 'O', Long: []string{"dualport"}, Refuse: "(dual port) is not supported"},
		{Short: 'A', Long: []string{"atomic_type"}, Value: true, Set: func(_, v string) error {
			if v != fetchAndAdd && v != cmpAndSwap {
				return fmt.Errorf("%q: %w %s or %s", v, errWant, fetchAndAdd, cmpAndSwap)
			}
			if !c.mode.atomic() {
				return fmt.Errorf("%s is not an atomic mode", c.mode)
			}
			c.atomicType = v
			return nil
		}},
		{Short: 'w', Long: []string{"limit_bw"}, Value: true, Refuse: "(bandwidth limit) is not supported"},
		{Short: 'y', Long: []string{"limit_msgrate"}, Value: true, Refuse: "(message rate limit) is not supported"},
		{Short: 'L', Long: []string{"hop_limit"}, Value: true, Refuse: "(hop limit) is not supported"},
		{Short: 'V', Long: []string{"version"}, Refuse: "(version) is not supported: mlx5kit-perf is not perftest"},
		{Long: []string{"use-srq"}, Refuse: "(SRQ) is not supported"},
		{Long: []string{"report-both"}, Refuse: "is not supported"},
		{Long: []string{"reversed"}, Refuse: "is not supported"},
		{Long: []string{"tcp"}, Refuse: "is not supported: the exchange is TCP already"},
		{Short: 'f', Long: []string{"margin"}, Value: true, Refuse: "(margin) is not supported"},
		{Short: 'W', Long: []string{"report-counters"}, Value: true, Refuse: "(report counters) is not supported"},
		{Long: []string{"cpu_util"}, Refuse: "(CPU utilization) is not supported"},
		{Long: []string{"dlid"}, Value: true, Refuse: "is not supported: the peer's LID comes from the exchange"},
		{Long: []string{"dont_xchg_versions"}, Refuse: "is not supported"},
		{Long: []string{"force-link"}, Value: true, Refuse: "is not supported: the link is the port's"},
		{Long: []string{"ipv6"}, Refuse: "is not supported: -x picks the GID"},
		{Long: []string{"source_ip"}, Value: true, Refuse: "is not supported"},
		{Long: []string{"latency_gap"}, Value: true, Refuse: "is not supported"},
		{Long: []string{"mmap"}, Value: true, Refuse: "is not supported"},
		{Long: []string{"mmap-offset"}, Value: true, Refuse: "is not supported"},
		{Long: []string{"odp"}, Refuse: "(on-demand paging) is not supported"},
		{Long: []string{"use_old_post_send"}, Refuse: "is not supported: mlx5kit-perf writes WQEs itself"},
		{Long: []string{"perform_warm_up"}, Refuse: "is not supported as a flag: mlx5kit-perf always warms up (--warmup N)"},
		{Long: []string{"pkey_index"}, Value: true, Refuse: "is not supported"},
		{Long: []string{"retry_count"}, Value: true, Refuse: "is not supported"},
		{Long: []string{"use_hugepages"}, Refuse: "is not supported"},
	}
}

// check returns what is wrong with the configuration, or "".
func (c config) check() string {
	switch {
	case c.mode >= numModes:
		return fmt.Sprintf("unknown mode %d", uint32(c.mode))
	case c.size < 1 || c.size > maxSize:
		return fmt.Sprintf("-s %d: want 1 to %d", c.size, maxSize)
	case c.maxSize < 2 || c.maxSize > maxSize:
		return fmt.Sprintf("--max-size %d: want 2 to %d", c.maxSize, maxSize)
	case c.mode.atomic() && (c.size != atomicSize || c.all):
		return fmt.Sprintf("-s %d: %s moves %d bytes, and -a has no other size", c.size, c.mode, atomicSize)
	case c.iters < 1 || c.iters > 1<<30:
		return fmt.Sprintf("-n %d: want 1 to %d", c.iters, 1<<30)
	case c.streamIters() > 1<<30:
		return fmt.Sprintf("-n %d with -q %d: %d messages per size, want at most %d", c.iters, c.qps(), c.streamIters(), 1<<30)
	case c.mode.latency() && c.iters < perftool.DroppedTail+1:
		return fmt.Sprintf("-n %d: a latency test needs at least %d (perftest's rules leave the %d largest samples out)",
			c.iters, perftool.DroppedTail+1, perftool.DroppedTail)
	case c.warmup < 0 || c.warmup > 1<<30:
		return fmt.Sprintf("--warmup %d: want 0 to %d", c.warmup, 1<<30)
	case c.qd < 1 || c.qd > 4096:
		return fmt.Sprintf("-t %d: want 1 to 4096", c.qd)
	case c.inline < 0 || c.inline > 4096:
		return fmt.Sprintf("-I %d: want 0 to 4096", c.inline)
	case c.tcpPort < 1 || c.tcpPort > 65535:
		return fmt.Sprintf("-p %d: want 1 to 65535", c.tcpPort)
	case c.duration < 0 || c.duration > 1<<20 || c.durationSet && c.duration == 0:
		return fmt.Sprintf("-D %d: want 1 to %d seconds", c.duration, 1<<20)
	case c.infinite && c.all:
		return "--run_infinitely and -a exclude each other"
	case c.duration > 0 && c.all:
		return "-D and -a exclude each other (as in perftest)"
	case c.cqMod < 0 || c.cqMod > 4096:
		return fmt.Sprintf("-Q %d: want 1 to 4096 (0: the default)", c.cqMod)
	case c.postList < 0 || c.postList > 4096:
		return fmt.Sprintf("-l %d: want 1 to 4096 (0: the default)", c.postList)
	case c.cqMod > 0 && c.postList > 0 && c.cqMod != c.postList:
		return fmt.Sprintf("-Q %d and -l %d: mlx5kit-perf rings one doorbell per completion, so they must be equal", c.cqMod, c.postList)
	case c.outReads < 0 || c.outReads > 255:
		return fmt.Sprintf("-o %d: want 1 to 255 (0: the default, 16)", c.outReads)
	case c.sl < 0 || c.sl > 15:
		return fmt.Sprintf("-S %d: want 0 to 15", c.sl)
	case c.qpTimeout < 0 || c.qpTimeout > 31:
		return fmt.Sprintf("-u %d: want 1 to 31 (0: the queue pair's default)", c.qpTimeout)
	case c.rxDepth < 1 || c.rxDepth > 8192:
		return fmt.Sprintf("-r %d: want 1 to 8192", c.rxDepth)
	case c.output == outputLatency && !c.mode.latency():
		return fmt.Sprintf("--output=latency: %s measures bandwidth (want bandwidth or message_rate)", c.mode)
	case (c.output == outputBandwidth || c.output == outputMessageRate) && c.mode.latency():
		return fmt.Sprintf("--output=%s: %s measures latency (want latency)", c.output, c.mode)
	}
	if msg := c.perftestCheck(); msg != "" {
		return msg
	}
	if msg := c.laneCheck(); msg != "" {
		return msg
	}
	if msg := c.pathCheck(); msg != "" {
		return msg
	}
	if msg := c.streamCheck(); msg != "" {
		return msg
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
