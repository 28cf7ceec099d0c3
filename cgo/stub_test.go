//go:build !cgo || !linux

package cgo

import (
	"testing"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/stretchr/testify/require"
)

func TestStubReportsNotSupported(t *testing.T) {
	require.False(t, Enabled)
	_, err := ListDevices()
	require.ErrorIs(t, err, ctx.ErrNotSupported)
	require.Contains(t, err.Error(), "CGO_ENABLED=0")
	d, err := Open("")
	require.Nil(t, d)
	require.ErrorIs(t, err, ctx.ErrNotSupported)
	_, err = Provider{}.Devices()
	require.ErrorIs(t, err, ctx.ErrNotSupported)
	_, err = Provider{}.OpenDevice("mlx5_0")
	require.ErrorIs(t, err, ctx.ErrNotSupported)
	require.NotEmpty(t, NoDeviceReason())

	require.Contains(t, ctx.Providers(), ctx.ProviderHardware)
	_, err = ctx.Open(ctx.Options{Provider: ctx.ProviderHardware})
	require.ErrorIs(t, err, ctx.ErrNotSupported)
	require.Contains(t, err.Error(), "mlx5 hardware provider needs cgo")
}
