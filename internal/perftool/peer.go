package perftool

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"os"
	"reflect"
	"strings"
	"sync"
	"syscall"
	"time"
	"unicode"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/admit"
	"github.com/mlx5kit/mlx5kit/internal/linger"
	"github.com/mlx5kit/mlx5kit/internal/perftestwire"
	"github.com/mlx5kit/mlx5kit/internal/sealed"
	"github.com/mlx5kit/mlx5kit/sim"
)

// ErrPeerFailed is returned by Sync when the peer said it failed.
var ErrPeerFailed = errors.New("the peer failed (its output says why)")

// Run runs the command's end as chosen by server and client (the flags'
// values, at most one of them set) and returns its exit status: serve
// gets a listener on server, dial runs when client is set, local
// otherwise. A server or client first calls probe, which opens and
// closes the device the end will use (ProbeDevice): a device that does
// not open fails the end at once, not once a peer has come. A failure is
// printed on stderr after the command's name.
func Run(name, server, client string, stdout, stderr io.Writer, probe func() error, serve func(net.Listener) error, dial, local func() error) int {
	var err error
	switch {
	case server != "":
		ShareSoftwareFabric()
		var ln net.Listener
		if err = probe(); err != nil {
			break
		}
		if ln, err = net.Listen("tcp", server); err == nil {
			fmt.Fprintf(stdout, "listening on %v\n", ln.Addr())
			err = serve(ln)
		}
	case client != "":
		ShareSoftwareFabric()
		if err = probe(); err != nil {
			break
		}
		err = dial()
	default:
		err = local()
	}
	if err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", name, err)
		return 1
	}
	return 0
}

