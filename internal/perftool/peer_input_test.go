package perftool

import (
	"context"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestAcceptLongTimeout: a long -timeout (here 300000h, which
// Flags.Check accepts) waits for the client, instead of overflowing ten
// timeouts into a deadline in the past and failing at once.
func TestAcceptLongTimeout(t *testing.T) {
	type params struct{ Magic, Size uint32 }
	long := 300000 * time.Hour
	var f Flags
	device, provider, server, client, key := "", "", "", "", ""
	gid, port := -1, 1
	f = Flags{Device: &device, Provider: &provider, GIDIndex: &gid, Port: &port, Timeout: &long, Server: &server, Client: &client, KeyFile: &key}
	require.Empty(t, f.Check(), "the timeout is accepted")

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dialed := make(chan error, 1)
	go func() {
		conn, err := Dial(ln.Addr().String(), 10*time.Second, loopback, params{Magic: 7, Size: 300})
		if err == nil {
			defer conn.Close()
			time.Sleep(200 * time.Millisecond)
		}
		dialed <- err
	}()
	var got params
	conn, err := Accept(ln, long, loopback, 7, &got, nil, nil)
	require.NoError(t, err)
	conn.Close()
	require.NoError(t, <-dialed)
	require.Equal(t, params{Magic: 7, Size: 300}, got)
}

// TestHandshakeRefusesOwnEndpoint: a peer that answers with this end's own
// endpoint is refused before anything is connected, with no model to ask
// (as on a NIC).
func TestHandshakeRefusesOwnEndpoint(t *testing.T) {
	a, b := net.Pipe()
	defer a.Close()
	local := endpoint.Endpoint{Transport: endpoint.TransportRC, QPN: 0x1234, LID: 7, PSN: 1, MTU: ctx.MTU1024}
	go func() {
		defer b.Close()
		cx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, _ = endpoint.Exchange(cx, b, endpoint.AcceptSide, local, endpoint.Security{InsecureLoopback: true})
	}()
	connected := false
	err := Handshake(a, endpoint.DialSide, endpoint.Security{InsecureLoopback: true}, 5*time.Second, nil, local.QPN, local,
		func(endpoint.Endpoint) error { connected = true; return nil })
	require.ErrorContains(t, err, "own queue pair")
	require.False(t, connected)
}

// TestOwnQueuePairHint: on a shared software fabric, the refusal of a peer
// that names this end's own queue pair says how that comes about (a
// process on another fabric, or that does not share /dev/shm, numbers its
// queue pairs alike);
// on a model of one process, or with no context, it adds nothing.
func TestOwnQueuePairHint(t *testing.T) {
	name := fmt.Sprintf("perftool-hint-%d", os.Getpid())
	t.Cleanup(func() { _ = os.Remove("/dev/shm/mlx5kit-" + name + "-registry") })
	shared := sim.New(sim.Options{Mode: sim.Engine, Fabric: name})
	defer shared.Close()
	c, err := shared.Open("sim0")
	require.NoError(t, err)
	defer c.Close()
	hint := OwnQueuePairHint(c)
	require.Contains(t, hint, "/dev/shm")
	require.Contains(t, hint, name)
	require.Contains(t, hint, "$"+sim.EnvFabric)

	private := sim.New(sim.Options{Mode: sim.Engine})
	defer private.Close()
	p, err := private.Open("sim0")
	require.NoError(t, err)
	defer p.Close()
	require.Empty(t, OwnQueuePairHint(p))
	require.Empty(t, OwnQueuePairHint(nil))
}
