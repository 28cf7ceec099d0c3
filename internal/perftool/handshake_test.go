package perftool

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestHandshakeRefusalReachesPeer: an end that refuses its peer's queue
// pair after the exchange (here one on another software HCA) tells the
// peer it failed, which then fails with ErrPeerFailed rather than a reset
// connection; the refusing end keeps its own reason.
func TestHandshakeRefusalReachesPeer(t *testing.T) {
	cfg := EndConfig{Size: 64, SendDepth: 8, RecvDepth: 8, CQDepth: 64, Inline: func(device int) int { return min(device, 64) }, Port: 1, Timeout: 5 * time.Second}
	contexts := map[*sim.Fabric]*ctx.Context{}
	open := func(f *sim.Fabric, names ...string) []*End {
		c, err := f.Open("sim0")
		contexts[f] = c
		require.NoError(t, err)
		t.Cleanup(func() { _ = c.Close() })
		var ends []*End
		for _, n := range names {
			x, err := NewEnd(n, c, cfg)
			require.NoError(t, err)
			t.Cleanup(func() { _ = x.Close() })
			ends = append(ends, x)
		}
		return ends
	}
	f1, f2 := sim.New(sim.Options{Mode: sim.Engine}), sim.New(sim.Options{Mode: sim.Engine})
	defer f1.Close()
	defer f2.Close()
	// a's model has a queue pair numbered as b, so a accepts b; b's has
	// none numbered as a, so b refuses a.
	ends1, ends2 := open(f1, "dummy", "a"), open(f2, "b")
	a, b := ends1[1], ends2[0]
	require.Equal(t, ends1[0].QP.QPN(), b.QP.QPN())

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	refused := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			refused <- err
			return
		}
		defer conn.Close()
		refused <- Handshake(conn, endpoint.AcceptSide, endpoint.Security{InsecureLoopback: true}, 2*time.Second, contexts[f2], b.QP.QPN(), b.QP.Endpoint(),
			func(endpoint.Endpoint) error { return nil })
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	err = Handshake(conn, endpoint.DialSide, endpoint.Security{InsecureLoopback: true}, 2*time.Second, contexts[f1], a.QP.QPN(), a.QP.Endpoint(),
		func(endpoint.Endpoint) error { return nil })
	require.ErrorIs(t, err, ErrPeerFailed)
	require.ErrorContains(t, <-refused, "is not on this process's software HCA")
}
