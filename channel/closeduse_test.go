package channel_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// A prepared channel that was closed refuses Handshake and Share with an
// error wrapping ctx.ErrClosed, on both transports. (A DC Handshake used to
// succeed: it returned a channel over the closed initiator and targets and
// left the address handle it made for each peer open until the PD closed.)
func TestPreparedUseAfterClose(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFabric(t, 2)
			ha, hb := newHost(t, f, 0, 4096), newHost(t, f, 1, 4096)
			opts := channel.Options{Transport: tr}
			pa, err := channel.New(ha.pd, opts)
			require.NoError(t, err)
			pb, err := channel.New(hb.pd, opts)
			require.NoError(t, err)
			defer pb.Close()
			require.NoError(t, pa.Close())
			require.NoError(t, pa.Close())

			require.ErrorIs(t, pa.Share(ha.mr), ctx.ErrClosed)
			ch, err := pa.Handshake(wire(t, pb.Endpoint()))
			require.ErrorIs(t, err, ctx.ErrClosed)
			require.Contains(t, err.Error(), "channel: handshake")
			require.Nil(t, ch)
		})
	}
}
