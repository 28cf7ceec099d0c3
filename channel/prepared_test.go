package channel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
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
