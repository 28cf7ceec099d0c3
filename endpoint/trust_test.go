package endpoint

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/big"
	"net"
	"os"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/stretchr/testify/require"
)

// The hostile clients below speak the wire by hand, from these
// definitions, not through the code under test.
const (
	wireMagic     uint32 = 0x4d584d53
	wireHello     byte   = 1
	wireTable     byte   = 2
	wireAbort     byte   = 3
	wireChallenge byte   = 4
	wireProof     byte   = 5
	wireOffer     byte   = 6
)

// rawFrame is a mesh frame of any version.
func rawFrame(version uint16, typ byte, payload []byte) []byte {
	b := binary.BigEndian.AppendUint32(nil, wireMagic)
	b = binary.BigEndian.AppendUint16(b, version)
	b = append(b, typ, 0)
	b = binary.BigEndian.AppendUint32(b, uint32(len(payload)))
	return append(b, payload...)
}

// refusal is the one answer a refused connection gets: an empty abort.
var refusal = rawFrame(2, wireAbort, nil)

// v1Hello is the hello of the first, unauthenticated protocol: rank, peer
// count and the dialer's endpoints, all at once.
func v1Hello(t *testing.T, rank, peers uint32, endpoints []Endpoint) []byte {
	p := binary.BigEndian.AppendUint32(nil, rank)
	p = binary.BigEndian.AppendUint32(p, peers)
	for _, e := range endpoints {
		var err error
		p, err = e.AppendBinary(p)
		require.NoError(t, err)
	}
	return rawFrame(1, wireHello, p)
}

// v2Hello is the first message of the authenticated protocol.
func v2Hello(rank, peers uint32) []byte {
	p := make([]byte, 32, 40)
	_, _ = rand.Read(p)
	p = binary.BigEndian.AppendUint32(p, rank)
	p = binary.BigEndian.AppendUint32(p, peers)
	return rawFrame(2, wireHello, p)
}

// readRawFrame reads one frame's header and (up to 64 KiB of) payload.
func readRawFrame(r io.Reader) (typ byte, payload []byte, err error) {
	var h [12]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[8:])
	if n > 64<<10 {
		return 0, nil, fmt.Errorf("frame of %d bytes", n)
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(r, payload)
	return h[6], payload, err
}

// secretEndpoint is an endpoint whose region address and rkey are easy to
// find in a byte stream.
func secretEndpoint(i, j int) Endpoint {
	e := meshEndpoint(i, j)
	e.Regions = []RemoteRegion{{
		Address:   0x5ec2e70000000000 | uint64(i)<<24 | uint64(j)<<8,
		Length:    1 << 20,
		RemoteKey: 0xc0ffee00 | uint32(i)<<4 | uint32(j),
		Access:    ctx.AccessRemoteRead | ctx.AccessRemoteWrite | ctx.AccessRemoteAtomic,
	}}
	return e
}

// requireNoSecret fails when b holds the address or rkey of a region of
// any endpoint in es.
func requireNoSecret(t *testing.T, b []byte, es []Endpoint, msg string) {
	t.Helper()
	for _, e := range es {
		for _, r := range e.Regions {
			require.False(t, bytes.Contains(b, binary.BigEndian.AppendUint32(nil, r.RemoteKey)), "%s: rkey %#x leaked in %x", msg, r.RemoteKey, b)
			require.False(t, bytes.Contains(b, binary.BigEndian.AppendUint64(nil, r.Address)), "%s: address %#x leaked in %x", msg, r.Address, b)
		}
	}
}

// secretLocal is meshLocal with secret regions in every endpoint.
func secretLocal(n int) [][]Endpoint {
	local := make([][]Endpoint, n)
	for i := range local {
		local[i] = make([]Endpoint, n)
		for j := range local[i] {
			local[i][j] = secretEndpoint(i, j)
		}
	}
	return local
}

// startListener runs rank 0 of a mesh of n ranks in the background; wait
// returns its result.
func startListener(t *testing.T, ctx context.Context, l *MeshListener, local []Endpoint) (wait func() ([]Endpoint, error)) {
	t.Helper()
	var remote []Endpoint
	var err error
	done := make(chan struct{})
	go func() {
		defer close(done)
		remote, err = l.Exchange(ctx, local)
	}()
	return func() ([]Endpoint, error) { <-done; return remote, err }
}