// Accept waits for the client of a server on ln, for up to ten timeouts
// (AcceptWait), closes ln and returns the client's connection, its
// fixed-size parameters read into params: a pointer to a struct of
// unsigned integers, the first the tool's magic number, magic (as for
// binary.Read, big-endian). With a key (sec.Key) the client first proves
// that it holds the key (the authentication of internal/sealed), then
// sends its parameters in a sealed frame: the server reads nothing of a
// peer that has not proved the key, and the peer learns nothing. Without a
// key (sec.InsecureLoopback: loopback only) the parameters come raw. The
// connection's deadline is one timeout away.
//
// Connections are greeted side by side, each given one timeout from its
// accept, at most acceptMaxGreeting at once: past that, the one that has
// waited longest without proving the key (of a host holding more than a
// quarter of the places, if one does) is closed to make room
// (admit.Gate), so that silent connections cannot keep the client out. One that fails before it
// has sent parameters (it does not prove the key, closes, stays silent, is
// closed for a newer one, sends what is not this protocol) is refused: it
// is closed, refused (when not nil, called from Accept's goroutine) is
// told its remote address and the reason, and the server waits on for
// another; when the wait ends with no client, the error says that no
// client came within the wait, and names the last refusal. The first client to send good parameters is the one; the
// connections still being greeted then are closed. A connection whose
// error is plainly the user's mistake ends the wait at once with that
// error: at a server without a key, a client that speaks perftest's
// exchange (ErrPerftestClient, known from its first four bytes; with a
// key, four bytes anyone could send before any proof, it is refused and
// the refusal says so), one whose
// magic number is not magic (ErrBadParams, see CheckMagic; with a key,
// read only once it proved the key), one that proved the key and sent
// parameters of another size (ErrBadParams: another version of the tool),
// and, at a server without a key, a client that proves one.
//
// The client is answered before Accept returns. check, when not nil, is
// called once params holds the parameters; its error ends the wait.
// Where the client sent this protocol (every case above but perftest's
// client and a key at one end only), a client whose parameters are bad
// or fail check is told the reason (RefuseClient), and its Dial fails
// with ErrRefused; the one taken is told so, and its Dial returns.
func Accept(ln net.Listener, timeout time.Duration, sec endpoint.Security, magic uint32, params any, check func() error, refused func(from net.Addr, err error)) (net.Conn, error) {
	defer ln.Close()
	if d, ok := ln.(interface{ SetDeadline(time.Time) error }); ok {
		_ = d.SetDeadline(time.Now().Add(AcceptWait(timeout)))
	}
	// Each connection is greeted in a goroutine of its own, into
	// parameters of its own, at most acceptMaxGreeting at once: past that
	// the one that has waited longest without proving the key is closed,
	// so that silent connections cannot hold out the client.
	type greeting struct {
		conn           net.Conn
		params         reflect.Value
		refusal, fatal error
	}
	gate := admit.New(acceptMaxGreeting)
	greeted := make(chan greeting)
	stop := make(chan struct{})
	acceptErr := make(chan error, 1)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			conn, err := ln.Accept()
			if err != nil {
				acceptErr <- err
				return
			}
			t, ok := gate.Admit(conn, stop)
			if !ok {
				conn.Close()
				return
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				p := reflect.New(reflect.TypeOf(params).Elem())
				refusal, fatal := greet(conn, timeout, sec, magic, p.Interface(), t)
				t.Done()
				greeted <- greeting{conn, p, t.Explain(refusal), fatal}
			}()
		}
	}()
	var last error
	var count int
	report := func(g greeting) {
		// greet closed the connection.
		count++
		last = fmt.Errorf("from %v: %w", g.conn.RemoteAddr(), g.refusal)
		if refused != nil {
			refused(g.conn.RemoteAddr(), g.refusal)
		}
	}
	// finish stops accepting, closes the connections still being greeted
	// and takes every greeting's end: those refused before are reported,
	// and every connection but keep is closed.
	finish := func(keep net.Conn) {
		close(stop)
		ln.Close()
		gate.Close()
		go func() { wg.Wait(); close(greeted) }()
		for g := range greeted {
			switch {
			case g.refusal == nil:
				if g.conn != keep {
					g.conn.Close()
				}
			case !errors.Is(g.refusal, net.ErrClosed):
				report(g)
			}
		}
	}
	for {
		select {
		case g := <-greeted:
			switch {
			case g.fatal != nil:
				g.conn.Close()
				finish(nil)
				return nil, g.fatal
			case g.refusal == nil:
				finish(g.conn)
				reflect.ValueOf(params).Elem().Set(g.params.Elem())
				if check != nil {
					if err := check(); err != nil {
						return nil, RefuseClient(g.conn, err)
					}
				}
				if err := admitClient(g.conn); err != nil {
					g.conn.Close()
					return nil, err
				}
				return g.conn, nil
			}
			report(g)
		case err := <-acceptErr:
			finish(nil)
			came := "no client came"
			if errors.Is(err, os.ErrDeadlineExceeded) {
				came = fmt.Sprintf("no client came within %v (ten timeouts)", AcceptWait(timeout))
			}
			if last != nil {
				return nil, fmt.Errorf("accept: %w (%s; refused %d connection(s), the last %w)", err, came, count, last)
			}
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return nil, fmt.Errorf("accept: %s: %w", came, err)
			}
			return nil, fmt.Errorf("accept: %w", err)
		}
	}
}

// acceptMaxGreeting bounds the connections a tool's server greets at once
// (Accept); past it the gate evicts as the mesh's does (admit.Gate).
const acceptMaxGreeting = 128

// maxParamsFrame is the longest sealed frame of parameters Accept reads:
// longer than any tool's, so that the frame of another tool's client is
// read and its magic number named.
const maxParamsFrame = 1 << 10

