package main

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"os"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/perftestwire"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// --perftest-peer speaks perftest's own TCP exchange (perftest 5.70 and
// later, as Debian's perftest 4.5 which prints version 6.06) and its
// write_lat and send_lat data loops, so that one end may be perftest's
// ib_write_lat or ib_send_lat.
// The exchange, in the order both programs run it, each step written by
// the client first and read by the server first:
//
//  1. the version, a NUL-padded string of 16 bytes; a peer older than 5.70
//     is refused, as perftest refuses one, and so is a version that is not
//     digits, a dot and digits (perftestwire.ParseVersion);
//  2. the cycle buffer and the cache line sizes, 4 bytes each, big-endian
//     (read and ignored here: they shape perftest's own buffer);
//  3. the MTU, the ibv_mtu code as a decimal digit and a NUL; both ends
//     take the smaller;
//  4. four times the queue pair's record, perftest's KEY_PRINT_FMT
//     (LID:OUT_READS:QPN:PSN:RKEY:VADDR:SRQN in fixed-width hex, 59 bytes
//     with the NUL) or, with GIDs (RoCE, -x), KEY_PRINT_FMT_GID (the 16
//     GID bytes before SRQN, 108 bytes); the queue pair is connected after
//     the second (send_lat: after the first, and the record is swapped
//     once more before each size), the last two confirm both ends are
//     ready.
//
// There is no key and no parameter exchange: anyone who reaches the port
// gets this end's address and rkey, and both ends must be given the same
// -s, -a and -n. The data loop is run_iter_lat_write's: each end writes
// size bytes into the peer's buffer with a plain RDMA_WRITE whose last
// byte is the message's number (mod 256) and busy-polls the last byte of
// its own buffer for the peer's; the server writes first. send_lat's
// loop is a SEND ping-pong, the client first. There is no warm-up.

// perftestVersion is the version this end announces: the exchange it
// speaks is perftest 6.06's.
const perftestVersion = "6.06"

// perftestMinVersion is the oldest peer accepted (perftest's own limit).
const perftestMinVersion = 5.70

// perftestVersionSize is perftest's MAX_VERSION.
const perftestVersionSize = 16

// Sizes of perftest's records (KEY_MSG_SIZE, KEY_MSG_SIZE_GID).
const (
	perftestKeySize    = 59
	perftestKeySizeGID = 108
)

// errPerftestPeer is what a failed perftest exchange wraps.
var errPerftestPeer = errors.New("perftest exchange")

// perftestDest is one queue pair's record in perftest's exchange
// (struct pingpong_dest).
type perftestDest struct {
	LID      uint16
	OutReads uint32
	QPN, PSN uint32
	RKey     uint32
	VAddr    uint64
	GID      ctx.GID
	SRQN     uint32
}

// encode writes d in perftest's fixed format, with the GID when gid is
// set, NUL-terminated.
func (d perftestDest) encode(gid bool) []byte {
	s := fmt.Sprintf("%04x:%04x:%06x:%06x:%08x:%016x:", d.LID, d.OutReads&0xffff, d.QPN&0xffffff, d.PSN&0xffffff, d.RKey, d.VAddr)
	if gid {
		for _, b := range d.GID {
			s += fmt.Sprintf("%02x:", b)
		}
		s += fmt.Sprintf("%08x:", d.SRQN)
	} else {
		s += fmt.Sprintf("%08x", d.SRQN)
	}
	return append([]byte(s), 0)
}