// talk dials addr, runs say (which may read through r, a reader that
// records), then reads what is left until the listener closes. It returns
// every byte the listener sent.
func talk(t *testing.T, addr string, say func(c net.Conn, r io.Reader)) []byte {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
	var got bytes.Buffer
	r := io.TeeReader(c, &got)
	say(c, r)
	_, err = io.Copy(io.Discard, r)
	if err != nil && !errors.Is(err, syscall.ECONNRESET) {
		require.NoError(t, err, "the listener must close, not let the client wait")
	}
	return got.Bytes()
}

// TestMeshImpostorFirstGetsNothing: clients without the key dial rank 0
// before the real ranks, claiming rank 1 (in the old protocol, and in the
// new one with a guessed or a reflected proof). None receives a region, an
// rkey or the peer count: the bytes each gets are at most a challenge and
// the generic refusal. The real ranks then join.
func TestMeshImpostorFirstGetsNothing(t *testing.T) {
	noLeak(t)
	const n = 5
	local := secretLocal(n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := ListenMesh(ctx, "127.0.0.1:0", n, testOpts)
	require.NoError(t, err)
	addr := l.Addr().String()
	wait := startListener(t, ctx, l, local[0])

	// An impostor's endpoints for the other ranks: any valid ones.
	fake := []Endpoint{meshEndpoint(1, 0), meshEndpoint(1, 2), meshEndpoint(1, 3), meshEndpoint(1, 4)}
	v2 := func(rank, peers uint32, proof func(challenge []byte) []byte) func(c net.Conn, r io.Reader) {
		return func(c net.Conn, r io.Reader) {
			_, err := c.Write(v2Hello(rank, peers))
			require.NoError(t, err)
			typ, challenge, err := readRawFrame(r)
			if err != nil || typ != wireChallenge || len(challenge) != 64 {
				return // refused at once
			}
			_, err = c.Write(rawFrame(2, wireProof, proof(challenge)))
			require.NoError(t, err)
			offer := v1Hello(t, 0, 0, fake)[20:]
			_, _ = c.Write(rawFrame(2, wireOffer, append(offer, make([]byte, 32)...)))
		}
	}
	zero := func([]byte) []byte { return make([]byte, 32) }
	reflect := func(ch []byte) []byte { return ch[32:] }
	impostors := []struct {
		name      string
		say       func(c net.Conn, r io.Reader)
		challenge bool // a challenge comes before the refusal
	}{
		{"old protocol, rank 1", func(c net.Conn, _ io.Reader) {
			_, err := c.Write(v1Hello(t, 1, n, fake))
			require.NoError(t, err)
		}, false},
		{"old protocol, another peer count", func(c net.Conn, _ io.Reader) {
			_, err := c.Write(v1Hello(t, 1, 7, fake[:3]))
			require.NoError(t, err)
		}, false},
		{"rank 1 with a guessed proof", v2(1, n, zero), true},
		{"rank 1 with the listener's own proof sent back", v2(1, n, reflect), true},
		{"another peer count", v2(1, 7, zero), true},
		{"rank out of range", v2(9, n, zero), true},
	}
	for _, im := range impostors {
		got := talk(t, addr, im.say)
		requireNoSecret(t, got, local[0], im.name)
		want := len(refusal)
		if im.challenge {
			want += 12 + 64
		}
		require.Len(t, got, want, "%s: a challenge at most, then the refusal; got %x", im.name, got)
		require.Equal(t, refusal, got[len(got)-len(refusal):], "%s: the same generic refusal", im.name)
	}

	remote, errs, wg := runDialers(ctx, addr, local)
	wg.Wait()
	remote[0], errs[0] = wait()
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
	checkTransposeOf(t, secretEndpoint, remote)
}

// recordConn keeps every byte read from the connection.
type recordConn struct {
	net.Conn
	mu  sync.Mutex
	got bytes.Buffer
}

func (c *recordConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	c.got.Write(b[:n])
	c.mu.Unlock()
	return n, err
}

func (c *recordConn) bytes() []byte {
	c.mu.Lock()
	defer c.mu.Unlock()
	return bytes.Clone(c.got.Bytes())
}

// keyHolder dials addr, proves it holds testKey while claiming rank of
// peers, and sends an offer for that many peers. It returns the
// connection, which records what it reads, and the session.
func keyHolder(t *testing.T, addr string, rank, peers int) (*recordConn, *session) {
	t.Helper()
	raw, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	t.Cleanup(func() { raw.Close() })
	require.NoError(t, raw.SetDeadline(time.Now().Add(5*time.Second)))
	c := &recordConn{Conn: raw}
	s, err := dialAuth(c, testSec, purposeMesh, uint32(rank), uint32(peers))
	require.NoError(t, err)
	row := make([]Endpoint, peers)
	for j := range row {
		row[j] = meshEndpoint(rank, j)
	}
	offer, err := encodeOthers(nil, row, rank)
	require.NoError(t, err)
	_ = s.writeSealed(toListener, meshOffer, offer) // refused peers may be cut off
	return c, s
}

// TestMeshRefusalIsGeneric: peers that hold the key but claim a peer count
// or a rank the mesh does not have, or a rank already taken, get the very
// refusal a peer without the key gets, after the same challenge.
func TestMeshRefusalIsGeneric(t *testing.T) {
	noLeak(t)
	const n = 3
	local := secretLocal(n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := ListenMesh(ctx, "127.0.0.1:0", n, testOpts)
	require.NoError(t, err)
	addr := l.Addr().String()
	wait := startListener(t, ctx, l, local[0])

	keyless := talk(t, addr, func(c net.Conn, r io.Reader) {
		_, err := c.Write(v2Hello(1, n))
		require.NoError(t, err)
		_, _, err = readRawFrame(r)
		require.NoError(t, err)
		_, err = c.Write(rawFrame(2, wireProof, make([]byte, 32)))
		require.NoError(t, err)
	})
	require.Len(t, keyless, 12+64+len(refusal))
	for _, claim := range []struct{ rank, peers int }{{1, 7}, {1, 2}, {0, n}, {n, n}, {200, n}} {
		c, _ := keyHolder(t, addr, claim.rank, claim.peers)
		_, _ = io.Copy(io.Discard, c)
		got := c.bytes()
		requireNoSecret(t, got, local[0], fmt.Sprint(claim))
		require.Len(t, got, len(keyless), "claim %+v: %x", claim, got)
		require.Equal(t, refusal, got[12+64:], "claim %+v: the refusal a peer without the key gets", claim)
	}

	// Two key holders claim rank 1: once rank 2 joins, one gets the table
	// and the other the refusal.
	a, sa := keyHolder(t, addr, 1, n)
	b, sb := keyHolder(t, addr, 1, n)
	remote2, err := DialMesh(ctx, addr, 2, local[2], testOpts)
	require.NoError(t, err)
	remote0, err := wait()
	require.NoError(t, err)
	require.Equal(t, secretEndpoint(0, 2), remote2[0])
	require.Equal(t, meshEndpoint(1, 0), remote0[1], "the key holder that joined offered meshEndpoint")
	tables := 0
	for _, x := range []struct {
		c *recordConn
		s *session
	}{{a, sa}, {b, sb}} {
		_, _ = io.Copy(io.Discard, x.c)
		got := x.c.bytes()[12+64:]
		// The claimant that loses gets the refusal; or, when the mesh
		// completed while its claim was pending, its connection closed
		// with nothing more, or (its proof checked) a sealed abort that
		// says the mesh is complete: in every case no table.
		if len(got) == 0 || bytes.Equal(got, refusal) {
			continue
		}
		f, err := readFrame(bytes.NewReader(got), meshTable, maxListPayload(n, macSize), maxAbortReason+macSize)
		require.NoError(t, err)
		body, err := x.s.openSealed(toDialer, f.header[:], f.payload)
		require.NoError(t, err)
		if f.typ == meshAbort {
			require.Contains(t, string(body), "complete", "the late claimant's abort")
			continue
		}
		tables++
		list, err := decodeList(body, n-1)
		require.NoError(t, err)
		require.Equal(t, []Endpoint{secretEndpoint(0, 1), secretEndpoint(2, 1)}, list)
	}
	require.Equal(t, 1, tables, "one claimant joins, the other is refused")
}

// TestMeshReplayRefused: the hello, proof and offer of a rank that joined
// one mesh, replayed byte for byte to another listener with the same key,
// are refused: the listener's nonce is new, so the recorded proof is
// worthless.
func TestMeshReplayRefused(t *testing.T) {
	noLeak(t)
	local := secretLocal(2)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l1, err := ListenMesh(ctx, "127.0.0.1:0", 2, testOpts)
	require.NoError(t, err)
	wait1 := startListener(t, ctx, l1, local[0])

	// A proxy between rank 1 and the listener records what rank 1 sends.
	proxy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer proxy.Close()
	var sent bytes.Buffer
	proxied := make(chan struct{})
	go func() {
		defer close(proxied)
		in, err := proxy.Accept()
		if err != nil {
			return
		}
		defer in.Close()
		out, err := net.Dial("tcp", l1.Addr().String())
		if err != nil {
			return
		}
		defer out.Close()
		back := make(chan struct{})
		go func() { _, _ = io.Copy(in, out); _ = in.Close(); close(back) }()
		_, _ = io.Copy(io.MultiWriter(out, &sent), in)
		<-back
	}()
	_, err = DialMesh(ctx, proxy.Addr().String(), 1, local[1], testOpts)
	require.NoError(t, err)
	_, err = wait1()
	require.NoError(t, err)
	<-proxied
	require.Greater(t, sent.Len(), 12+40+12+32, "hello, proof and offer recorded")

	l2, err := ListenMesh(ctx, "127.0.0.1:0", 2, testOpts)
	require.NoError(t, err)
	wait2 := startListener(t, ctx, l2, local[0])
	got := talk(t, l2.Addr().String(), func(c net.Conn, _ io.Reader) {
		_, _ = c.Write(sent.Bytes())
	})
	requireNoSecret(t, got, local[0], "replay")
	require.Len(t, got, 12+64+len(refusal), "a challenge, then the refusal: %x", got)
	require.Equal(t, refusal, got[12+64:])
	// The real rank 1 still joins.
	remote1, err := DialMesh(ctx, l2.Addr().String(), 1, local[1], testOpts)
	require.NoError(t, err)
	require.Equal(t, secretEndpoint(0, 1), remote1[0])
	_, err = wait2()
	require.NoError(t, err)
}

// TestMeshHugeHelloNotAllocated: connections whose header claims a hello
// as large as a full mesh's (1.6 MB) are refused on the header, before the
// payload is read or allocated.
func TestMeshHugeHelloNotAllocated(t *testing.T) {
	noLeak(t)
	row := make([]Endpoint, MaxPeers)
	for j := range row {
		row[j] = Endpoint{Transport: TransportRC, QPN: uint32(j + 1), MTU: ctx.MTU4096}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := ListenMesh(ctx, "127.0.0.1:0", MaxPeers, testOpts)
	require.NoError(t, err)
	addr := l.Addr().String()
	wait := startListener(t, ctx, l, row)

	huge := uint32(8 + (MaxPeers-1)*maxEncodedSize)
	const conns = 64
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	for i := range conns {
		version := uint16(1 + i%2) // the old protocol's hello, and the new one's
		h := rawFrame(version, wireHello, nil)
		binary.BigEndian.PutUint32(h[8:], huge)
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = c.Write(h)
		require.NoError(t, err)
		// The answer comes without a byte of payload sent.
		require.NoError(t, c.SetDeadline(time.Now().Add(2*time.Second)))
		got, err := io.ReadAll(c)
		require.NoError(t, err, "connection %d (version %d) must be refused on its header", i, version)
		require.Equal(t, refusal, got)
		_ = c.Close()
	}
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	require.Less(t, allocated, uint64(8<<20), "%d connections claiming %d bytes each made the process allocate %d bytes", conns, huge, allocated)
	cancel()
	_, err = wait()
	require.ErrorIs(t, err, context.Canceled)
}

// TestMeshSlowLorisCut: a client that sends its hello a byte at a time is
// cut off at the hello timeout, long before the mesh's deadline; the mesh
// completes meanwhile. A dialer whose listener never answers is cut off
// the same way.
func TestMeshSlowLorisCut(t *testing.T) {
	noLeak(t)
	const n = 3
	local := secretLocal(n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := testOpts
	opts.HelloTimeout = 200 * time.Millisecond
	l, err := ListenMesh(ctx, "127.0.0.1:0", n, opts)
	require.NoError(t, err)
	addr := l.Addr().String()
	wait := startListener(t, ctx, l, local[0])

	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer c.Close()
	start := time.Now()
	cut := make(chan time.Duration, 1)
	go func() {
		_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, _ = io.Copy(io.Discard, c)
		cut <- time.Since(start)
	}()
	hello := v2Hello(1, n)
	var took time.Duration
trickle:
	for i := 0; ; i = (i + 1) % len(hello) {
		select {
		case took = <-cut:
			break trickle
		case <-time.After(100 * time.Millisecond):
			if _, err := c.Write(hello[i : i+1]); err != nil {
				took = <-cut
				break trickle
			}
		}
	}
	require.Less(t, took, 900*time.Millisecond, "a trickling hello must be cut at the hello timeout")

	remote, errs, wg := runDialers(ctx, addr, local)
	wg.Wait()
	remote[0], errs[0] = wait()
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
	checkTransposeOf(t, secretEndpoint, remote)

	// The dialing side: a listener that accepts and never answers.
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer silent.Close()
	go func() {
		c, err := silent.Accept()
		if err == nil {
			_, _ = io.Copy(io.Discard, c)
			c.Close()
		}
	}()
	start = time.Now()
	_, err = DialMesh(ctx, silent.Addr().String(), 1, local[1], opts)
	require.ErrorIs(t, err, os.ErrDeadlineExceeded)
	require.NoError(t, ctx.Err())
	require.Less(t, time.Since(start), 2*time.Second)
}

// flakyListener fails Accept with EMFILE, as a process out of file
// descriptors does, fails times, then accepts.
type flakyListener struct {
	net.Listener
	fails atomic.Int64
	calls atomic.Int64
}

func (f *flakyListener) Accept() (net.Conn, error) {
	f.calls.Add(1)
	if f.fails.Add(-1) >= 0 {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: f.Addr(), Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return f.Listener.Accept()
}

// TestMeshAcceptTemporaryError: EMFILE from Accept does not end the mesh;
// it is retried, backing off, until it passes or the mesh's deadline.
func TestMeshAcceptTemporaryError(t *testing.T) {
	noLeak(t)
	const n = 3
	local := secretLocal(n)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	flaky := &flakyListener{Listener: ln}
	flaky.fails.Store(5)
	l, err := NewMeshListener(flaky, n, testOpts)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wait := startListener(t, ctx, l, local[0])
	remote, errs, wg := runDialers(ctx, l.Addr().String(), local)
	wg.Wait()
	remote[0], errs[0] = wait()
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
	checkTransposeOf(t, secretEndpoint, remote)
	require.GreaterOrEqual(t, flaky.calls.Load(), int64(5+n-1))

	// Failing for ever: the mesh ends at its deadline, says why, and the
	// retries back off (5, 10, 20, 40, 80, 160 ms: a handful, not a spin).
	ln, err = net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	flaky = &flakyListener{Listener: ln}
	flaky.fails.Store(1 << 40)
	l, err = NewMeshListener(flaky, n, testOpts)
	require.NoError(t, err)
	short, cancel2 := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel2()
	_, err = l.Exchange(short, local[0])
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, syscall.EMFILE)
	require.Contains(t, err.Error(), "last accept error (retried)")
	calls := flaky.calls.Load()
	require.GreaterOrEqual(t, calls, int64(4))
	require.LessOrEqual(t, calls, int64(12), "backs off between retries")
}

// testTLS returns a TLS configuration for both ends: a self-signed
// certificate for 127.0.0.1 that each side also trusts, and client
// certificates required.
func testTLS(t *testing.T) *tls.Config {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "mlx5kit mesh test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	pool := x509.NewCertPool()
	pool.AddCert(cert)
	return &tls.Config{
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key, Leaf: cert}},
		RootCAs:      pool,
		ClientCAs:    pool,
		ClientAuth:   tls.RequireAndVerifyClientCert,
		MinVersion:   tls.VersionTLS13,
	}
}

// recordListener records the bytes its connections read off the wire.
type recordListener struct {
	net.Listener
	mu    sync.Mutex
	conns []*recordConn
}

func (l *recordListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	rc := &recordConn{Conn: c}
	l.mu.Lock()
	l.conns = append(l.conns, rc)
	l.mu.Unlock()
	return rc, nil
}

// TestMeshTLS runs a mesh over TLS with a certificate made here: it
// completes, the endpoints never cross the wire in the clear, the
// caller's dialer is used, and a dialer without TLS does not get in.
func TestMeshTLS(t *testing.T) {
	noLeak(t)
	const n = 3
	local := secretLocal(n)
	cfg := testTLS(t)
	var dials atomic.Int64
	opts := testOpts
	opts.TLS = cfg
	opts.Dial = func(ctx context.Context, network, address string) (net.Conn, error) {
		dials.Add(1)
		var d net.Dialer
		return d.DialContext(ctx, network, address)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	rec := &recordListener{Listener: ln}
	l, err := NewMeshListener(rec, n, opts)
	require.NoError(t, err)
	addr := l.Addr().String()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	wait := startListener(t, ctx, l, local[0])

	plain, cancelPlain := context.WithTimeout(ctx, 2*time.Second)
	_, err = DialMesh(plain, addr, 1, local[1], testOpts)
	cancelPlain()
	require.Error(t, err, "a dialer without TLS")

	remote := make([][]Endpoint, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			remote[i], errs[i] = DialMesh(ctx, addr, i, local[i], opts)
		}()
	}
	wg.Wait()
	remote[0], errs[0] = wait()
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
	checkTransposeOf(t, secretEndpoint, remote)
	require.Equal(t, int64(n-1), dials.Load(), "every dialer used the caller's Dial")

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.conns, n)
	for _, c := range rec.conns[1:] {
		wire := c.bytes()
		require.NotEmpty(t, wire)
		require.Equal(t, byte(0x16), wire[0], "a TLS handshake record")
		for i := 1; i < n; i++ {
			requireNoSecret(t, wire, local[i], "TLS wire")
		}
	}

	// A listener's TLS configuration must name a certificate.
	ln2, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln2.Close()
	_, err = NewMeshListener(ln2, n, MeshOptions{Security: testSec, TLS: &tls.Config{}})
	require.ErrorIs(t, err, ErrNoCertificate)
}

// TestExchangeImpostorGetsNothing: a client without the key, speaking the
// old exchange or the new one, learns nothing of the accepting end's
// endpoint; and a dialing end sends nothing but its hello to an accepting
// end that cannot prove it holds the key.
func TestExchangeImpostorGetsNothing(t *testing.T) {
	secret := secretEndpoint(0, 1)
	bare, err := secretEndpoint(9, 9).MarshalBinary()
	require.NoError(t, err)
	clients := []struct {
		name      string
		say       func(c net.Conn, r io.Reader)
		challenge bool
		is        error
	}{
		{"old exchange: a bare endpoint", func(c net.Conn, _ io.Reader) {
			_, _ = c.Write(bare)
		}, false, errVersion},
		{"a guessed proof", func(c net.Conn, r io.Reader) {
			_, _ = c.Write(v2Hello(1, 2))
			if _, _, err := readRawFrame(r); err == nil {
				_, _ = c.Write(rawFrame(2, wireProof, make([]byte, 32)))
			}
		}, true, ErrAuth},
		{"the accepting end's proof sent back", func(c net.Conn, r io.Reader) {
			_, _ = c.Write(v2Hello(1, 2))
			if _, ch, err := readRawFrame(r); err == nil && len(ch) == 64 {
				_, _ = c.Write(rawFrame(2, wireProof, ch[32:]))
			}
		}, true, ErrAuth},
	}
	for _, cl := range clients {
		t.Run(cl.name, func(t *testing.T) {
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			served := make(chan error, 1)
			go func() {
				c, err := ln.Accept()
				if err != nil {
					served <- err
					return
				}
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				defer cancel()
				_, err = Exchange(ctx, c, AcceptSide, secret, testSec)
				_ = c.Close()
				served <- err
			}()
			got := talk(t, ln.Addr().String(), cl.say)
			requireNoSecret(t, got, []Endpoint{secret}, cl.name)
			want := len(refusal)
			if cl.challenge {
				want += 12 + 64
			}
			require.Len(t, got, want, "a challenge at most, then the refusal: %x", got)
			require.Equal(t, refusal, got[len(got)-len(refusal):])
			require.ErrorIs(t, <-served, cl.is)
		})
	}

	t.Run("dial side", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		defer ln.Close()
		heard := make(chan []byte, 1)
		go func() {
			c, err := ln.Accept()
			if err != nil {
				heard <- nil
				return
			}
			defer c.Close()
			_ = c.SetDeadline(time.Now().Add(5 * time.Second))
			var got bytes.Buffer
			r := io.TeeReader(c, &got)
			if _, _, err := readRawFrame(r); err == nil {
				// A challenge with a nonce and a proof made without the key.
				ch := make([]byte, 64)
				_, _ = rand.Read(ch)
				_, _ = c.Write(rawFrame(2, wireChallenge, ch))
			}
			_, _ = io.Copy(io.Discard, r)
			heard <- got.Bytes()
		}()
		c, err := net.Dial("tcp", ln.Addr().String())
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err = Exchange(ctx, c, DialSide, secret, testSec)
		require.ErrorIs(t, err, ErrAuth)
		require.NoError(t, ctx.Err())
		_ = c.Close()
		got := <-heard
		requireNoSecret(t, got, []Endpoint{secret}, "dial side")
		require.Len(t, got, 12+40, "the hello alone: %x", got)
	})
}

