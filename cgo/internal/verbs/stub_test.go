//go:build !cgo || !linux

package verbs

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

// TestStubObjectsRefuse: the objects of the stub API exist only as types;
// every call that would reach rdma-core returns ErrUnavailable.
func TestStubObjectsRefuse(t *testing.T) {
	var d Device
	_, err := d.Query()
	require.ErrorIs(t, err, ErrUnavailable)
	_, err = d.QueryGIDTable()
	require.ErrorIs(t, err, ErrUnavailable)
	_, err = d.AllocProtectionDomain()
	require.ErrorIs(t, err, ctx.ErrNotSupported)
	_, err = d.CreateCompletionQueue(CQConfig{})
	require.ErrorIs(t, err, ErrUnavailable)
	var pd ProtectionDomain
	_, err = pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeRC})
	require.ErrorIs(t, err, ErrUnavailable)
	_, err = pd.RegisterBytes(make([]byte, 8), ctx.AccessLocalWrite)
	require.ErrorIs(t, err, ErrUnavailable)
	var qp QueuePair
	require.ErrorIs(t, qp.Modify(ctx.QPAttr{}), ErrUnavailable)
	require.Equal(t, -1, (&CompletionQueue{}).EventFD())
}
