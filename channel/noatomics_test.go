package channel_test

import (
	"context"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
)

func TestAtomicsRefusedWithoutDeviceAtomicsRC(t *testing.T) {
	testAtomicsRefusedWithoutDeviceAtomics(t, channel.Options{})
}

func TestAtomicsRefusedWithoutDeviceAtomicsDC(t *testing.T) {
	testAtomicsRefusedWithoutDeviceAtomics(t, channel.Options{Transport: endpoint.TransportDC})
}

// testAtomicsRefusedWithoutDeviceAtomics checks that a channel on a device
// that reports no atomics (DeviceAttr.AtomicHCA false) refuses
// compare-and-swap and fetch-and-add at every level with EOPNOTSUPP and
// ctx.ErrNotSupported, posting nothing, as libmlx5 refuses them at post
// (qp->atomics_enabled).
func testAtomicsRefusedWithoutDeviceAtomics(t *testing.T, opts channel.Options) {
	f := newFabric(t, 2)
	dev, err := provider.Open(ctx.ProviderSoftware, transporttest.NoAtomics(f), "sim0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	pd, err := dev.AllocProtectionDomain()
	require.NoError(t, err)
	buf, err := ctx.AllocBuffer(1<<16, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteRead)
	require.NoError(t, err)
	a := &host{dev: dev, pd: pd, buf: buf, mr: mr}
	b := newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, opts)
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	at := channel.At(region, 0)
	res := channel.Slice(a.mr, 0, 8)
	cas := channel.CompareSwapRequest{Remote: at, Compare: 0, Swap: 1, Result: res}
	faa := channel.FetchAddRequest{Remote: at, Add: 1, Result: res}
	refused := func(err error, op channel.Op, level string) {
		t.Helper()
		require.ErrorIs(t, err, ctx.ErrNotSupported, level)
		require.ErrorIs(t, err, syscall.EOPNOTSUPP, level)
		var pe *channel.PeerError
		require.ErrorAs(t, err, &pe, level)
		require.Equal(t, op, pe.Op, level)
		require.Zero(t, ca.Outstanding(), "%s: nothing posted", level)
	}
	_, err = ca.PostCompareSwap(cas)
	refused(err, channel.OpCompareSwap, "PostCompareSwap")
	_, err = ca.PostFetchAdd(faa)
	refused(err, channel.OpFetchAdd, "PostFetchAdd")
	refused(ca.CompareSwap(context.Background(), cas), channel.OpCompareSwap, "CompareSwap")
	refused(ca.FetchAdd(context.Background(), faa), channel.OpFetchAdd, "FetchAdd")
	err = ca.Scope(context.Background(), func(s *channel.Scope) error {
		_, err := s.PostCompareSwap(cas)
		refused(err, channel.OpCompareSwap, "Scope.PostCompareSwap")
		_, err = s.PostFetchAdd(faa)
		refused(err, channel.OpFetchAdd, "Scope.PostFetchAdd")
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, ca.Err())
	// Other work goes on.
	require.NoError(t, ca.Read(context.Background(), channel.ReadRequest{Local: a.sge(64, 8), Remote: at}))
}