// decodePerftestDest parses a record in perftest's format (with the GID
// when gid is set). A field that is not hex, or holds more than the field
// can (a LID or OUT_READS above 16 bits, a QPN or PSN above 24, an RKEY or
// SRQN above 32, a GID byte above 8), is refused, the error naming it,
// before anything is narrowed.
func decodePerftestDest(b []byte, gid bool) (perftestDest, error) {
	var d perftestDest
	if i := bytes.IndexByte(b, 0); i >= 0 {
		b = b[:i]
	}
	fields := strings.Split(strings.TrimSuffix(string(b), ":"), ":")
	want := 7
	if gid {
		want = 23
	}
	if len(fields) != want {
		return d, fmt.Errorf("%w: the peer's record %q has %d fields, want %d", errPerftestPeer, b, len(fields), want)
	}
	var v [23]uint64
	for i, f := range fields {
		n, err := strconv.ParseUint(f, 16, 64)
		if err != nil {
			return d, fmt.Errorf("%w: the peer's record %q: field %d (%s): %w", errPerftestPeer, b, i, perftestFieldName(i, want), err)
		}
		if limit := perftestFieldMax(i, want); n > limit {
			return d, fmt.Errorf("%w: the peer's record %q: field %d (%s) is %#x, at most %#x", errPerftestPeer, b, i, perftestFieldName(i, want), n, limit)
		}
		v[i] = n
	}
	d.LID, d.OutReads, d.QPN, d.PSN, d.RKey, d.VAddr = uint16(v[0]), uint32(v[1]), uint32(v[2]), uint32(v[3]), uint32(v[4]), v[5]
	if gid {
		for i := range d.GID {
			d.GID[i] = byte(v[6+i])
		}
	}
	d.SRQN = uint32(v[want-1])
	return d, nil
}

// perftestFieldName names field i of a record of want fields as perftest's
// struct pingpong_dest does.
func perftestFieldName(i, want int) string {
	switch {
	case i < 6:
		return [...]string{"LID", "OUT_READS", "QPN", "PSN", "RKEY", "VADDR"}[i]
	case i == want-1:
		return "SRQN"
	}
	return fmt.Sprintf("GID byte %d", i-6)
}

// perftestFieldMax is the largest value field i of a record of want fields
// may hold.
func perftestFieldMax(i, want int) uint64 {
	switch {
	case i < 6:
		return [...]uint64{0xffff, 0xffff, 0xffffff, 0xffffff, 0xffffffff, math.MaxUint64}[i]
	case i == want-1:
		return 0xffffffff
	}
	return 0xff
}

// perftestConn is one end of perftest's exchange.
type perftestConn struct {
	conn    net.Conn
	client  bool
	timeout time.Duration // for each step
}

// swap sends mine and reads len(theirs) bytes into theirs, the client
// writing first, as ctx_xchg_data does.
func (p perftestConn) swap(what string, mine, theirs []byte) error {
	write := func() error {
		_, err := p.conn.Write(mine)
		return err
	}
	read := func() error {
		_, err := io.ReadFull(p.conn, theirs)
		return err
	}
	_ = p.conn.SetDeadline(time.Now().Add(p.timeout))
	first, second := read, write
	if p.client {
		first, second = write, read
	}
	if err := first(); err != nil {
		return fmt.Errorf("%w: %s: %w", errPerftestPeer, what, err)
	}
	if err := second(); err != nil {
		return fmt.Errorf("%w: %s: %w", errPerftestPeer, what, err)
	}
	return nil
}

// preamble runs the version, system data and MTU steps and returns the
// path MTU: the smaller of mtu and the peer's.
func (p perftestConn) preamble(mtu ctx.MTU) (ctx.MTU, error) {
	var mine, theirs [perftestVersionSize]byte
	copy(mine[:], perftestVersion)
	if err := p.swap("version", mine[:], theirs[:]); err != nil {
		return 0, err
	}
	version, v, err := perftestwire.ParseVersion(theirs[:])
	if err != nil {
		return 0, fmt.Errorf("%w: the peer's version: %w", errPerftestPeer, err)
	}
	if v < perftestMinVersion {
		return 0, fmt.Errorf("%w: the peer's version %q: want perftest %.2f or later", errPerftestPeer, version, perftestMinVersion)
	}
	var word, peerWord [4]byte
	word = [4]byte{0, 0, 0x10, 0} // the cycle buffer: one page
	if err := p.swap("cycle buffer size", word[:], peerWord[:]); err != nil {
		return 0, err
	}
	word = [4]byte{0, 0, 0, 64} // the cache line
	if err := p.swap("cache line size", word[:], peerWord[:]); err != nil {
		return 0, err
	}
	var peerMTU [2]byte
	if err := p.swap("MTU", []byte{'0' + byte(mtu), 0}, peerMTU[:]); err != nil {
		return 0, err
	}
	theirMTU := ctx.MTU(peerMTU[0] - '0')
	if peerMTU[1] != 0 || !theirMTU.Valid() {
		return 0, fmt.Errorf("%w: the peer's MTU %q is not an MTU code 1 to 5", errPerftestPeer, peerMTU[:])
	}
	return min(mtu, theirMTU), nil
}