// greet reads the parameters of the client on conn into params (see
// Accept). A connection refused is closed and the reason returned as
// refusal; err, when not nil, ends the server's wait (the caller closes
// conn).
func greet(conn net.Conn, timeout time.Duration, sec endpoint.Security, magic uint32, params any, t *admit.Ticket) (refusal, err error) {
	deadline := time.Now().Add(timeout)
	_ = conn.SetDeadline(deadline)
	// The first four bytes apart: a client that speaks perftest's
	// exchange sends its version string and waits for the server's,
	// short of the parameters.
	var first [4]byte
	if _, err := io.ReadFull(conn, first[:]); err != nil {
		conn.Close()
		return fmt.Errorf("read the client's first bytes: %w", err), nil
	}
	if v, ok := perftestwire.Version(first[:]); ok {
		err := fmt.Errorf("read the client's parameters: %w (it sent version %q)", ErrPerftestClient, v)
		if len(sec.Key) > 0 {
			// Four bytes anyone can send, before any proof: refused,
			// and the server waits on.
			conn.Close()
			return err, nil
		}
		return nil, err
	}
	size := binary.Size(params)
	var b []byte
	if len(sec.Key) > 0 {
		replay := &replayConn{Conn: conn, r: io.MultiReader(bytes.NewReader(first[:]), conn)}
		// sealed.Accept closes conn when it fails.
		sc, err := sealed.Accept(replay, sec.Key, sealed.ToolParameters, max(time.Until(deadline), time.Millisecond))
		if err != nil {
			if binary.BigEndian.Uint32(first[:]) == magic {
				err = fmt.Errorf("%w (it sent this tool's parameters without proving the key first: a client without a key, or one older than this server?)", err)
			}
			return err, nil
		}
		t.Authenticated()
		_ = conn.SetDeadline(deadline)
		if b, err = sc.ReadFrame(max(size, maxParamsFrame)); err != nil {
			conn.Close()
			return fmt.Errorf("read the client's parameters: %w", err), nil
		}
		if len(b) < len(first) {
			return nil, RefuseClient(conn, fmt.Errorf("%w: %d bytes of parameters, want %d", ErrBadParams, len(b), size))
		}
		// The authentication is over: what follows (the endpoints'
		// exchange) is read from conn itself.
	} else {
		switch m := binary.BigEndian.Uint32(first[:]); {
		case m == sealed.Magic && m != magic:
			return nil, fmt.Errorf("the client proves a key and this server has none (both ends need the same key: $%s or -key-file)", EnvKey)
		case m != magic:
			return nil, RefuseClient(conn, CheckMagic(m, magic))
		}
		b = make([]byte, size)
		copy(b, first[:])
		if _, err := io.ReadFull(conn, b[len(first):]); err != nil {
			conn.Close()
			return fmt.Errorf("read the client's parameters: %w", err), nil
		}
	}
	if err := CheckMagic(binary.BigEndian.Uint32(b), magic); err != nil {
		return nil, RefuseClient(conn, err)
	}
	if len(b) != size {
		return nil, RefuseClient(conn, fmt.Errorf("%w: %d bytes of parameters, want %d: is the client another version of this tool?", ErrBadParams, len(b), size))
	}
	if err := binary.Read(bytes.NewReader(b), binary.BigEndian, params); err != nil {
		return nil, RefuseClient(conn, fmt.Errorf("read the client's parameters: %w", err))
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	return nil, nil
}

// replayConn is a connection whose first bytes, already read from it, are
// read again from r.
type replayConn struct {
	net.Conn
	r io.Reader
}

func (c *replayConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite closes the connection's sending side, where it has one, so
// that a refusal drains what the peer sent before it closes.
func (c *replayConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return errors.ErrUnsupported
}

// Refusals returns Accept's refused for a command: it prints each refusal
// on w as one line after the command's name.
func Refusals(w io.Writer, name string) func(net.Addr, error) {
	return func(from net.Addr, err error) {
		fmt.Fprintf(w, "%s: refused the connection from %v: %v; waiting for another client\n", name, from, err)
	}
}

// ErrBadParams is what a server's error matches when it refuses the
// parameters its client sent.
var ErrBadParams = errors.New("the client sent bad parameters")

// CheckMagic refuses a client's parameters whose magic number, their first
// field, is not want: the error matches ErrBadParams and names both as the
// four letters they spell, so that a client of the other tool (mlx5kit-perf's
// "MXPF" at mlx5kit-pingpong's server, which wants "MXPN", or the other way
// round) or of no tool says so.
func CheckMagic(magic, want uint32) error {
	if magic == want {
		return nil
	}
	spell := func(m uint32) string { return string(binary.BigEndian.AppendUint32(nil, m)) }
	return fmt.Errorf("%w: magic %q (%#08x), want %q: the client is not this tool's", ErrBadParams, spell(magic), magic, spell(want))
}

// ErrPerftestClient is Accept's error for a client that speaks perftest's
// own TCP exchange, which begins with perftest's version string.
var ErrPerftestClient = errors.New("the client speaks perftest's exchange, not this tool's")

// AcceptWait is how long a server waits for its client: ten timeouts, or
// the longest duration when that overflows.
func AcceptWait(timeout time.Duration) time.Duration {
	if timeout > math.MaxInt64/10 {
		return math.MaxInt64
	}
	return 10 * timeout
}

// Dial connects to the server at addr and sends it params (a struct of
// unsigned integers, as for binary.Write, big-endian): with a key
// (sec.Key), once both ends have proved that they hold it, in a sealed
// frame (see Accept); without one, raw. It returns once the server has
// taken them; a server that refuses them (the client of another tool,
// another version, a value out of range) makes Dial fail with an error
// matching ErrRefused that gives the server's reason. The connection's
// deadline is one timeout away.
func Dial(addr string, timeout time.Duration, sec endpoint.Security, params any) (net.Conn, error) {
	b, err := binary.Append(nil, binary.BigEndian, params)
	if err != nil {
		return nil, fmt.Errorf("send the parameters: %w", err)
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.Dial("tcp", addr)
	if errors.Is(err, syscall.ECONNREFUSED) {
		return nil, fmt.Errorf("%w (no server listens there: start the server first, on that port; a server serves one client, then exits)", err)
	}
	if err != nil {
		return nil, err
	}
	_ = conn.SetDeadline(time.Now().Add(timeout))
	if len(sec.Key) == 0 {
		_, err = conn.Write(b)
	} else {
		// sealed.Dial closes conn when it fails. It reads through first,
		// which keeps the server's first bytes: perftest's server sends
		// its version string first, where this server sends its
		// challenge.
		first := &firstBytes{Conn: conn}
		var sc sealed.Conn
		if sc, err = sealed.Dial(first, sec.Key, sealed.ToolParameters, timeout); err != nil {
			if v, ok := perftestwire.Version(first.got); ok {
				return nil, fmt.Errorf("authenticate with the server: %w (it sent version %q): %w", ErrPerftestServer, v, err)
			}
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) {
				// A server that hangs up on the proof holds no key
				// (one without a key closes at once) or another.
				return nil, fmt.Errorf("authenticate with the server: %w (the server hung up: both ends need the same key: $%s or -key-file)", err, EnvKey)
			}
			return nil, fmt.Errorf("authenticate with the server: %w", ExplainKey(err))
		}
		_ = conn.SetDeadline(time.Now().Add(timeout))
		err = sc.WriteFrame(b)
	}
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("send the parameters: %w", err)
	}
	if err := readAnswer(conn, timeout); err != nil {
		conn.Close()
		return nil, err
	}
	return conn, nil
}

// firstBytes is a connection that keeps the first four bytes read from
// it, for Dial to tell which kind of server sent them.
type firstBytes struct {
	net.Conn
	got []byte
}

func (c *firstBytes) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	if k := min(n, 4-len(c.got)); k > 0 {
		c.got = append(c.got, p[:k]...)
	}
	return n, err
}

