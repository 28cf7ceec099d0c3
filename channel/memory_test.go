package channel_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// TestMemoryPerPeer measures the memory of RC and DC channels at several
// sizes (docs/guide.md quotes the output of go test -run MemoryPerPeer -v).
func TestMemoryPerPeer(t *testing.T) {
	f := newFabric(t, 1)
	h := newHost(t, f, 0, 4096)
	sizes := []int{1, 16, 64, 256}
	if testing.Short() {
		sizes = []int{1, 16}
	}
	per := map[endpoint.Transport]map[int]channel.Memory{}
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		per[tr] = map[int]channel.Memory{}
		for _, n := range sizes {
			p, err := channel.NewMulti(h.pd, n, channel.Options{Transport: tr, SendDepth: 64, RecvDepth: 64})
			require.NoError(t, err)
			m := p.Memory()
			require.Equal(t, n, m.Peers)
			require.Equal(t, m.SendRings+m.RecvRings+m.CompletionQueue+m.DoorbellRecords+m.AddressVectors+m.Bookkeeping, m.Total())
			per[tr][n] = m
			t.Logf("%v %v", tr, m)
			require.NoError(t, p.Close())
		}
	}
	for _, n := range sizes {
		rc, dc := per[endpoint.TransportRC][n], per[endpoint.TransportDC][n]
		require.NotZero(t, rc.SendRings)
		require.NotZero(t, dc.SendRings)
		if n >= 16 {
			require.Less(t, dc.Total()/uint64(dc.Peers), rc.Total()/uint64(rc.Peers), "%d peers: DC shares its send ring", n)
			require.Less(t, dc.SendRings, rc.SendRings/uint64(n)*2, "one DCI ring, not one per peer")
		}
	}
	// RC grows linearly in its send rings; DC's stays one ring.
	big := sizes[len(sizes)-1]
	require.Equal(t, per[endpoint.TransportRC][1].SendRings*uint64(big), per[endpoint.TransportRC][big].SendRings)
	require.Equal(t, per[endpoint.TransportDC][1].SendRings, per[endpoint.TransportDC][big].SendRings)
}
