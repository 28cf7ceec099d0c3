package endpoint

import (
	"context"
	"errors"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Close of a mesh listener is idempotent, also after Exchange closed it:
// a deferred Close does not report the listener's own "use of closed
// network connection".
func TestMeshListenerCloseIdempotent(t *testing.T) {
	opts := MeshOptions{Security: Security{InsecureLoopback: true}}
	l, err := ListenMesh(context.Background(), "127.0.0.1:0", 2, opts)
	require.NoError(t, err)
	require.NoError(t, l.Close())
	require.NoError(t, l.Close())
	_, err = l.Exchange(context.Background(), nil)
	require.ErrorIs(t, err, ErrListenerUsed)

	l, err = ListenMesh(context.Background(), "127.0.0.1:0", 2, opts)
	require.NoError(t, err)
	_, err = l.Exchange(context.Background(), nil) // refused: no endpoints; closes the listener
	require.Error(t, err)
	require.NoError(t, l.Close())
}

// Close on another goroutine gives up an Exchange that waits for ranks:
// the Exchange returns at once with an error that says the listener was
// closed (not only "accept: use of closed network connection") and wraps
// net.ErrClosed. (A Close that comes before Exchange starts makes it fail
// at once with ErrListenerUsed.)
func TestMeshListenerCloseDuringExchange(t *testing.T) {
	noLeak(t)
	local := meshLocal(3)
	w := &MeshWatch{}
	defer w.Close()
	o := testOpts
	o.Watch = w
	l, err := ListenMesh(context.Background(), "127.0.0.1:0", 3, o)
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := l.Exchange(context.Background(), local[0])
		done <- err
	}()
	time.Sleep(20 * time.Millisecond) // let it wait for the ranks (or not: the result is the same)
	require.NoError(t, l.Close())
	select {
	case err := <-done:
		if !errors.Is(err, ErrListenerUsed) {
			require.ErrorIs(t, err, net.ErrClosed)
			require.ErrorContains(t, err, "closed (MeshListener.Close) with 1 of 3 ranks joined")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Exchange did not end when its listener closed")
	}
}