// The server's answer to a client's parameters: the first byte the server
// sends (admitClient, RefuseClient), which Dial reads before it returns. A refusal goes on with its
// reason: two bytes of length (big-endian) and the text.
const (
	answerAdmit  = '+'
	answerRefuse = '-'
	// maxRefusal bounds the reason a refusal carries.
	maxRefusal = 1 << 10
	// refuseWait bounds how long RefuseClient waits for the client to read the
	// reason and hang up.
	refuseWait = time.Second
)

// ErrRefused is what a client's error matches when the server refused its
// parameters (Dial); the error carries the server's reason: the client of
// another tool, another version of this one, or a value out of the
// server's range.
var ErrRefused = errors.New("the server refused this client")

// admitClient tells the client on conn that the server takes its
// parameters (Accept, once check passed them): the client's Dial returns.
func admitClient(conn net.Conn) error {
	if _, err := conn.Write([]byte{answerAdmit}); err != nil {
		return fmt.Errorf("admit the client: %w", err)
	}
	return nil
}

// RefuseClient tells the client on conn why the server refuses its parameters
// (why's text, cut to 1 KiB), closes conn once the client has read it and
// hung up (or after a second), and returns why. The client's Dial returns
// an error matching ErrRefused with the reason.
func RefuseClient(conn net.Conn, why error) error {
	msg := why.Error()
	if len(msg) > maxRefusal {
		msg = msg[:maxRefusal]
	}
	b := binary.BigEndian.AppendUint16([]byte{answerRefuse}, uint16(len(msg)))
	b = append(b, msg...)
	_ = conn.SetDeadline(time.Now().Add(refuseWait))
	if _, err := conn.Write(b); err != nil {
		conn.Close()
		return why
	}
	_ = linger.Close(conn, refuseWait, 1<<20)
	return why
}

