package endpoint

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// watchedMesh runs a mesh of n ranks in this process with a MeshWatch at
// every rank (looking every 10 ms) and opts' security and TLS; it returns
// the watches by rank once every exchange has succeeded, closed at the
// test's end.
func watchedMesh(t *testing.T, n int, opts MeshOptions) []*MeshWatch {
	t.Helper()
	local := meshLocal(n)
	watches := make([]*MeshWatch, n)
	for i := range watches {
		watches[i] = &MeshWatch{Interval: 10 * time.Millisecond}
		t.Cleanup(func() { _ = watches[i].Close() })
	}
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lo := opts
	lo.Watch = watches[0]
	l, err := ListenMesh(c, "127.0.0.1:0", n, lo)
	require.NoError(t, err)
	remote := make([][]Endpoint, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := 1; i < n; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			do := opts
			do.Watch = watches[i]
			remote[i], errs[i] = DialMesh(c, l.Addr().String(), i, local[i], do)
		}()
	}
	remote[0], errs[0] = l.Exchange(c, local[0])
	wg.Wait()
	for i, err := range errs {
		require.NoError(t, err, "rank %d", i)
	}
	checkTranspose(t, local, remote)
	return watches
}

// waitGone waits for w to see a rank gone and returns the cause.
func waitGone(t *testing.T, w *MeshWatch, rank int) error {
	t.Helper()
	require.Eventually(t, func() bool { return w.Err() != nil }, 5*time.Second, 5*time.Millisecond,
		"rank %d never saw a rank gone", rank)
	return w.Err()
}

func TestMeshWatchRankGone(t *testing.T) {
	noLeak(t)
	w := watchedMesh(t, 4, testOpts)
	// A context taken before anything happens ends with the cause.
	c1, stop := w[1].Context(context.Background())
	defer stop()
	time.Sleep(100 * time.Millisecond) // ten looks: nobody is gone
	for i, wi := range w {
		require.NoError(t, wi.Err(), "rank %d", i)
	}
	require.NoError(t, c1.Err())

	require.NoError(t, w[2].Close()) // rank 2 leaves, as its exit would
	err := waitGone(t, w[0], 0)
	require.ErrorIs(t, err, ErrPeerGone)
	require.ErrorContains(t, err, "rank 2")
	for _, r := range []int{1, 3} {
		err := waitGone(t, w[r], r)
		require.ErrorIs(t, err, ErrPeerGone, "rank %d", r)
		require.ErrorContains(t, err, `rank 0 says "rank 2 is gone"`, "rank %d", r)
	}
	select {
	case <-c1.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("rank 1's context did not end")
	}
	require.ErrorIs(t, context.Cause(c1), ErrPeerGone)
	require.ErrorIs(t, w[2].Err(), context.Canceled, "the rank that left")
}

func TestMeshWatchRankZeroGone(t *testing.T) {
	noLeak(t)
	w := watchedMesh(t, 3, testOpts)
	require.NoError(t, w[0].Close())
	for _, r := range []int{1, 2} {
		err := waitGone(t, w[r], r)
		require.ErrorIs(t, err, ErrPeerGone, "rank %d", r)
		require.ErrorContains(t, err, `rank 0 says "rank 0 left the mesh"`, "rank %d", r)
	}
}

func TestMeshWatchRankReset(t *testing.T) {
	noLeak(t)
	w := watchedMesh(t, 3, testOpts)
	// A reset, as a killed process's socket may end.
	w[1].mu.Lock()
	tc := w[1].links[0].raw.(*net.TCPConn)
	w[1].mu.Unlock()
	require.NoError(t, tc.SetLinger(0))
	require.NoError(t, w[1].Close())
	err := waitGone(t, w[0], 0)
	require.ErrorIs(t, err, ErrPeerGone)
	require.ErrorContains(t, err, "rank 1 reset its connection")
	require.ErrorContains(t, waitGone(t, w[2], 2), `rank 0 says "rank 1 is gone"`)
}

func TestMeshWatchOverTLS(t *testing.T) {
	noLeak(t)
	opts := testOpts
	opts.TLS = testTLS(t)
	w := watchedMesh(t, 3, opts)
	time.Sleep(50 * time.Millisecond)
	for i, wi := range w {
		require.NoError(t, wi.Err(), "rank %d", i)
	}
	require.NoError(t, w[2].Close())
	require.ErrorIs(t, waitGone(t, w[0], 0), ErrPeerGone)
	err := waitGone(t, w[1], 1)
	require.ErrorIs(t, err, ErrPeerGone)
	require.ErrorContains(t, err, `rank 0 says "rank 2 is gone"`)
}

func TestMeshWatchOneRank(t *testing.T) {
	w := watchedMesh(t, 1, testOpts)
	c, stop := w[0].Context(context.Background())
	defer stop()
	require.NoError(t, w[0].Err())
	require.NoError(t, w[0].Close())
	<-c.Done()
	require.ErrorIs(t, context.Cause(c), context.Canceled)
}

