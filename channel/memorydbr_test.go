package channel_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestMemoryDoorbellRecords: a DC channel of n peers has the doorbell
// records of its DCI, of each peer's SRQ and of its CQ; a DCT has no
// rings and, as rdma-core creates it, no doorbell record, so none is
// counted for it. An RC channel has one per QP and the CQ's.
func TestMemoryDoorbellRecords(t *testing.T) {
	f := newFabric(t, 1)
	h := newHost(t, f, 0, 4096)
	const n = 4
	for tr, want := range map[endpoint.Transport]uint64{
		endpoint.TransportDC: (1 + n + 1) * prm.DoorbellRecordSize,
		endpoint.TransportRC: (n + 1) * prm.DoorbellRecordSize,
	} {
		p, err := channel.NewMulti(h.pd, n, channel.Options{Transport: tr, SendDepth: 16, RecvDepth: 16})
		require.NoError(t, err)
		require.Equal(t, want, p.Memory().DoorbellRecords, "%v", tr)
		require.NoError(t, p.Close())
	}
}
