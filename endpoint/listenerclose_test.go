package endpoint

import (
	"context"
	"testing"

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