func TestMeshWatchServesOneExchange(t *testing.T) {
	noLeak(t)
	w := watchedMesh(t, 2, testOpts)
	opts := testOpts
	opts.Watch = w[1]
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := DialMesh(c, freeAddress(t), 1, meshLocal(2)[1], opts)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "MeshWatch")
	opts.Watch = w[0]
	l, err := ListenMesh(c, "127.0.0.1:0", 2, opts)
	require.NoError(t, err)
	_, err = l.Exchange(c, meshLocal(2)[0])
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	// The mesh is untouched.
	time.Sleep(50 * time.Millisecond)
	require.NoError(t, w[0].Err())
	require.NoError(t, w[1].Err())
}

func TestMeshWatchFreedByFailedExchange(t *testing.T) {
	noLeak(t)
	var w MeshWatch
	opts := testOpts
	opts.Watch = &w
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	_, err := DialMesh(short, freeAddress(t), 1, meshLocal(2)[1], opts)
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, w.Err(), "a failed exchange ends nothing")
	// The watch serves the next exchange.
	w.Interval = 10 * time.Millisecond
	lw := &MeshWatch{Interval: 10 * time.Millisecond}
	defer lw.Close()
	lo := testOpts
	lo.Watch = lw
	c, cancel2 := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel2()
	l, err := ListenMesh(c, "127.0.0.1:0", 2, lo)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := l.Exchange(c, meshLocal(2)[0]); done <- err }()
	_, err = DialMesh(c, l.Addr().String(), 1, meshLocal(2)[1], opts)
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.NoError(t, w.Close())
	require.ErrorIs(t, waitGone(t, lw, 0), ErrPeerGone)
}

func TestMeshWatchRefusesUnwatchableConn(t *testing.T) {
	noLeak(t)
	var w MeshWatch
	opts := testOpts
	opts.Watch = &w
	opts.Dial = func(context.Context, string, string) (net.Conn, error) {
		a, b := net.Pipe()
		_ = b.Close()
		return a, nil
	}
	_, err := DialMesh(context.Background(), "127.0.0.1:1", 1, meshLocal(2)[1], opts)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "net.pipe")
	// Over TLS the socket under it is what is looked at.
	raw, err := watchable(tls.Client(&net.TCPConn{}, &tls.Config{}))
	require.NoError(t, err)
	require.IsType(t, &net.TCPConn{}, raw)
	_, err = watchable(tls.Client(pipeConn{}, &tls.Config{}))
	require.True(t, errors.Is(err, ctx.ErrInvalidArgument))
}

// pipeConn is a net.Conn that is not a socket.
type pipeConn struct{ net.Conn }

// A rank without a MeshWatch closes its connection after the exchange,
// which a watching rank 0 cannot tell from the rank leaving: its watch
// ends, and the cause says that this may be why.
func TestMeshWatchRankWithoutWatch(t *testing.T) {
	noLeak(t)
	w := &MeshWatch{Interval: 10 * time.Millisecond}
	defer w.Close()
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	lo := testOpts
	lo.Watch = w
	l, err := ListenMesh(c, "127.0.0.1:0", 2, lo)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { _, err := DialMesh(c, l.Addr().String(), 1, meshLocal(2)[1], testOpts); done <- err }()
	_, err = l.Exchange(c, meshLocal(2)[0])
	require.NoError(t, err)
	require.NoError(t, <-done)
	err = waitGone(t, w, 0)
	require.ErrorIs(t, err, ErrPeerGone)
	require.ErrorContains(t, err, "rank 1 closed its connection (or it joined without a MeshWatch")
}

// Two Closes at once on a rank (a signal handler's and a deferred one)
// both return only once the rank's kept connections are closed: before,
// the second returned at once, and a program that exited then could end
// before rank 0 had told the others why.
func TestMeshWatchConcurrentClose(t *testing.T) {
	noLeak(t)
	for range 5 {
		w := watchedMesh(t, 3, testOpts)
		for _, r := range []int{0, 1} {
			w[r].mu.Lock()
			links := w[r].links
			w[r].mu.Unlock()
			require.NotEmpty(t, links, "rank %d", r)
			errs := make(chan error, 2)
			for range 2 {
				go func() {
					_ = w[r].Close()
					for _, l := range links {
						if err := l.conn.SetDeadline(time.Time{}); !errors.Is(err, net.ErrClosed) {
							errs <- fmt.Errorf("rank %d: Close returned with the connection to rank %d open (%v)", r, l.rank, err)
							return
						}
					}
					errs <- nil
				}()
			}
			for range 2 {
				require.NoError(t, <-errs)
			}
		}
	}
}

// A word from rank 0 that fails its tag keeps why in the chain: the
// watch's cause matches ErrAuth as well as ErrPeerGone.
func TestWatchForgedWordKeepsCause(t *testing.T) {
	a, b := toolproc.TCPPair(t)
	s := &session{conn: a}
	s.sealKey[0] = 1
	l := watchLink{rank: 0, conn: a, raw: a, session: s, toRank0: true}
	forged := meshFrameSized(meshAbort, []byte("bye"), macSize)
	forged = append(forged, make([]byte, macSize)...)
	_, err := b.Write(forged)
	require.NoError(t, err)
	var cause error
	require.Eventually(t, func() bool { cause = l.gone(); return cause != nil }, 5*time.Second, 5*time.Millisecond)
	require.ErrorIs(t, cause, ErrPeerGone)
	require.ErrorIs(t, cause, ErrAuth, "%v", cause)
	require.NotContains(t, cause.Error(), `says "bye"`)
}