// TestDialMeshVersionMismatch: a listener of the first protocol answers a
// version 2 hello with its own abort; the dialer says what happened.
func TestDialMeshVersionMismatch(t *testing.T) {
	noLeak(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(5 * time.Second))
		var h [12]byte
		_, _ = io.ReadFull(c, h[:])
		_, _ = c.Write(rawFrame(1, wireAbort, []byte("mesh version at byte 4: unsupported version: 2, this package speaks 1")))
		_, _ = io.Copy(io.Discard, c)
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = DialMesh(ctx, ln.Addr().String(), 1, meshLocal(2)[1], testOpts)
	require.ErrorIs(t, err, errVersion)
	// What DialMesh's documentation tells a caller outside the package to
	// match.
	require.ErrorIs(t, err, ErrMalformed)
	var e *Error
	require.ErrorAs(t, err, &e)
	require.Equal(t, "mesh version", e.Field)
	require.Contains(t, err.Error(), "the peer speaks version 1, this package 2")
	require.NoError(t, ctx.Err())
}

// localConn is a connection that says it runs between two hosts.
type localConn struct{ net.Conn }

func (localConn) RemoteAddr() net.Addr { return &net.TCPAddr{IP: net.IPv4(192, 0, 2, 7), Port: 7471} }

// TestSecurityPolicy: no key is refused unless InsecureLoopback is asked
// for, and then only on this host; a short key is refused; a keyed end and
// a keyless one do not agree.
func TestSecurityPolicy(t *testing.T) {
	noLeak(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	local := meshLocal(3)
	insecure := MeshOptions{Security: Security{InsecureLoopback: true}}

	_, err := ListenMesh(ctx, "127.0.0.1:0", 3, MeshOptions{})
	require.ErrorIs(t, err, ErrKeyRequired)
	_, err = DialMesh(ctx, "127.0.0.1:1", 1, local[1], MeshOptions{})
	require.ErrorIs(t, err, ErrKeyRequired)
	_, err = ListenMesh(ctx, "127.0.0.1:0", 3, MeshOptions{Security: Security{Key: []byte("short")}})
	require.ErrorIs(t, err, ErrBadKey)
	_, err = ListenMesh(ctx, ":0", 3, insecure)
	require.ErrorIs(t, err, ErrKeyRequired, "no key on every interface")
	_, err = ListenMesh(ctx, "127.0.0.1:0", 3, MeshOptions{Security: testSec, HelloTimeout: -1})
	require.ErrorIs(t, err, errRange)

	// Without a key on loopback, when asked for.
	l, err := ListenMesh(ctx, "127.0.0.1:0", 3, insecure)
	require.NoError(t, err)
	addr := l.Addr().String()
	wait := startListener(t, ctx, l, local[0])
	_, err = DialMesh(ctx, addr, 1, local[1], testOpts)
	require.ErrorIs(t, err, ErrAuth, "a keyed dialer does not trust a keyless listener")
	remote := make([][]Endpoint, 3)
	errs := make([]error, 3)
	var wg sync.WaitGroup
	for i := 1; i < 3; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			remote[i], errs[i] = DialMesh(ctx, addr, i, local[i], insecure)
		}()
	}
	wg.Wait()
	remote[0], errs[0] = wait()
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
	checkTranspose(t, local, remote)

	// The exchange: no key is refused, InsecureLoopback works on a pipe,
	// and not on a connection to another host (nothing is written).
	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	_, err = Exchange(ctx, a, DialSide, sampleRC(), Security{})
	require.ErrorIs(t, err, ErrKeyRequired)
	_, err = Exchange(ctx, a, DialSide, sampleRC(), Security{Key: make([]byte, MinKeySize-1)})
	require.ErrorIs(t, err, ErrBadKey)
	_, err = Exchange(ctx, localConn{a}, DialSide, sampleRC(), Security{InsecureLoopback: true})
	require.ErrorIs(t, err, ErrKeyRequired)
	done := make(chan error, 1)
	go func() {
		_, err := Exchange(ctx, b, AcceptSide, sampleUD(), Security{InsecureLoopback: true})
		done <- err
	}()
	got, err := Exchange(ctx, a, DialSide, sampleRC(), Security{InsecureLoopback: true})
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.Equal(t, sampleUD(), got)
}

