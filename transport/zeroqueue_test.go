package transport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
)

// TestZeroQueueReceiveGetters: a zero Queue has no receive outstanding and
// its RingRecvDoorbell does nothing, as a zero SharedReceiveQueue's
// Outstanding and RingRecvDoorbell and the zero Queue's RingDoorbell; both
// panicked.
func TestZeroQueueReceiveGetters(t *testing.T) {
	for _, q := range []*transport.Queue{new(transport.Queue), &new(rc.QP).Queue, &new(ud.QP).Queue, &new(dc.DCT).Queue} {
		require.NotPanics(t, func() {
			require.Zero(t, q.RecvOutstanding())
			q.RingRecvDoorbell()
			q.RingDoorbell()
		})
	}
}