// readAnswer reads the server's answer to the parameters Dial sent on
// conn (see admitClient and RefuseClient), which comes within timeout.
func readAnswer(conn net.Conn, timeout time.Duration) error {
	var a [3]byte
	if _, err := io.ReadFull(conn, a[:1]); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return fmt.Errorf("read the server's answer to the parameters: %w (no answer within %v: is the server this tool's, of this version?)", err, timeout)
		}
		return fmt.Errorf("read the server's answer to the parameters: %w (the server hung up without one: a server serves one client and may have taken another, or it is not this tool's, of this version)", err)
	}
	switch a[0] {
	case answerAdmit:
		return nil
	case answerRefuse:
		if _, err := io.ReadFull(conn, a[1:]); err != nil {
			return fmt.Errorf("%w (its reason was cut short: %w)", ErrRefused, err)
		}
		msg := make([]byte, min(int(binary.BigEndian.Uint16(a[1:])), maxRefusal))
		if _, err := io.ReadFull(conn, msg); err != nil {
			return fmt.Errorf("%w (its reason was cut short: %w)", ErrRefused, err)
		}
		return fmt.Errorf("%w: %s", ErrRefused, strings.Map(func(r rune) rune {
			if unicode.IsGraphic(r) {
				return r
			}
			return '?'
		}, string(msg)))
	}
	// Not this protocol's answer: what a server of another kind sends
	// first, in its first four bytes.
	var m [4]byte
	m[0] = a[0]
	if _, err := io.ReadFull(conn, m[1:]); err == nil {
		if binary.BigEndian.Uint32(m[:]) == sealed.Magic {
			// The server began the authentication, which a server
			// with a key sends first.
			return fmt.Errorf("the server holds a key and this client has none: both ends need the same key ($%s or -key-file)", EnvKey)
		}
		if v, ok := perftestwire.Version(m[:]); ok {
			return fmt.Errorf("%w (it sent version %q)", ErrPerftestServer, v)
		}
	}
	return fmt.Errorf("read the server's answer to the parameters: %#02x is neither an admission nor a refusal: is the server this tool's, of this version?", a[0])
}

// ErrPerftestServer is Dial's error for a server that speaks perftest's
// own TCP exchange, which begins with perftest's version string.
var ErrPerftestServer = errors.New("the server speaks perftest's exchange, not this tool's")

// ExplainKey adds to an error of the authentication that it matches
// endpoint.ErrKeyRequired, ErrAuth or ErrRejected, where it does, that
// both ends need the same key and where it comes from.
func ExplainKey(err error) error {
	if errors.Is(err, endpoint.ErrKeyRequired) || errors.Is(err, endpoint.ErrAuth) || errors.Is(err, endpoint.ErrRejected) {
		return fmt.Errorf("%w (both ends need the same key: $%s or -key-file)", err, EnvKey)
	}
	return err
}

// EnvKey names the environment variable holding the pre-shared key of
// -server and -client when -key-file names no file.
const EnvKey = "MLX5KIT_KEY"

// Security returns how -server and -client authenticate each other: with
// the key in the -key-file file (surrounding white space dropped) or in
// $MLX5KIT_KEY, else without a key, which endpoint.Exchange allows only
// between two ends on this host. A -server on an address other hosts can
// reach needs a key. The string says what is wrong, or is "".
func (f Flags) Security() (endpoint.Security, string) {
	var key []byte
	source := "$" + EnvKey
	if *f.KeyFile != "" {
		b, err := os.ReadFile(*f.KeyFile)
		if err != nil {
			return endpoint.Security{}, fmt.Sprintf("-key-file: %v", err)
		}
		key, source = bytes.TrimSpace(b), "-key-file "+*f.KeyFile
		if len(key) == 0 {
			return endpoint.Security{}, source + " is empty"
		}
	} else {
		key = []byte(os.Getenv(EnvKey))
	}
	switch {
	case len(key) >= endpoint.MinKeySize:
		return endpoint.Security{Key: key}, ""
	case len(key) > 0:
		return endpoint.Security{}, fmt.Sprintf("the key in %s is %d bytes, at least %d: make one with head -c 32 /dev/urandom | base64",
			source, len(key), endpoint.MinKeySize)
	case *f.Server != "" && !LoopbackAddress(*f.Server):
		return endpoint.Security{}, fmt.Sprintf("-server %s without a key would hand this end's endpoint (addresses, rkeys) to anyone who connects: "+
			"give both ends the same key in $%s (e.g. export %s=$(head -c 32 /dev/urandom | base64)) or -key-file, or listen on 127.0.0.1",
			*f.Server, EnvKey, EnvKey)
	}
	return endpoint.Security{InsecureLoopback: true}, ""
}

