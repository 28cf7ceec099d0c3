package sim

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// TestRoCEConnectedHopLimit: on RoCE the kernel resolves an RC path's
// unicast destination through the IP stack (ib_resolve_eth_dmac from
// _ib_modify_qp) and keeps the route's hop limit, 64, in place of the one
// given; a multicast destination and a link-local one from a RoCE v1
// source GID keep theirs, as does every path on InfiniBand.
func TestRoCEConnectedHopLimit(t *testing.T) {
	for _, ll := range []ctx.LinkLayer{ctx.LinkLayerEthernet, ctx.LinkLayerInfiniBand} {
		e := newEnv(t, Options{LinkLayer: ll})
		theirs, err := e.c2.QueryGIDs(1)
		require.NoError(t, err)
		type path struct {
			name  string
			sgid  uint8
			dgid  ctx.GID
			keeps bool // the hop limit given
		}
		var paths []path
		if ll == ctx.LinkLayerEthernet {
			paths = []path{
				{"IPv6, RoCE v2", 5, theirs[5].GID, false},
				{"IPv6, RoCE v1", 4, theirs[4].GID, false},
				{"IPv4, RoCE v2", 3, theirs[3].GID, false},
				{"link-local, RoCE v2", 1, theirs[1].GID, false},
				{"link-local, RoCE v1", 0, theirs[0].GID, true},
				{"multicast", 5, ctx.GID{0xff, 0x0e, 15: 1}, true},
			}
		} else {
			paths = []path{{"InfiniBand GRH", 0, theirs[0].GID, true}}
		}
		for _, p := range paths {
			for _, hop := range []uint8{0, 1, 255} {
				want := uint8(addrvec.RouteHopLimit)
				if p.keeps {
					want = hop
				}
				q := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
				require.NoError(t, q.qp.Modify(e.attrBase(ctx.QPTypeRC, ctx.QPStateInit, ll)))
				a := e.attrBase(ctx.QPTypeRC, ctx.QPStateRTR, ll)
				a.Path.GlobalRoute, a.Path.SGIDIndex, a.Path.DGID, a.Path.HopLimit = true, p.sgid, p.dgid, hop
				require.NoError(t, q.qp.Modify(a), "%v %s", ll, p.name)
				_, attr, ok := queuePairAttributes(provider.QueuePairOf(q.qp))
				require.True(t, ok)
				require.Equal(t, want, attr.Path.HopLimit, "%v %s, hop limit %d", ll, p.name, hop)
				require.NoError(t, q.qp.Close())
			}
		}
	}
}
