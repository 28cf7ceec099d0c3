package ctx_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestModifyKeepsInitPort checks that a transition without a port uses the
// one the QP was brought to INIT on, not port 1: a QP on port 2 would
// otherwise be moved to RTR with port 1 (EINVAL on a device).
func TestModifyKeepsInitPort(t *testing.T) {
	_, c := openFake(t)
	w := build(t, c)
	fq := provider.QueuePairOf(w.qp1).(*fakeQP)

	require.NoError(t, w.qp1.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 2}))
	require.Equal(t, uint8(2), fq.last.Port)
	require.NoError(t, w.qp1.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: 5, PathMTU: ctx.MTU1024, Path: ctx.AddressAttr{DLID: 3}}))
	require.Equal(t, uint8(2), fq.last.Port, "RTR without a port: the INIT port")
	require.Equal(t, uint8(2), fq.last.Path.Port, "the path leaves from the QP's port")
	require.NoError(t, w.qp1.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Path: ctx.AddressAttr{Port: 1}}))
	require.Equal(t, uint8(2), fq.last.Port)
	require.Equal(t, uint8(1), fq.last.Path.Port, "a path's own port is kept")

	// A QP never brought to INIT with a port gets port 1.
	require.NoError(t, w.qp2.Modify(ctx.QPAttr{State: ctx.QPStateInit}))
	require.Equal(t, uint8(1), provider.QueuePairOf(w.qp2).(*fakeQP).last.Port)
}

// TestDisableBlueFlame checks Options.DisableBlueFlame: every QP's
// descriptor is doorbell only, after creation and after each Modify, while
// a Context opened without it keeps the provider's BlueFlame size.
func TestDisableBlueFlame(t *testing.T) {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware, DisableBlueFlame: true})
	require.NoError(t, err)
	defer c.Close()
	on, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware})
	require.NoError(t, err)
	defer on.Close()
	for _, x := range []struct {
		c    *ctx.Context
		zero bool
	}{{c, true}, {on, false}} {
		pd, err := x.c.AllocProtectionDomain()
		require.NoError(t, err)
		cq, err := x.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8})
		require.NoError(t, err)
		qp, err := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 4, RecvDepth: 4}})
		require.NoError(t, err)
		require.Equal(t, x.zero, provider.QPDescriptor(qp).BlueFlameSize == 0)
		require.NotNil(t, provider.QPDescriptor(qp).BlueFlame, "the doorbell is still there")
		require.NoError(t, qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1}))
		require.Equal(t, x.zero, provider.QPDescriptor(qp).BlueFlameSize == 0, "after Modify")
	}
	require.NotNil(t, sim.FromContext(c), "the software HCA")
}
