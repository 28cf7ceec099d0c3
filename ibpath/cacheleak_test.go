package ibpath_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/ibpath"
	"github.com/mlx5kit/mlx5kit/ud"
)

// A long-lived AddressCache does not keep the ud.Remotes of closed UD QPs
// (and through them the QPs) for ever: a QP made, used with the cache and
// closed can be collected as the cache goes on making Remotes for other
// QPs, to other addresses.
func TestAddressCacheDropsRemotesOfClosedQPs(t *testing.T) {
	f := newFabric(t, ctx.LinkLayerInfiniBand)
	n := newNode(t, f, "sim0")
	c := ibpath.NewAddressCache(n.pd)
	t.Cleanup(func() { require.NoError(t, c.Close()) })
	p := ibpath.Default()
	p.DLID, p.DQPN, p.QKey = 1, 0x99, testQKey

	collected := make(chan struct{})
	func() {
		q, err := ud.New(n.pd, n.cq, ud.Config{SendDepth: 8, RecvDepth: 8, QKey: testQKey})
		require.NoError(t, err)
		_, err = c.Remote(q, p)
		require.NoError(t, err)
		require.NoError(t, q.Close())
		runtime.AddCleanup(q, func(ch chan struct{}) { close(ch) }, collected)
	}()
	// Remotes for other QPs, to other addresses.
	for i := range 20 {
		q, err := ud.New(n.pd, n.cq, ud.Config{SendDepth: 8, RecvDepth: 8, QKey: testQKey})
		require.NoError(t, err)
		t.Cleanup(func() { _ = q.Close() })
		to := p
		to.DLID = uint16(2 + i)
		_, err = c.Remote(q, to)
		require.NoError(t, err)
	}

	deadline := time.Now().Add(5 * time.Second)
	for {
		runtime.GC()
		select {
		case <-collected:
			return
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("the closed QP is still reachable from the address cache")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
