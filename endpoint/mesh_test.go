package endpoint

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// noLeak fails the test when goroutines started during it are still running
// a moment after it (and its other cleanups) ended.
func noLeak(t *testing.T) {
	t.Helper()
	before := runtime.NumGoroutine()
	t.Cleanup(func() {
		deadline := time.Now().Add(3 * time.Second)
		for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
			time.Sleep(10 * time.Millisecond)
		}
		if n := runtime.NumGoroutine(); n > before {
			buf := make([]byte, 1<<16)
			t.Errorf("%d goroutines before, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
		}
	})
}

// testKey is the pre-shared key of the tests' meshes and exchanges.
var testKey = []byte("0123456789abcdef-test-key")

// testOpts are the mesh options of the tests: testKey, no TLS.
var testOpts = MeshOptions{Security: Security{Key: testKey}}

// meshEndpoint is the endpoint rank i makes for rank j: every field is a
// function of (i, j), so a misrouted endpoint is caught.
func meshEndpoint(i, j int) Endpoint {
	e := Endpoint{
		Transport: TransportRC,
		QPN:       uint32(i<<8 | j),
		LID:       uint16(1000 + i),
		GIDIndex:  uint8(j),
		PSN:       uint32(j<<12 | i),
		MTU:       ctx.MTU(1 + (i+j)%5),
	}
	e.GID[0], e.GID[15] = byte(i), byte(j)
	for k := range (i + j) % 4 {
		e.Regions = append(e.Regions, RemoteRegion{
			Address:   uint64(i)<<32 | uint64(j)<<16 | uint64(k),
			Length:    uint64(4096 * (k + 1)),
			RemoteKey: uint32(i*1000 + j*10 + k),
			Access:    ctx.AccessRemoteRead | ctx.AccessRemoteWrite,
		})
	}
	return e
}

func meshLocal(n int) [][]Endpoint {
	local := make([][]Endpoint, n)
	for i := range local {
		local[i] = make([]Endpoint, n)
		for j := range local[i] {
			local[i][j] = meshEndpoint(i, j)
		}
	}
	return local
}

func checkTranspose(t *testing.T, local, remote [][]Endpoint) {
	t.Helper()
	require.Len(t, remote, len(local))
	checkTransposeOf(t, meshEndpoint, remote)
}

// checkTransposeOf checks that remote[i][j] is made(j, i) for every i and
// j.
func checkTransposeOf(t *testing.T, made func(i, j int) Endpoint, remote [][]Endpoint) {
	t.Helper()
	for i := range remote {
		require.Len(t, remote[i], len(remote))
		for j := range remote[i] {
			// Independent of the code under test: rank j's endpoint for i.
			require.Equal(t, made(j, i), remote[i][j], "rank %d's view of rank %d", i, j)
		}
	}
}

