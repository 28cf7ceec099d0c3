package channel_test

import (
	"context"
	"net"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// TestPreparedCloseAfterHandshake: Close of a prepared channel after its
// Handshake connected returns nil and leaves the connected channel alone,
// so that the usual "defer p.Close()" releases a prepared channel that
// never connected without killing one that did; before, it destroyed the
// live channel's queue pairs and CQ, and its next send failed.
func TestPreparedCloseAfterHandshake(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFabric(t, 2)
			a, b := newHost(t, f, 0, 4096), newHost(t, f, 1, 4096)
			opts := channel.Options{Transport: tr, WaitTimeout: 10 * time.Second}
			pa, err := channel.New(a.pd, opts)
			require.NoError(t, err)
			pb, err := channel.NewMulti(b.pd, 1, opts)
			require.NoError(t, err)
			require.NoError(t, pb.Share(b.mr))
			chA, err := pa.Handshake(wire(t, pb.Endpoints()[0]))
			require.NoError(t, err)
			defer chA.Close()
			mb, err := pb.Handshake([]endpoint.Endpoint{wire(t, pa.Endpoint())})
			require.NoError(t, err)
			defer mb.Close()

			require.NoError(t, pa.Close())
			require.NoError(t, pb.Close())
			require.NoError(t, chA.Err())
			region, err := chA.RemoteRegion(0, 0)
			require.NoError(t, err)
			copy(a.bytes(), "survives")
			require.NoError(t, chA.Write(context.Background(), channel.WriteRequest{Local: a.sge(0, 8), Remote: channel.At(region, 64)}),
				"Prepared.Close destroyed the connected channel")
			require.Equal(t, "survives", string(b.bytes()[64:72]))
			copy(b.bytes()[128:], "and back")
			r, err := chA.PostReceive(channel.RecvRequest{Local: a.sge(256, 8)})
			require.NoError(t, err)
			require.NoError(t, mb.Send(context.Background(), channel.SendRequest{Local: b.sge(128, 8)}),
				"PreparedMulti.Close destroyed the connected channel")
			require.NoError(t, r.Wait(context.Background()))
			require.Equal(t, "and back", string(a.bytes()[256:264]))
		})
	}
}

// unusable returns a prepared channel of peers peers on h that can no
// longer connect, and the error Handshake refuses it with: closed, or
// used already (connected to itself, as a mesh rank's loopback is).
func unusable(t *testing.T, h *host, peers int, state string) (*channel.PreparedMulti, error) {
	t.Helper()
	p, err := channel.NewMulti(h.pd, peers, channel.Options{WaitTimeout: 10 * time.Second})
	require.NoError(t, err)
	if state == "closed" {
		require.NoError(t, p.Close())
		return p, ctx.ErrClosed
	}
	m, err := p.Handshake(p.Endpoints())
	require.NoError(t, err)
	t.Cleanup(func() { m.Close() })
	return p, channel.ErrUsed
}