// TestMeshListenerCancelReturns: cancelling a mesh listener that waits for
// ranks returns at once, every time (the listener is closed even when the
// context's callback has not run yet).
func TestMeshListenerCancelReturns(t *testing.T) {
	noLeak(t)
	local := meshLocal(2)[0]
	for i := range 300 {
		l, err := ListenMesh(context.Background(), "127.0.0.1:0", 2, testOpts)
		require.NoError(t, err)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			_, err := l.Exchange(ctx, local)
			done <- err
		}()
		if i%2 == 1 {
			runtime.Gosched()
		}
		cancel()
		select {
		case err := <-done:
			require.ErrorIs(t, err, context.Canceled)
		case <-time.After(5 * time.Second):
			t.Fatalf("attempt %d: Exchange did not return after its context was cancelled", i)
		}
	}
}

// TestMeshRankGoneBeforeTheTableTLS: over TLS too, a rank that joined and
// died is dropped (its socket is looked at under the TLS connection), so
// the same rank joining again takes its place instead of being refused
// as a rank taken.
func TestMeshRankGoneBeforeTheTableTLS(t *testing.T) {
	noLeak(t)
	const n = 3
	local := meshLocal(n)
	opts := testOpts
	opts.TLS = testTLS(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := ListenMesh(ctx, "127.0.0.1:0", n, opts)
	require.NoError(t, err)
	addr := l.Addr().String()
	wait := startListener(t, ctx, l, local[0])

	dying, die := context.WithCancel(ctx)
	dead := make(chan error, 1)
	go func() { _, err := DialMesh(dying, addr, 2, local[2], opts); dead <- err }()
	time.Sleep(300 * time.Millisecond) // joined: it waits for the table
	die()
	require.Error(t, <-dead)
	time.Sleep(50 * time.Millisecond) // its connection closed

	r2 := make(chan error, 1)
	var remote2 []Endpoint
	go func() {
		var err error
		remote2, err = DialMesh(ctx, addr, 2, local[2], opts)
		r2 <- err
	}()
	time.Sleep(300 * time.Millisecond) // joined, or refused as a rank taken
	remote1, err := DialMesh(ctx, addr, 1, local[1], opts)
	require.NoError(t, err)
	require.NoError(t, <-r2, "rank 2 joining again")
	remote0, err := wait()
	require.NoError(t, err)
	checkTranspose(t, local, [][]Endpoint{remote0, remote1, remote2})
}