// record swaps the queue pair's records once.
func (p perftestConn) record(mine perftestDest, gid bool) (perftestDest, error) {
	size := perftestKeySize
	if gid {
		size = perftestKeySizeGID
	}
	theirs := make([]byte, size)
	if err := p.swap("queue pair record", mine.encode(gid), theirs); err != nil {
		return perftestDest{}, err
	}
	return decodePerftestDest(theirs, gid)
}

// close is ctx_close_connection: the records swapped once more, then the
// peer's "done" read and this end's written, for a perftest that sends
// one; a peer that closes instead (perftest releases that stopped sending
// it) ends it as well.
func (p perftestConn) close(mine perftestDest, gid bool) error {
	if _, err := p.record(mine, gid); err != nil {
		return err
	}
	_ = p.conn.SetDeadline(time.Now().Add(p.timeout))
	done := []byte("done\x00")
	if p.client {
		_, _ = p.conn.Write(done)
	}
	var theirs [5]byte
	_, _ = io.ReadFull(p.conn, theirs[:])
	if !p.client {
		_, _ = p.conn.Write(done)
	}
	return nil
}

// perftestCheck returns what forbids the configuration to run against
// perftest, or "".
func (c config) perftestCheck() string {
	switch {
	case !c.perftestPeer:
		return ""
	case !c.acceptUnauthenticated:
		return "--perftest-peer: perftest's exchange has no authentication (whoever reaches the TCP port gets this end's buffer address and rkey and may write into it); " +
			"add --accept-unauthenticated to run it anyway"
	case c.keyFile != "":
		return "--perftest-peer and --key-file exclude each other: perftest's exchange has no key"
	case os.Getenv(perftool.EnvKey) != "":
		return fmt.Sprintf("--perftest-peer with $%s set: perftest's exchange has no key (unset it)", perftool.EnvKey)
	case c.mode != writeLat && c.mode != sendLat:
		return fmt.Sprintf("--perftest-peer runs write_lat and send_lat (perftest's ib_write_lat, ib_send_lat) only, not %s", c.mode)
	case c.server == "" && c.client == "" && c.host == "" && !c.program:
		return "--perftest-peer needs a peer: a SERVER to connect to, or --server to wait for ib_write_lat's client"
	case c.all && c.maxSize != maxSize:
		return fmt.Sprintf("--perftest-peer with -a: perftest's -a runs every size from 2 to %d, so --max-size must stay %d", maxSize, maxSize)
	case c.iters < perftool.DroppedTail+2:
		return fmt.Sprintf("--perftest-peer -n %d: perftest times the %d gaps between an end's posts and leaves the %d largest out: want at least %d (perftest's own minimum is 5)",
			c.iters, c.iters-1, perftool.DroppedTail, perftool.DroppedTail+2)
	case c.timed():
		return "--perftest-peer: -D and --run_infinitely are not supported (perftest's duration mode stops on a timer the ends do not share)"
	}
	return ""
}

// describeMode says what the test posts, for the report's first line.
func (c config) describeMode() string {
	switch {
	case c.perftestPeer && c.mode == sendLat:
		return "RC SEND/RECV ping-pong against perftest, signaled, BlueFlame, busy polling"
	case c.perftestPeer:
		return "RC RDMA_WRITE ping-pong against perftest, signaled, BlueFlame, polling the buffer's last byte"
	}
	return c.describeLanes(c.mode.describe())
}

// perftestEnd makes this end's queue pair and record.
func perftestEnd(cfg config) (*perftool.Setup, *end, error) {
	s, made, err := perftool.OpenEnds(cfg.provider, cfg.device, cfg.endConfig(), wrap, map[bool]string{true: "server", false: "client"}[cfg.server != ""])
	if err != nil {
		return nil, nil, err
	}
	if err := limitMTU(cfg, s, made[0]); err != nil {
		_ = s.Close()
		return nil, nil, err
	}
	return s, made[0], nil
}

