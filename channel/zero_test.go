package channel_test

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// TestZeroChannel: the control calls of a Channel, MultiChannel, Prepared
// or PreparedMulti not made by this package (a zero value) do not panic:
// the getters return zero values, Close returns nil, and the calls that
// return an error refuse it with ctx.ErrInvalidArgument (RemoteRegion
// with ErrPeer too). They panicked.
func TestZeroChannel(t *testing.T) {
	bg := context.Background()
	invalid := func(t *testing.T, err error) { require.ErrorIs(t, err, ctx.ErrInvalidArgument) }
	for name, fn := range map[string]func(t *testing.T){
		"MultiChannel getters": func(t *testing.T) {
			var m channel.MultiChannel
			require.Zero(t, m.Peers())
			require.Zero(t, m.Transport())
			require.Nil(t, m.ProtectionDomain())
			require.Zero(t, m.GID())
			require.Zero(t, m.Remote(0))
			_, err := m.RemoteRegion(0, 0)
			require.ErrorIs(t, err, channel.ErrPeer)
			require.Nil(t, m.QP(0))
			require.Nil(t, m.DCI())
			require.Nil(t, m.Notifier())
			require.Nil(t, m.Poller())
			require.Nil(t, m.CompletionQueue())
			require.Zero(t, m.Outstanding())
			require.Zero(t, m.Counters())
			require.Zero(t, m.Memory())
		},
		"MultiChannel calls": func(t *testing.T) {
			var m channel.MultiChannel
			invalid(t, m.Scope(bg, func(*channel.Scope) error { return nil }))
			invalid(t, m.Fail())
			_, err := m.Reestablish()
			invalid(t, err)
		},
		"Channel getters": func(t *testing.T) {
			var ch channel.Channel
			require.Zero(t, ch.Peers())
			require.Zero(t, ch.Transport())
			require.Nil(t, ch.ProtectionDomain())
			require.Zero(t, ch.GID())
			require.Zero(t, ch.Remote(0))
			_, err := ch.RemoteRegion(0, 0)
			require.ErrorIs(t, err, channel.ErrPeer)
			require.Nil(t, ch.QP(0))
			require.Nil(t, ch.DCI())
			require.Nil(t, ch.Notifier())
			require.Nil(t, ch.Poller())
			require.Nil(t, ch.CompletionQueue())
			require.Zero(t, ch.Outstanding())
			require.Zero(t, ch.Counters())
			require.Zero(t, ch.Memory())
		},
		"Channel calls": func(t *testing.T) {
			var ch channel.Channel
			invalid(t, ch.Scope(bg, func(*channel.Scope) error { return nil }))
			invalid(t, ch.Fail())
			_, err := ch.Reestablish()
			invalid(t, err)
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			_, err = ch.ReestablishConn(bg, a, endpoint.DialSide, endpoint.Security{InsecureLoopback: true})
			invalid(t, err)
		},
		"PreparedMulti": func(t *testing.T) {
			var p channel.PreparedMulti
			require.Zero(t, p.Peers())
			require.Empty(t, p.Endpoints())
			require.Zero(t, p.GID())
			require.Zero(t, p.Memory())
			invalid(t, p.Share(nil))
			_, err := p.Handshake(nil)
			invalid(t, err)
			_, err = p.DialMesh(bg, "127.0.0.1:1", 1, endpoint.MeshOptions{})
			invalid(t, err)
			_, err = channel.Mesh(bg, "127.0.0.1:0", []*channel.PreparedMulti{&p})
			invalid(t, err)
			require.NoError(t, p.Close())
		},
		"Prepared": func(t *testing.T) {
			var p channel.Prepared
			require.Zero(t, p.Endpoint())
			require.Zero(t, p.GID())
			invalid(t, p.Share(nil))
			_, err := p.Handshake(endpoint.Endpoint{})
			invalid(t, err)
			a, b := net.Pipe()
			defer a.Close()
			defer b.Close()
			_, err = p.HandshakeConn(bg, a, endpoint.DialSide, endpoint.Security{InsecureLoopback: true})
			invalid(t, err)
			require.NoError(t, p.Close())
		},
	} {
		t.Run(name, func(t *testing.T) {
			require.NotPanics(t, func() { fn(t) })
		})
	}
}
