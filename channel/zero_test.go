package channel_test

import (
	"context"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
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
		"MultiChannel": func(t *testing.T) {
			var m channel.MultiChannel
			zeroMulti(t, &m)
			_, err := m.Reestablish()
			invalid(t, err)
		},
		"Channel": func(t *testing.T) {
			var ch channel.Channel // its MultiChannel is nil
			zeroMulti(t, &ch)
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

// multi is what a Channel has of a MultiChannel's methods (it embeds one).
type multi interface {
	Peers() int
	Transport() endpoint.Transport
	ProtectionDomain() *ctx.ProtectionDomain
	GID() ctx.GIDEntry
	Remote(int) endpoint.Endpoint
	RemoteRegion(int, int) (endpoint.RemoteRegion, error)
	QP(int) *rc.QP
	DCI() *dc.DCI
	Notifier() *completion.Notifier
	Poller() *transport.Poller
	CompletionQueue() *ctx.CompletionQueue
	Outstanding() int
	Counters() channel.Counters
	Memory() channel.Memory
	Scope(context.Context, func(*channel.Scope) error) error
	Fail() error
}

// zeroMulti checks the control calls of a zero MultiChannel or Channel:
// the getters return zero values, RemoteRegion refuses with ErrPeer, and
// Scope and Fail with ctx.ErrInvalidArgument.
func zeroMulti(t *testing.T, m multi) {
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
	require.ErrorIs(t, m.Scope(context.Background(), func(*channel.Scope) error { return nil }), ctx.ErrInvalidArgument)
	require.ErrorIs(t, m.Fail(), ctx.ErrInvalidArgument)
}

// TestZeroChannelWork: the work calls of a zero MultiChannel or Channel
// (not made by this package) are refused as its Scope is, with an error
// wrapping ctx.ErrInvalidArgument (a *PeerError from a raw post), which
// Receive's and GatherReceive's results carry, and Poll polls nothing.
// They panicked on the missing channel.
func TestZeroChannelWork(t *testing.T) {
	bg := context.Background()
	for name, m := range map[string]*channel.MultiChannel{"MultiChannel": new(channel.MultiChannel), "Channel": new(channel.Channel).MultiChannel} {
		t.Run(name, func(t *testing.T) {
			require.NotPanics(t, func() {
				require.Zero(t, m.Poll())
				raw := map[string]func() (channel.Pending, error){
					"PostSend":        func() (channel.Pending, error) { return m.PostSend(channel.SendRequest{}) },
					"PostReceive":     func() (channel.Pending, error) { return m.PostReceive(channel.RecvRequest{}) },
					"PostWrite":       func() (channel.Pending, error) { return m.PostWrite(channel.WriteRequest{}) },
					"PostRead":        func() (channel.Pending, error) { return m.PostRead(channel.ReadRequest{}) },
					"PostCompareSwap": func() (channel.Pending, error) { return m.PostCompareSwap(channel.CompareSwapRequest{}) },
					"PostFetchAdd":    func() (channel.Pending, error) { return m.PostFetchAdd(channel.FetchAddRequest{}) },
				}
				for op, post := range raw {
					p, err := post()
					require.ErrorIs(t, err, ctx.ErrInvalidArgument, op)
					var pe *channel.PeerError
					require.ErrorAs(t, err, &pe, op)
					require.Zero(t, p, op)
				}
				res, err := m.Receive(bg, channel.RecvRequest{})
				require.ErrorIs(t, err, ctx.ErrInvalidArgument)
				require.ErrorIs(t, res.Err, ctx.ErrInvalidArgument)
				results := make([]channel.Result, 2)
				require.ErrorIs(t, m.GatherReceive(bg, make([]channel.RecvRequest, 2), results), ctx.ErrInvalidArgument)
				for _, r := range results {
					require.ErrorIs(t, r.Err, ctx.ErrInvalidArgument)
				}
				for op, call := range map[string]func() error{
					"Send":          func() error { return m.Send(bg, channel.SendRequest{}) },
					"Write":         func() error { return m.Write(bg, channel.WriteRequest{}) },
					"Read":          func() error { return m.Read(bg, channel.ReadRequest{}) },
					"CompareSwap":   func() error { return m.CompareSwap(bg, channel.CompareSwapRequest{}) },
					"FetchAdd":      func() error { return m.FetchAdd(bg, channel.FetchAddRequest{}) },
					"ScatterSend":   func() error { return m.ScatterSend(bg, []channel.SendRequest{{}}) },
					"ScatterWrite":  func() error { return m.ScatterWrite(bg, []channel.WriteRequest{{}}) },
					"GatherRead":    func() error { return m.GatherRead(bg, []channel.ReadRequest{{}}) },
					"MulticastSend": func() error { return m.MulticastSend(bg, []int{0}, channel.SendRequest{}) },
				} {
					require.ErrorIs(t, call(), ctx.ErrInvalidArgument, op)
				}
			})
		})
	}
}