// perftestLink is an end whose queue pair perftest's exchange connected
// to the peer's.
type perftestLink struct {
	s      *perftool.Setup
	x      *end
	p      perftestConn
	mine   perftestDest // this end's record, swapped again before each send_lat size
	gid    bool         // the records carry GIDs
	remote endpoint.Endpoint
}

// perftestConnect makes this end's queue pair and runs perftest's exchange
// on conn up to the two records swapped after connecting, this end the
// server or the client. The path MTU is the smaller of the two ends' (the
// end's mtu, so that its endpoint and report say it).
func perftestConnect(cfg config, conn net.Conn, server bool) (*perftestLink, error) {
	s, x, err := perftestEnd(cfg)
	if err != nil {
		return nil, err
	}
	k := &perftestLink{s: s, x: x, p: perftestConn{conn: conn, client: !server, timeout: cfg.timeout}}
	if err := k.connect(cfg); err != nil {
		_ = s.Close()
		return nil, err
	}
	// From here the waits look at conn, as the kit's own exchange's do
	// (handshake): a peer that closed it (perftest exited or was killed)
	// ends a wait within perftool.PeerCheck, not at the timeout.
	// perftest's records and "done" are text, never the status byte of a
	// failed peer.
	x.Peer = conn
	return k, nil
}

func (k *perftestLink) connect(cfg config) error {
	x, p := k.x, k.p
	port, err := k.s.Context.QueryPort(uint8(cfg.port))
	if err != nil {
		return err
	}
	ep := x.endpoint()
	mtu, err := p.preamble(ep.MTU)
	if err != nil {
		return err
	}
	x.mtu = mtu
	k.gid = cfg.gidIndex >= 0 || port.LinkLayer == ctx.LinkLayerEthernet
	outReads := cfg.outReads
	if outReads == 0 {
		outReads = 16
	}
	k.mine = perftestDest{LID: ep.LID, OutReads: uint32(outReads), QPN: ep.QPN, PSN: ep.PSN, RKey: x.MR.RKey(), VAddr: x.RecvAddr, GID: ep.GID}
	// ib_write_lat swaps the records twice before it connects, ib_send_lat
	// once; both twice after.
	before := 2
	if cfg.mode == sendLat {
		before = 1
	}
	var peer perftestDest
	for range before {
		if peer, err = p.record(k.mine, k.gid); err != nil {
			return err
		}
	}
	remote := endpoint.Endpoint{Transport: endpoint.TransportRC, QPN: peer.QPN, LID: peer.LID, PSN: peer.PSN, MTU: mtu,
		Regions: []endpoint.RemoteRegion{{Address: peer.VAddr, Length: uint64(len(x.recv)), RemoteKey: peer.RKey, Access: ctx.AccessRemoteWrite}}}
	if k.gid {
		remote.GID, remote.GIDIndex = peer.GID, ep.GIDIndex
	}
	if perftool.OwnQueuePair(ep, remote) {
		return fmt.Errorf("%w: the peer's record names this end's own queue pair %#x%s", errPerftestPeer, peer.QPN, perftool.OwnQueuePairHint(k.s.Context))
	}
	if err := perftool.SameModel(k.s.Context, ep.QPN, remote); err != nil {
		return fmt.Errorf("%w: %w", errPerftestPeer, err)
	}
	x.PeerRecv, x.RKey, x.peer = peer.VAddr, peer.RKey, remote
	if err := x.QP.Connect(remote); err != nil {
		return fmt.Errorf("connect to perftest's QP %#x: %w", peer.QPN, err)
	}
	for range 2 {
		if _, err := p.record(k.mine, k.gid); err != nil {
			return err
		}
	}
	k.remote = remote
	return nil
}

// perftestMismatchHint ends the error of a loop against perftest that
// stalls or gets a completion it did not expect: perftest's exchange
// carries no test parameters, so besides perftest exiting the likeliest
// cause is two ends given different ones.
const perftestMismatchHint = " (did perftest exit? Its exchange carries no test parameters: are the program (ib_write_lat or ib_send_lat), -s, -a and -n the same at both ends?)"

// perftestHint returns perftestMismatchHint for err, "" for a post this
// end refused (a local error, not the peer's).
func perftestHint(err error) string {
	if pe := (*wqebuilder.PostError)(nil); errors.As(err, &pe) {
		return ""
	}
	return perftestMismatchHint
}