// TestMeshRefusesUnusablePrepared: AcceptMesh, DialMesh and Mesh refuse a
// prepared channel that was closed or used already at once, with the
// error Handshake gives, and no rank learns its endpoints. Before, they
// swapped the endpoints of dead queue pairs first: the other ranks
// connected to them, and a DialMesh with no listener retried for its whole
// deadline before the handshake refused.
func TestMeshRefusesUnusablePrepared(t *testing.T) {
	opts := endpoint.MeshOptions{Security: testSec}
	for _, state := range []string{"closed", "used"} {
		t.Run(state, func(t *testing.T) {
			f := newFabric(t, 2)
			h0, h1 := newHost(t, f, 0, 4096), newHost(t, f, 1, 4096)

			// Rank 1 unusable: it never dials, and rank 0 waits alone.
			bad, want := unusable(t, h1, 2, state)
			start := time.Now()
			_, err := bad.DialMesh(context.Background(), "127.0.0.1:1", 1, opts)
			require.ErrorIs(t, err, want)
			require.ErrorContains(t, err, "channel: dial mesh")
			require.Less(t, time.Since(start), time.Second, "DialMesh dialed first")
			c, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			l, err := endpoint.ListenMesh(c, "127.0.0.1:0", 2, opts)
			require.NoError(t, err)
			p0, err := channel.NewMulti(h0.pd, 2, channel.Options{})
			require.NoError(t, err)
			defer p0.Close()
			dialed := make(chan error, 1)
			go func() {
				_, err := bad.DialMesh(c, l.Addr().String(), 1, opts)
				dialed <- err
			}()
			m, err := p0.AcceptMesh(c, l)
			if m != nil {
				m.Close()
			}
			require.ErrorIs(t, err, context.DeadlineExceeded, "rank 0 met an unusable rank 1")
			require.ErrorIs(t, <-dialed, want)

			// Rank 0 unusable: it refuses before it accepts anyone, and
			// closes its listener; rank 1 learns nothing.
			bad0, want0 := unusable(t, h0, 2, state)
			c, cancel = context.WithTimeout(context.Background(), 300*time.Millisecond)
			defer cancel()
			l, err = endpoint.ListenMesh(c, "127.0.0.1:0", 2, opts)
			require.NoError(t, err)
			p1, err := channel.NewMulti(h1.pd, 2, channel.Options{})
			require.NoError(t, err)
			defer p1.Close()
			_, err = bad0.AcceptMesh(c, l)
			require.ErrorIs(t, err, want0)
			require.ErrorContains(t, err, "channel: accept mesh")
			m, err = p1.DialMesh(c, l.Addr().String(), 1, opts)
			if m != nil {
				m.Close()
			}
			require.Error(t, err, "rank 1 got rank 0's endpoints")

			// Mesh: refused before any exchange, and every prepared
			// channel is closed.
			bad, want = unusable(t, h1, 2, state)
			good, err := channel.NewMulti(h0.pd, 2, channel.Options{})
			require.NoError(t, err)
			_, err = channel.Mesh(context.Background(), "127.0.0.1:0", []*channel.PreparedMulti{good, bad})
			require.ErrorIs(t, err, want)
			require.ErrorContains(t, err, "rank 1")
			_, err = good.Handshake(good.Endpoints())
			require.ErrorIs(t, err, ctx.ErrClosed, "Mesh left rank 0 open")
		})
	}
}

// TestHandshakeConnRefusesUnusablePrepared: HandshakeConn on a prepared
// channel that was closed or used already fails at once with the error
// Handshake gives and sends nothing on the connection; before, it sent
// the endpoint of a queue pair that could not connect.
func TestHandshakeConnRefusesUnusablePrepared(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 4096), newHost(t, f, 1, 4096)
	closed, err := channel.New(a.pd, channel.Options{})
	require.NoError(t, err)
	require.NoError(t, closed.Close())
	used, err := channel.New(a.pd, channel.Options{})
	require.NoError(t, err)
	peer, err := channel.New(b.pd, channel.Options{})
	require.NoError(t, err)
	defer peer.Close()
	ch, err := used.Handshake(peer.Endpoint())
	require.NoError(t, err)
	defer ch.Close()
	for p, want := range map[*channel.Prepared]error{closed: ctx.ErrClosed, used: channel.ErrUsed} {
		ca, cb := net.Pipe()
		c, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := p.HandshakeConn(c, ca, endpoint.DialSide, testSec)
		cancel()
		require.ErrorIs(t, err, want)
		require.NoError(t, cb.SetReadDeadline(time.Now().Add(50*time.Millisecond)))
		n, err := cb.Read(make([]byte, 64))
		require.ErrorIs(t, err, os.ErrDeadlineExceeded, "HandshakeConn sent %d bytes", n)
		_ = ca.Close()
		_ = cb.Close()
		// Handed its own endpoint, it is refused for what it is (closed,
		// used), not as a loop to itself.
		_, err = p.Handshake(p.Endpoint())
		require.ErrorIs(t, err, want)
		require.NotErrorIs(t, err, channel.ErrHandshake)
	}
}

// TestMeshRefusesNil: a nil prepared channel in Mesh, or a nil listener in
// AcceptMesh, is refused with ctx.ErrInvalidArgument naming the call;
// before, both panicked.
func TestMeshRefusesNil(t *testing.T) {
	f := newFabric(t, 1)
	h := newHost(t, f, 0, 4096)
	p, err := channel.NewMulti(h.pd, 2, channel.Options{})
	require.NoError(t, err)
	_, err = channel.Mesh(context.Background(), "127.0.0.1:0", []*channel.PreparedMulti{p, nil})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "channel: mesh: rank 1: nil")
	_, err = p.Handshake(p.Endpoints())
	require.ErrorIs(t, err, ctx.ErrClosed, "Mesh left the other rank open")

	p, err = channel.NewMulti(h.pd, 2, channel.Options{})
	require.NoError(t, err)
	defer p.Close()
	_, err = p.AcceptMesh(context.Background(), nil)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "channel: accept mesh: nil listener")
}