// LoopbackAddress reports whether the host of address (HOST:PORT) is a
// loopback address or "localhost": only this host reaches it.
func LoopbackAddress(address string) bool {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.Unmap().IsLoopback()
}

// Handshake swaps endpoints over conn (local is this end's, side the
// side of conn it is on, sec the key both ends prove they hold), connects
// this end's queue pair (number qpn) with connect and waits until the
// peer's is connected too, so that no message reaches a queue pair that
// is not ready for it.
func Handshake(conn net.Conn, side endpoint.Side, sec endpoint.Security, timeout time.Duration, c *ctx.Context, qpn uint32, local endpoint.Endpoint, connect func(endpoint.Endpoint) error) error {
	tctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	peer, err := endpoint.Exchange(tctx, conn, side, local, sec)
	if err != nil {
		return fmt.Errorf("exchange endpoints: %w", ExplainKey(err))
	}
	refuse := func(err error) error { return Refuse(conn, timeout, err) }
	if OwnQueuePair(local, peer) {
		// A loop to itself would measure this end alone (on a NIC too,
		// where SameModel accepts every peer).
		return refuse(fmt.Errorf("exchange endpoints: the peer named this end's own queue pair %#x%s", peer.QPN, OwnQueuePairHint(c)))
	}
	if err := SameModel(c, qpn, peer); err != nil {
		return refuse(err)
	}
	if err := connect(peer); err != nil {
		return refuse(err)
	}
	if err := Sync(conn, timeout, nil); err != nil {
		return fmt.Errorf("connect to the peer's queue pair %#x: %w", peer.QPN, err)
	}
	return nil
}

// OwnQueuePairHint says, on a shared software fabric, how a peer can name
// this end's own queue pair (OwnQueuePair): a process that does not share
// this one's /dev/shm starts a fabric of the same name alone, and numbers
// its queue pairs as this one does. It is "" on a NIC or a model of one
// process.
func OwnQueuePairHint(c *ctx.Context) string {
	f := sim.FromContext(c)
	if f == nil {
		return ""
	}
	name, _ := f.SharedFabric()
	if name == "" {
		return ""
	}
	return fmt.Sprintf(" (on the software fabric %q: does the peer name the same fabric ($%s) and share this process's /dev/shm? One on another fabric, or in another container or mount namespace, is alone on its fabric and numbers its queue pairs alike)", name, sim.EnvFabric)
}

// OwnQueuePair reports whether peer names local's queue pair: the same QPN
// and LID, and the same GID where peer gives one (a record without a GID
// names a port by its LID). A tool connected to it would measure a loop to
// itself.
func OwnQueuePair(local, peer endpoint.Endpoint) bool {
	return peer.QPN == local.QPN && peer.LID == local.LID && (peer.GID == ctx.GID{} || peer.GID == local.GID)
}

// SameModel refuses a peer the software HCA cannot reach: a queue pair
// this process's model does not know (or one with this end's own number,
// qpn), unless it lies with a live process of the shared fabric the model
// joined (see ShareSoftwareFabric). On a NIC it accepts every peer.
func SameModel(c *ctx.Context, qpn uint32, peer endpoint.Endpoint) error {
	f := sim.FromContext(c)
	if f == nil {
		return nil
	}
	if peer.QPN == qpn || !f.Reaches(peer.QPN) {
		if name, _ := f.SharedFabric(); name != "" {
			return fmt.Errorf("the peer's QP %#x is in no process of the software fabric %q: do both ends name the same fabric ($%s)?", peer.QPN, name, sim.EnvFabric)
		}
		return fmt.Errorf("the peer's QP %#x is not on this process's software HCA: the model lives inside one process unless both ends join a shared fabric ($%s), so run both ends in one (no -server/-client), name a fabric, or use a NIC", peer.QPN, sim.EnvFabric)
	}
	return nil
}