// perftestRun runs write_lat against perftest: the exchange on conn, then
// every size, this end the server (writing first) or the client.
func perftestRun(cfg config, conn net.Conn, server bool, stdout io.Writer) error {
	cfg.warmup = 0
	k, err := perftestConnect(cfg, conn, server)
	if err != nil {
		return err
	}
	defer k.s.Close()
	x, send := k.x, cfg.mode == sendLat
	counter := cycles.Frequency()
	role := "client of "
	if server {
		role = "server of "
	}
	loop := "perftest's write_lat loop (plain RDMA_WRITE, polling the last byte)"
	if send {
		loop = "perftest's send_lat loop (SEND, the client first)"
	}
	ends := role + conn.RemoteAddr().String() + " speaking perftest's exchange (unauthenticated), " + loop + ", not pinned"
	in, err := describe(cfg, k.s, x, k.remote, ends, counter)
	if err != nil {
		return err
	}
	cfg.device = in.deviceName
	in.server = server
	if err := writeInfo(stdout, cfg, in); err != nil {
		return err
	}
	sizes := cfg.sizes()
	for _, size := range sizes {
		var l latency
		l.Reserve(cfg.iters)
		if send {
			// send_lat swaps the records once more before each size, once
			// the receives for it are posted.
			if _, err := k.p.record(k.mine, k.gid); err != nil {
				// A stall here is often the other end, with a larger
				// -n, still in the last size's loop.
				return fmt.Errorf("%s against perftest, %d bytes: %w%s", cfg.mode, size, err, perftestMismatchHint)
			}
			err = x.perftestSendLat(size, cfg.iters, server, &l)
		} else {
			err = x.perftestWriteLat(size, cfg.iters, server, &l)
		}
		if err != nil {
			return fmt.Errorf("%s against perftest, %d bytes: %w%s", cfg.mode, size, err, perftestHint(err))
		}
		if err := writeLatencyRow(stdout, cfg, size, &l, counter); err != nil {
			return err
		}
	}
	if send {
		// ib_send_lat closes with a last swap of the records and, from
		// perftest 4.5-0.17 (Debian's) to 6.x, a "done" of 5 bytes each
		// way, which ib_write_lat does not; without them perftest reports
		// "Failed to close connection between server and client".
		if err := k.p.close(k.mine, k.gid); err != nil {
			return fmt.Errorf("%s against perftest: close: %w%s", cfg.mode, err, perftestHint(err))
		}
	}
	return writeFooter(stdout, cfg)
}

// perftestWriteLat runs n round trips of size-byte writes as
// run_iter_lat_write does, timing them as perftest does: l records the time
// from each of this end's posts to its next (n-1 samples, see
// latency.Posted), so a sample is a whole round trip wherever it starts.
// The server writes message 1 first; then each end waits for the peer's
// message k (the last byte of its buffer turns to k mod 256) and writes its
// message k+1 and waits for the write's completion, until both have written
// n. (Nothing past the message can be checked: the peer may begin the next
// size before this end ends this one, as the ends do not wait for each
// other between sizes, and the last size fills the whole receive area.) It
// allocates nothing unless it fails.
func (x *end) perftestWriteLat(size, n int, server bool, l *latency) error {
	for i := range uint32(n) {
		// Iteration i writes message i+1; the client waits first for the
		// server's message i+1, the server for the client's message i.
		switch {
		case !server:
			if err := x.awaitLastByte(size, i+1); err != nil {
				return err
			}
		case i > 0:
			if err := x.awaitLastByte(size, i); err != nil {
				return err
			}
		}
		l.Posted()
		if err := x.postWrite(size, i+1); err != nil {
			return err
		}
		if err := x.drain(); err != nil {
			return err
		}
	}
	if server {
		if err := x.awaitLastByte(size, uint32(n)); err != nil {
			return err
		}
	}
	return nil
}