func TestMesh16(t *testing.T) {
	noLeak(t)
	const n = 16
	local := meshLocal(n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	remote, err := Mesh(ctx, "127.0.0.1:0", local)
	require.NoError(t, err)
	checkTranspose(t, local, remote)
}

func TestMeshOne(t *testing.T) {
	local := meshLocal(1)
	remote, err := Mesh(context.Background(), "127.0.0.1:0", local)
	require.NoError(t, err)
	checkTranspose(t, local, remote)
}

func TestMeshSelfEntryNotSent(t *testing.T) {
	// A rank's own entry is never on the wire, so the zero Endpoint is
	// allowed there (a peer with no loopback queue).
	local := meshLocal(3)
	for i := range local {
		local[i][i] = Endpoint{}
	}
	remote, err := Mesh(context.Background(), "127.0.0.1:0", local)
	require.NoError(t, err)
	for i := range remote {
		for j := range remote[i] {
			if i == j {
				require.Equal(t, Endpoint{}, remote[i][j])
			} else {
				require.Equal(t, meshEndpoint(j, i), remote[i][j])
			}
		}
	}
}

func TestMeshDCOneEndpointForAll(t *testing.T) {
	// Over DC a peer offers the same DCT to everyone.
	const n = 5
	dct := func(i int) Endpoint {
		return Endpoint{Transport: TransportDC, QPN: uint32(i), LID: uint16(i), MTU: ctx.MTU4096,
			DCTNumber: uint32(0x100 + i), DCAccessKey: uint64(0xdc00 + i)}
	}
	local := make([][]Endpoint, n)
	for i := range local {
		for range n {
			local[i] = append(local[i], dct(i))
		}
	}
	remote, err := Mesh(context.Background(), "127.0.0.1:0", local)
	require.NoError(t, err)
	for i := range remote {
		for j := range remote[i] {
			require.Equal(t, dct(j), remote[i][j])
		}
	}
}

// freeAddress returns a loopback address nobody listens on right now.
func freeAddress(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// runDialers dials ranks 1..n-1 of local in goroutines.
func runDialers(ctx context.Context, addr string, local [][]Endpoint) ([][]Endpoint, []error, *sync.WaitGroup) {
	remote := make([][]Endpoint, len(local))
	errs := make([]error, len(local))
	var wg sync.WaitGroup
	for i := 1; i < len(local); i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			remote[i], errs[i] = DialMesh(ctx, addr, i, local[i], testOpts)
		}()
	}
	return remote, errs, &wg
}