// ShareSoftwareFabric makes the software HCA of this process join a fabric
// shared with other processes when it opens its first device: the one
// $MLX5KIT_SIM_FABRIC names, else sim.DefaultFabricName. The tools call it
// for -server and -client, so that two processes on the software HCA
// reach each other; it changes nothing on a NIC, nor once the software HCA
// is open.
func ShareSoftwareFabric() {
	if os.Getenv(sim.EnvFabric) == "" {
		_ = os.Setenv(sim.EnvFabric, sim.DefaultFabricName)
	}
}

// LeaveSoftwareFabric gives back this process's slot of the shared
// software fabric, when it joined one, and with it its ring file in
// /dev/shm (a ring up to 32 MiB per sender): the tools call it as they
// exit, so that the rings do not stay until the next process joins the
// fabric. The software HCA is closed for good: it belongs at the end of
// main, not of a run a test may repeat.
//
// The software HCA under the emulated kernel (MLX5KIT_EMULATE=1 with the
// mlx5 provider) leaves its shared fabric the same way.
func LeaveSoftwareFabric() {
	for _, f := range []*sim.Fabric{sim.Default(), emulate.Fabric()} {
		if f == nil {
			continue
		}
		if name, _ := f.SharedFabric(); name != "" {
			_ = f.Close()
		}
	}
}

// Refuse tells the peer over conn that this end fails with err, the
// refusal of what the peer sent after the endpoints' exchange (Sync with
// err): the peer then fails with ErrPeerFailed rather than find the
// connection closed. It returns err.
func Refuse(conn net.Conn, timeout time.Duration, err error) error {
	_ = Sync(conn, timeout, err)
	return err
}

// Status bytes of Sync. statusAlive is KeepAlive's: the peer is still
// there, measuring.
const (
	statusOK     = 1
	statusFailed = 2
	statusAlive  = 3
)

// Sync tells the peer whether this end is fine (failed nil) and waits for
// the peer to say the same; a peer that failed is ErrPeerFailed. The
// deadline, timeout, covers the whole wait, the peer's measurement
// included, but each byte of a peer's KeepAlive moves it timeout on: a
// peer that measures for longer than timeout keeps this end waiting, one
// whose process is gone or stopped (SIGSTOP) for timeout does not. A peer
// whose measurement hangs while its process runs keeps saying it is
// there; its own waits (their timeouts) end it.
func Sync(conn net.Conn, timeout time.Duration, failed error) error {
	_ = conn.SetDeadline(time.Now().Add(timeout))
	b := [1]byte{statusOK}
	if failed != nil {
		b[0] = statusFailed
	}
	if _, err := conn.Write(b[:]); err != nil {
		return fmt.Errorf("synchronize with the peer: %w", peerClosed(err))
	}
	for {
		if _, err := io.ReadFull(conn, b[:]); err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				return fmt.Errorf("synchronize with the peer: no word from it for %v (--timeout): %w", timeout, err)
			}
			return fmt.Errorf("synchronize with the peer: %w", peerClosed(err))
		}
		if b[0] != statusAlive {
			break
		}
		_ = conn.SetDeadline(time.Now().Add(timeout))
	}
	if b[0] != statusOK {
		return ErrPeerFailed
	}
	return nil
}

// AliveEvery is how often KeepAlive tells the peer this end is there.
const AliveEvery = 250 * time.Millisecond

// KeepAlive tells the peer waiting in Sync, every AliveEvery, that this
// end is still there while it measures, so that a measurement may last
// longer than the peer's timeout. The returned stop ends it and returns
// once nothing more will be written: call it before this end's Sync. The
// caller must not write conn meanwhile.
func KeepAlive(conn net.Conn) (stop func()) {
	quit, finished := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		t := time.NewTicker(AliveEvery)
		defer t.Stop()
		b := []byte{statusAlive}
		for {
			select {
			case <-quit:
				return
			case <-t.C:
				_ = conn.SetWriteDeadline(time.Now().Add(4 * AliveEvery))
				if _, err := conn.Write(b); err != nil {
					return // the peer gone: the measurement's waits say so
				}
			}
		}
	}()
	return func() {
		close(quit)
		<-finished
	}
}

// peerClosed returns err, a read or write on the connection to the peer,
// as endpoint.ErrPeerGone when the peer closed or reset the connection.
func peerClosed(err error) error {
	switch {
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return endpoint.ErrPeerGone
	case errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE):
		return fmt.Errorf("%w (%w)", endpoint.ErrPeerGone, err)
	}
	return err
}
