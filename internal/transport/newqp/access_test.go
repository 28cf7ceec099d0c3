package newqp_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/transport/newqp"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
)

// TestDefaultAccessWithoutAtomics checks that RemoteAccess 0 resolves to
// remote write and read without atomics on a device that reports none:
// mlx5_ib refuses remote atomic access (to_mlx5_access_flags,
// get_atomic_mode) with EOPNOTSUPP at RTR on such a device, so the default
// would fail every Connect. An explicit RemoteAccess is kept as it is.
func TestDefaultAccessWithoutAtomics(t *testing.T) {
	f := sim.New(sim.Options{})
	c, err := provider.Open(ctx.ProviderSoftware, transporttest.NoAtomics(f), "sim0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	dev, err := c.Query()
	require.NoError(t, err)
	require.False(t, dev.AtomicHCA)
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16})
	require.NoError(t, err)
	spec := newqp.Spec{Transport: "rc", Op: "new QP", Type: ctx.QPTypeRC, CQ: cq,
		Caps: ctx.QueuePairCaps{SendDepth: 4, RecvDepth: 4}}
	r, err := newqp.Create(pd, spec)
	require.NoError(t, err)
	require.Equal(t, ctx.AccessRemoteWrite|ctx.AccessRemoteRead, r.Access)
	require.NoError(t, r.QP.Close())

	spec.RemoteAccess = ctx.AccessRemoteAtomic
	r, err = newqp.Create(pd, spec)
	require.NoError(t, err)
	require.Equal(t, ctx.AccessRemoteAtomic, r.Access)
	require.NoError(t, r.QP.Close())
}