func TestMeshDialersBeforeListener(t *testing.T) {
	noLeak(t)
	const n = 4
	local := meshLocal(n)
	addr := freeAddress(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	remote, errs, wg := runDialers(ctx, addr, local)
	time.Sleep(150 * time.Millisecond) // the dialers retry meanwhile
	l, err := ListenMesh(ctx, addr, n, testOpts)
	require.NoError(t, err)
	remote[0], errs[0] = l.Exchange(ctx, local[0])
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
	checkTranspose(t, local, remote)
}

func TestMeshSurvivesGarbageConnections(t *testing.T) {
	noLeak(t)
	const n = 3
	local := meshLocal(n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := ListenMesh(ctx, "127.0.0.1:0", n, testOpts)
	require.NoError(t, err)
	addr := l.Addr().String()

	var remote0 []Endpoint
	var err0 error
	done := make(chan struct{})
	go func() {
		defer close(done)
		remote0, err0 = l.Exchange(ctx, local[0])
	}()

	// Garbage first: text, a foreign protocol version, a hello of the
	// wrong size, a hello as long as the old protocol's. Each gets the
	// generic refusal, an empty abort, and is closed.
	garbage := [][]byte{
		[]byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"),
		func() []byte { b := meshFrame(meshHello, nil); binary.BigEndian.PutUint16(b[4:], 9); return b }(),
		meshFrame(meshHello, make([]byte, helloSize-1)),
		func() []byte {
			p := binary.BigEndian.AppendUint32(nil, 1)
			p = binary.BigEndian.AppendUint32(p, n)
			return meshFrame(meshHello, append(p, "not an endpoint at all, not at all......................................"...))
		}(),
	}
	for _, g := range garbage {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_, err = c.Write(g)
		require.NoError(t, err)
		require.NoError(t, c.SetDeadline(time.Now().Add(5*time.Second)))
		got, err := io.ReadAll(c)
		require.NoError(t, err, "garbage %q", g)
		require.Equal(t, meshFrame(meshAbort, nil), got, "garbage %q", g)
		_ = c.Close()
	}
	// An idle connection that never says anything must not hold the mesh up.
	idle, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	defer idle.Close()

	remote, errs, wg := runDialers(ctx, addr, local)
	wg.Wait()
	<-done
	remote[0], errs[0] = remote0, err0
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
	checkTranspose(t, local, remote)
}

func TestMeshMissingRank(t *testing.T) {
	noLeak(t)
	const n = 3
	local := meshLocal(n)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	l, err := ListenMesh(ctx, "127.0.0.1:0", n, testOpts)
	require.NoError(t, err)
	var derr error
	dialed := make(chan struct{})
	go func() {
		defer close(dialed)
		// The dialer would wait longer than the listener: it is told.
		_, derr = DialMesh(context.Background(), l.Addr().String(), 1, local[1], testOpts)
	}()
	start := time.Now()
	_, err = l.Exchange(ctx, local[0])
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Contains(t, err.Error(), "2 of 3 ranks joined")
	require.Contains(t, err.Error(), "missing ranks [2]")
	<-dialed
	require.Less(t, time.Since(start), 3*time.Second)
	require.ErrorIs(t, derr, ErrRejected)
	require.Contains(t, derr.Error(), "waiting for ranks [2]")
}

func TestMeshDuplicateRank(t *testing.T) {
	noLeak(t)
	const n = 3
	local := meshLocal(n)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	l, err := ListenMesh(ctx, "127.0.0.1:0", n, testOpts)
	require.NoError(t, err)
	addr := l.Addr().String()
	var remote0 []Endpoint
	var err0 error
	done := make(chan struct{})
	go func() { defer close(done); remote0, err0 = l.Exchange(ctx, local[0]) }()

	type result struct {
		remote []Endpoint
		err    error
	}
	results := make(chan result, 2)
	for range 2 {
		go func() {
			r, err := DialMesh(ctx, addr, 1, local[1], testOpts)
			results <- result{r, err}
		}()
	}
	first := <-results // the one turned away answers first
	require.ErrorIs(t, first.err, ErrRejected)
	require.NotContains(t, first.err.Error(), "rank 1 has", "the refusal is generic")

	remote2, err2 := DialMesh(ctx, addr, 2, local[2], testOpts)
	require.NoError(t, err2)
	second := <-results
	require.NoError(t, second.err)
	<-done
	require.NoError(t, err0)
	checkTranspose(t, local, [][]Endpoint{remote0, second.remote, remote2})
}

func TestDialMeshHostileListener(t *testing.T) {
	local := meshLocal(3)[1]
	good, err := encodeOthers(nil, meshLocal(3)[0], 1)
	require.NoError(t, err)
	sealed := func(typ byte, payload []byte) func(*session) []byte {
		return func(s *session) []byte {
			f := meshFrameSized(typ, payload, macSize)
			return append(f, s.seal(toDialer, f)...)
		}
	}
	raw := func(b []byte) func(*session) []byte { return func(*session) []byte { return b } }
	cases := []struct {
		name  string
		auth  bool                  // authenticate (with the key) before the reply
		reply func(*session) []byte // nil: send nothing and keep the connection open
		close bool
		is    []error
	}{
		{"random bytes", false, raw([]byte("\x8a\x01\xff\x00garbage garbage garbage")), false, []error{ErrMalformed, errBadMagic}},
		{"version 1 listener", false, raw(func() []byte {
			b := meshFrame(meshAbort, []byte("mesh version: 2, this package speaks 1"))
			binary.BigEndian.PutUint16(b[4:], 1)
			return b
		}()), false, []error{ErrMalformed, errVersion}},
		{"challenge with a wrong proof", false, raw(meshFrame(meshChallenge, make([]byte, challengeSize))), false, []error{ErrAuth}},
		{"challenge too long", false, raw(func() []byte {
			b := meshFrame(meshChallenge, nil)
			binary.BigEndian.PutUint32(b[8:], 1<<31)
			return b
		}()), false, []error{ErrMalformed, errLength}},
		{"abort with a reason before authenticating", false, raw(meshFrame(meshAbort, []byte("rank 1 is taken"))), false, []error{ErrMalformed, errLength}},
		{"generic refusal", true, raw(meshFrame(meshAbort, nil)), false, []error{ErrRejected}},
		{"huge table length", true, func(s *session) []byte {
			b := meshFrame(meshTable, nil)
			binary.BigEndian.PutUint32(b[8:], 1<<31)
			return b
		}, false, []error{ErrMalformed, errLength}},
		{"huge abort length", true, raw(func() []byte {
			b := meshFrame(meshAbort, nil)
			binary.BigEndian.PutUint32(b[8:], maxAbortReason+macSize+1)
			return b
		}()), false, []error{ErrMalformed, errLength}},
		{"unknown frame type", true, raw(func() []byte { b := meshFrame(meshTable, nil); b[6] = 9; return b }()), false, []error{ErrMalformed, errRange}},
		{"hello instead of table", true, raw(meshFrame(meshHello, nil)), false, []error{ErrMalformed}},
		{"table without a tag", true, raw(meshFrame(meshTable, good)), false, []error{ErrAuth}},
		{"table with a wrong tag", true, func(s *session) []byte {
			b := sealed(meshTable, good)(s)
			b[len(b)-1] ^= 1
			return b
		}, false, []error{ErrAuth}},
		{"table one endpoint short", true, sealed(meshTable, good[:sampleRC().encodedSize()]), false, []error{ErrMalformed}},
		{"table with trailing bytes", true, sealed(meshTable, append(append([]byte(nil), good...), 0)), false, []error{ErrMalformed, errTrailingBytes}},
		{"table endpoint invalid", true, func(s *session) []byte {
			p := append([]byte(nil), good...)
			p[offTransport] = 7
			return sealed(meshTable, p)(s)
		}, false, []error{ErrMalformed, errUnknownTransport}},
		{"truncated then close", true, func(s *session) []byte { return sealed(meshTable, good)(s)[:40] }, true, []error{ErrMalformed, errTruncated}},
		{"close at once", false, raw([]byte{}), true, []error{io.EOF}},
		{"close after the proofs", true, raw([]byte{}), true, []error{io.EOF, ErrPeerGone}},
		{"never answers", false, nil, false, []error{context.DeadlineExceeded}},
		{"never answers after the proofs", true, nil, false, []error{context.DeadlineExceeded}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			noLeak(t)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			served := make(chan struct{})
			go func() {
				defer close(served)
				conn, err := ln.Accept()
				if err != nil {
					return
				}
				defer conn.Close()
				_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
				var s *session
				if c.auth {
					if s, err = acceptAuth(conn, testOpts.Security, purposeMesh); err != nil {
						return
					}
					if _, err := readFrame(conn, meshOffer, maxListPayload(3, macSize), -1); err != nil {
						return
					}
				} else if _, err := readFrame(conn, meshHello, helloSize, -1); err != nil {
					return
				}
				if c.reply != nil {
					_, _ = conn.Write(c.reply(s))
				}
				if !c.close {
					_, _ = io.Copy(io.Discard, conn)
				}
			}()
			limit := 300 * time.Millisecond
			if c.reply != nil {
				limit = 5 * time.Second // must fail on the bytes, long before
			}
			ctx, cancel := context.WithTimeout(context.Background(), limit)
			defer cancel()
			start := time.Now()
			_, err = DialMesh(ctx, ln.Addr().String(), 1, local, testOpts)
			require.Error(t, err)
			for _, want := range c.is {
				require.ErrorIs(t, err, want)
			}
			require.Contains(t, err.Error(), "as rank 1")
			if slices.Contains(c.is, ErrPeerGone) {
				require.Contains(t, err.Error(), "receive table: rank 0 closed its connection without a table or a reason")
			}
			if c.reply != nil {
				require.NoError(t, ctx.Err(), "should fail on the bytes: %v", err)
			}
			require.Less(t, time.Since(start), limit+2*time.Second)
			<-served
		})
	}
}

func TestDialMeshNoListener(t *testing.T) {
	noLeak(t)
	ctx, cancel := context.WithTimeout(context.Background(), 250*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := DialMesh(ctx, freeAddress(t), 1, meshLocal(2)[1], testOpts)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Regexp(t, `after ([2-9]|\d\d+) attempts`, err.Error())
	require.Less(t, time.Since(start), 3*time.Second)
}

func TestMeshArgumentErrors(t *testing.T) {
	ctx := context.Background()
	local := meshLocal(3)

	_, err := DialMesh(ctx, "127.0.0.1:1", 0, local[0], testOpts)
	require.ErrorIs(t, err, errRange)
	_, err = DialMesh(ctx, "127.0.0.1:1", 3, local[0], testOpts)
	require.ErrorIs(t, err, errRange)
	_, err = DialMesh(ctx, "127.0.0.1:1", 1, make([]Endpoint, MaxPeers+1), testOpts)
	require.ErrorIs(t, err, errRange)
	bad := append([]Endpoint(nil), local[1]...)
	bad[2].PSN = 1 << 24
	_, err = DialMesh(ctx, "127.0.0.1:1", 1, bad, testOpts)
	require.ErrorIs(t, err, errInvalid)
	require.Contains(t, err.Error(), "endpoint for rank 2")

	_, err = ListenMesh(ctx, "127.0.0.1:0", 0, testOpts)
	require.ErrorIs(t, err, errRange)
	_, err = ListenMesh(ctx, "127.0.0.1:0", MaxPeers+1, testOpts)
	require.ErrorIs(t, err, errRange)

	l, err := ListenMesh(ctx, "127.0.0.1:0", 3, testOpts)
	require.NoError(t, err)
	_, err = l.Exchange(ctx, local[0][:2])
	require.ErrorIs(t, err, errInvalid)

	l, err = ListenMesh(ctx, "127.0.0.1:0", 3, testOpts)
	require.NoError(t, err)
	bad = append([]Endpoint(nil), local[0]...)
	bad[1].Transport = 0
	_, err = l.Exchange(ctx, bad)
	require.ErrorIs(t, err, errUnknownTransport)

	_, err = Mesh(ctx, "127.0.0.1:0", [][]Endpoint{local[0], local[1][:1], local[2]})
	require.ErrorIs(t, err, errInvalid)
}

func TestMeshChecksEveryEndpointFirst(t *testing.T) {
	noLeak(t)
	local := meshLocal(3)
	local[2][0].MTU = 0
	_, err := Mesh(context.Background(), "127.0.0.1:0", local)
	require.ErrorIs(t, err, errRange)
	require.ErrorIs(t, err, errInvalid)
	require.Contains(t, err.Error(), "rank 2's endpoint for rank 0")
}

func TestMeshListenFails(t *testing.T) {
	noLeak(t)
	// Rank 0 cannot listen (the address is taken): Mesh reports that at
	// once instead of letting the dialers wait out their deadline.
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	start := time.Now()
	_, err = Mesh(context.Background(), taken.Addr().String(), meshLocal(3))
	require.Error(t, err)
	require.Contains(t, err.Error(), "listen mesh")
	require.Less(t, time.Since(start), 5*time.Second)
}

func TestMeshListenerOnce(t *testing.T) {
	noLeak(t)
	ctx := context.Background()
	l, err := ListenMesh(ctx, "127.0.0.1:0", 1, testOpts)
	require.NoError(t, err)
	_, err = l.Exchange(ctx, meshLocal(1)[0])
	require.NoError(t, err)
	_, err = l.Exchange(ctx, meshLocal(1)[0])
	require.ErrorIs(t, err, ErrListenerUsed)

	l, err = ListenMesh(ctx, "127.0.0.1:0", 2, testOpts)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	start := time.Now()
	_, err = l.Exchange(ctx, meshLocal(2)[0])
	require.ErrorIs(t, err, ErrListenerUsed)
	require.Less(t, time.Since(start), time.Second)
}

// TestMeshListenerNilAndZero: the methods of a nil *MeshListener and of a
// zero MeshListener (not made by ListenMesh or NewMeshListener) do not
// panic: Addr returns nil, Close nil, and Exchange an error wrapping
// ctx.ErrInvalidArgument. Before, Addr and Exchange panicked on both and
// Close on the zero one.
func TestMeshListenerNilAndZero(t *testing.T) {
	var zero MeshListener
	for name, l := range map[string]*MeshListener{"nil": nil, "zero": &zero} {
		require.Nil(t, l.Addr(), name)
		_, err := l.Exchange(context.Background(), meshLocal(2)[0])
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
		require.ErrorContains(t, err, "mesh listener: exchange", name)
		require.NoError(t, l.Close(), name)
	}
}

// brokenListener fails every Accept with an error that is not temporary,
// as a listener closed under the mesh would.
type brokenListener struct{ net.Listener }

func (brokenListener) Accept() (net.Conn, error) { return nil, errBrokenAccept }

var errBrokenAccept = errors.New("accept: the listener is gone")

func TestMeshListenerAcceptFails(t *testing.T) {
	noLeak(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	l, err := NewMeshListener(brokenListener{ln}, 2, testOpts)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = l.Exchange(ctx, meshLocal(2)[0])
	require.ErrorIs(t, err, errBrokenAccept)
	require.NoError(t, ctx.Err(), "fails at once, not at the deadline")
}

// TestMeshGreetsABoundedNumber: a flood of connections that say nothing is
// greeted meshMaxGreeting at a time, the oldest closed as newer ones
// arrive, and the ranks that dial while they are all still open join at
// once, not after their hello timeouts.
func TestMeshGreetsABoundedNumber(t *testing.T) {
	noLeak(t)
	const n = 2
	local := meshLocal(n)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := ListenMesh(ctx, "127.0.0.1:0", n, testOpts)
	require.NoError(t, err)
	addr := l.Addr().String()
	before := runtime.NumGoroutine()
	var remote0 []Endpoint
	var err0 error
	done := make(chan struct{})
	go func() { defer close(done); remote0, err0 = l.Exchange(ctx, local[0]) }()
	var silent []net.Conn
	for i := 0; i < 3*meshMaxGreeting; i++ {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		silent = append(silent, c)
	}
	defer func() {
		for _, c := range silent {
			_ = c.Close()
		}
	}()
	// All but the last meshMaxGreeting are closed for newer ones. A
	// connection seen closed stays counted: a read whose deadline passed
	// before it ran (a loaded machine) reports a timeout, not the EOF.
	closed := make([]bool, len(silent))
	dropped := func(wait time.Duration) (k int) {
		for i, c := range silent {
			if !closed[i] {
				_ = c.SetReadDeadline(time.Now().Add(wait))
				_, err := io.Copy(io.Discard, c)
				closed[i] = err == nil // EOF
			}
			if closed[i] {
				k++
			}
		}
		return k
	}
	require.Eventually(t, func() bool { return dropped(time.Millisecond) == 2*meshMaxGreeting }, 10*time.Second, 10*time.Millisecond)
	time.Sleep(100 * time.Millisecond)
	require.Equal(t, 2*meshMaxGreeting, dropped(20*time.Millisecond), "silent connections closed")
	// The exchange, its accept loop and one goroutine per greeting (and
	// a watcher each at most).
	require.LessOrEqual(t, runtime.NumGoroutine()-before, 2+2*meshMaxGreeting, "goroutines for %d silent connections", len(silent))
	start := time.Now()
	remote, errs, wg := runDialers(ctx, addr, local)
	wg.Wait()
	<-done
	require.Less(t, time.Since(start), defaultHelloTimeout/2, "the silent connections held the listener")
	remote[0], errs[0] = remote0, err0
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
	checkTranspose(t, local, remote)
}

// TestMeshRankGoneBeforeTheTable: a rank that joined and then closed its
// connection before the mesh was complete (its process died) is dropped
// when rank 0 finds it gone, at the next arrival of its rank or once every
// rank is in, and the rank that joins again in its place completes the
// mesh. Rank 0 used to refuse the newcomer as a rank already taken and
// send the table to the dead connection, completing a mesh with a rank no
// one runs.
func TestMeshRankGoneBeforeTheTable(t *testing.T) {
	const n = 3
	local := meshLocal(n)
	// meshWithDeadRank2 starts rank 0 and a rank 2 that joins and dies.
	meshWithDeadRank2 := func(t *testing.T, ctx context.Context) (addr string, exchanged func() []Endpoint) {
		l, err := ListenMesh(ctx, "127.0.0.1:0", n, testOpts)
		require.NoError(t, err)
		var remote0 []Endpoint
		var err0 error
		done := make(chan struct{})
		go func() { defer close(done); remote0, err0 = l.Exchange(ctx, local[0]) }()
		dying, die := context.WithCancel(ctx)
		dead := make(chan error, 1)
		go func() { _, err := DialMesh(dying, l.Addr().String(), 2, local[2], testOpts); dead <- err }()
		time.Sleep(300 * time.Millisecond) // joined: it waits for the table
		die()
		require.Error(t, <-dead)
		time.Sleep(50 * time.Millisecond) // its connection closed
		return l.Addr().String(), func() []Endpoint {
			select {
			case <-done:
			case <-time.After(15 * time.Second):
				t.Fatal("rank 0 did not return")
			}
			require.NoError(t, err0)
			return remote0
		}
	}
	dialLater := func(t *testing.T, ctx context.Context, addr string, rank int) chan []Endpoint {
		r := make(chan []Endpoint, 1)
		go func() {
			remote, err := DialMesh(ctx, addr, rank, local[rank], testOpts)
			assert.NoError(t, err, "rank %d", rank)
			r <- remote
		}()
		time.Sleep(300 * time.Millisecond) // joined
		return r
	}

	t.Run("rank 2 again first", func(t *testing.T) {
		noLeak(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		addr, exchanged := meshWithDeadRank2(t, ctx)
		r2 := dialLater(t, ctx, addr, 2) // refused as a rank taken, before
		remote1, err := DialMesh(ctx, addr, 1, local[1], testOpts)
		require.NoError(t, err)
		checkTranspose(t, local, [][]Endpoint{exchanged(), remote1, <-r2})
	})
	t.Run("every rank in first", func(t *testing.T) {
		noLeak(t)
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		addr, exchanged := meshWithDeadRank2(t, ctx)
		r1 := dialLater(t, ctx, addr, 1) // the count complete, rank 2 dead
		remote2, err := DialMesh(ctx, addr, 2, local[2], testOpts)
		require.NoError(t, err, "the mesh waited for a rank 2 that lives")
		checkTranspose(t, local, [][]Endpoint{exchanged(), <-r1, remote2})
	})
}

// TestDialMeshListenerClosesBeforeChallenge: a listener that closes the
// connection before its challenge (not a mesh listener, or one evicting
// this host's waiting connections) is named as such, not as a bare EOF.
func TestDialMeshListenerClosesBeforeChallenge(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = DialMesh(ctx, ln.Addr().String(), 1, meshLocal(2)[1], testOpts)
	require.Error(t, err)
	require.Contains(t, err.Error(), "the listener closed the connection before its challenge")
}

// TestMeshFloodFromAnotherAddress: over real sockets, a host (127.0.0.2)
// that floods the mesh listener with silent connections evicts its own,
// never the older greeting of a rank on another address (127.0.0.1), which
// first in, first out would close first.
func TestMeshFloodFromAnotherAddress(t *testing.T) {
	noLeak(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	l, err := ListenMesh(ctx, "127.0.0.1:0", 2, testOpts)
	require.NoError(t, err)
	defer func() { _ = l.Close() }()
	addr := l.Addr().String()
	flooder := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	probe, err := flooder.Dial("tcp", addr)
	if err != nil {
		t.Skipf("no second loopback address to flood from: %v", err)
	}
	slow, err := net.Dial("tcp", addr) // a rank in the middle of its greeting
	require.NoError(t, err)
	defer func() { _ = slow.Close() }()
	flood := []net.Conn{probe}
	defer func() {
		for _, c := range flood {
			_ = c.Close()
		}
	}()
	// The listener greets only while an exchange runs.
	go func() { _, _ = l.Exchange(ctx, meshLocal(2)[0]) }()
	for i := 0; i < 3*meshMaxGreeting; i++ {
		c, err := flooder.Dial("tcp", addr)
		require.NoError(t, err)
		flood = append(flood, c)
	}
	closed := func(c net.Conn, wait time.Duration) bool {
		_ = c.SetReadDeadline(time.Now().Add(wait))
		_, err := io.Copy(io.Discard, c)
		return err == nil // EOF
	}
	require.Eventually(t, func() bool { return closed(flood[0], time.Millisecond) }, 10*time.Second, 10*time.Millisecond, "the flood's oldest connection was not closed")
	require.False(t, closed(slow, 50*time.Millisecond), "the greeting from the other address was closed for the flood")
}

// TestArgumentRangeErrorsAreInvalidArgument: a caller's peer count, rank,
// side or hello timeout out of range matches ctx.ErrInvalidArgument, as
// every other bad argument of the package does.
func TestArgumentRangeErrorsAreInvalidArgument(t *testing.T) {
	c := context.Background()
	local := meshLocal(3)
	_, err := DialMesh(c, "127.0.0.1:1", 0, local[0], testOpts)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = DialMesh(c, "127.0.0.1:1", 3, local[0], testOpts)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = DialMesh(c, "127.0.0.1:1", 1, make([]Endpoint, MaxPeers+1), testOpts)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = ListenMesh(c, "127.0.0.1:0", 0, testOpts)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = ListenMesh(c, "127.0.0.1:0", 3, MeshOptions{Security: testSec, HelloTimeout: -1})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = Mesh(c, "127.0.0.1:0", nil)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	a, _ := net.Pipe()
	_, err = Exchange(c, a, Side(0), sampleRC(), testSec)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}

// TestDialMeshNilConnFromDial: a MeshOptions.Dial that returns no
// connection and no error is an error, not a panic.
func TestDialMeshNilConnFromDial(t *testing.T) {
	opts := testOpts
	opts.Dial = func(context.Context, string, string) (net.Conn, error) { return nil, nil }
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := DialMesh(c, "127.0.0.1:1", 1, meshLocal(2)[1], opts)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "MeshOptions.Dial")
	var typed *net.TCPConn
	opts.Dial = func(context.Context, string, string) (net.Conn, error) { return typed, nil }
	_, err = DialMesh(c, "127.0.0.1:1", 1, meshLocal(2)[1], opts)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}

// TestDialMeshAlreadyCancelledSendsNothing: a DialMesh whose context has
// ended before it starts returns the context's error without sending a
// byte, even through a MeshOptions.Dial that does not look at the context.
func TestDialMeshAlreadyCancelledSendsNothing(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	got := make(chan int, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			got <- 0
			return
		}
		_ = c.SetReadDeadline(time.Now().Add(time.Second))
		n, _ := io.Copy(io.Discard, c)
		_ = c.Close()
		got <- int(n)
	}()
	opts := testOpts
	opts.Dial = func(_ context.Context, network, address string) (net.Conn, error) { return net.Dial(network, address) }
	c, cancel := context.WithCancel(context.Background())
	cancel()
	_, err = DialMesh(c, ln.Addr().String(), 1, meshLocal(2)[1], opts)
	require.ErrorIs(t, err, context.Canceled)
	_ = ln.Close()
	require.Zero(t, <-got, "bytes sent after the context ended")
}