// perftestSendLat runs n round trips of size-byte SENDs as
// run_iter_lat_send does, timed from post to post as perftestWriteLat's:
// the client sends first, the server answers each message it receives.
// Send completions are retired by the waits for receives, and the last by
// a drain. It allocates nothing unless it fails.
func (x *end) perftestSendLat(size, n int, server bool, l *latency) error {
	for i := range uint32(n) {
		if server {
			if err := x.awaitSend(size, i); err != nil {
				return err
			}
		}
		l.Posted()
		if err := x.Post(perftool.OpSend, size, i, size <= x.MaxInline); err != nil {
			return err
		}
		if !server {
			if err := x.awaitSend(size, i); err != nil {
				return err
			}
		}
	}
	// Only now: the peer's next message may arrive while a send is
	// outstanding, and a drain takes nothing but send completions.
	return x.drain()
}

// awaitSend busy-polls until a SEND of size bytes has arrived and posts a
// receive in place of the one it used; perftest's payload carries no
// sequence number, so only the length is checked. seq is the message
// waited for, for the error.
func (x *end) awaitSend(size int, seq uint32) error {
	got := false
	var since time.Time
	for spins := 1; !got; spins++ {
		n := x.Poller.Poll(4, func(c *transport.Completion) {
			switch {
			case c.Match != transport.MatchOK:
				x.Fail(c)
			case c.Opcode == prm.CQEReq:
				x.SendsOut--
			case c.Opcode == prm.CQERespSend && c.ByteCount == uint32(size):
				got = true
			default:
				x.Fail(c)
			}
		})
		if x.Failed {
			return x.CompletionError(seq)
		}
		if n == 0 {
			if err := x.Idle(spins, &since, seq); err != nil {
				return err
			}
		}
	}
	return x.QP.BeginRecv(0).SGE(x.RecvAddr, uint32(len(x.Recv)), x.LKey).FinishDoorbell()
}

// postWrite writes message seq: size bytes of the source area, the last
// one seq's low byte, into the peer's buffer with a signaled RDMA_WRITE,
// inline when it fits, through BlueFlame.
func (x *end) postWrite(size int, seq uint32) error {
	x.Src[size-1] = byte(seq)
	s, err := x.QP.Post(uint64(seq), wqebuilder.Signaled)
	if err != nil {
		return err
	}
	x.SendsOut++
	d := s.RdmaWrite(x.PeerRecv, x.RKey)
	if size <= x.MaxInline {
		return d.Inline(x.Src[:size]).FinishBlueFlame()
	}
	return d.SGE(x.SrcAddr, uint32(size), x.LKey).FinishBlueFlame()
}

// awaitLastByte busy-polls the last byte of the size-byte message in the
// receive area until it is seq's low byte, with the end's timeout.
func (x *end) awaitLastByte(size int, seq uint32) error {
	want := byte(seq)
	var since time.Time
	for spins := 1; lastByte(x.recv, size) != want; spins++ {
		if err := x.Idle(spins, &since, seq); err != nil {
			return fmt.Errorf("%w (the last byte of the %d-byte buffer is %#02x, want %#02x)", err, size, lastByte(x.recv, size), want)
		}
	}
	return nil
}

// lastByte reads byte size-1 of b, which the peer's writes change under
// the program: an atomic load of the aligned word holding it (b starts on
// a page), so that the compiler reads memory on every call.
func lastByte(b []byte, size int) byte {
	i := size - 1
	var word [4]byte
	binary.NativeEndian.PutUint32(word[:], atomic.LoadUint32((*uint32)(unsafe.Pointer(&b[i&^3]))))
	return word[i&3]
}

// perftestServe waits on ln for perftest's client (ib_write_lat SERVER)
// and runs write_lat against it.
func perftestServe(cfg config, ln net.Listener, stdout io.Writer) error {
	defer ln.Close()
	if d, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
		_ = d.SetDeadline(time.Now().Add(perftool.AcceptWait(cfg.timeout)))
	}
	conn, err := ln.Accept()
	if err != nil {
		return fmt.Errorf("accept: %w", err)
	}
	defer conn.Close()
	return perftestRun(cfg, conn, true, stdout)
}

// perftestDial connects to perftest's server (ib_write_lat waiting on -p)
// and runs write_lat against it.
func perftestDial(cfg config, stdout io.Writer) error {
	conn, err := net.DialTimeout("tcp", cfg.client, cfg.timeout)
	if err != nil {
		return fmt.Errorf("connect to %s: %w", cfg.client, err)
	}
	defer conn.Close()
	return perftestRun(cfg, conn, false, stdout)
}
