package ctx_test

import (
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// idleFake is fake with a device that implements provider.IdleDevice and
// counts the calls of its Idle.
type idleFake struct {
	*fake
	calls *atomic.Int64
}

func (f idleFake) OpenDevice(name string) (provider.Device, error) {
	d, err := f.fake.OpenDevice(name)
	if err != nil {
		return nil, err
	}
	return idleDev{d.(fakeDev), f.calls}, nil
}

type idleDev struct {
	fakeDev
	calls *atomic.Int64
}

func (d idleDev) IdleFunc() func() { return func() { d.calls.Add(1) } }

var _ provider.IdleDevice = idleDev{}

// idleRegistrations gives each run of the Idle tests (go test -count=N)
// provider names of its own: the registry is process-wide.
var idleRegistrations atomic.Int64

// TestIdleWithoutIdleDevice: a device that does not implement
// provider.IdleDevice (hardware) makes Context.Idle return at once,
// allocating nothing, also after Close.
func TestIdleWithoutIdleDevice(t *testing.T) {
	name := fmt.Sprintf("fake-noidle-%d", idleRegistrations.Add(1))
	f := &fake{}
	provider.Register(name, f)
	c, err := ctx.Open(ctx.Options{Provider: name})
	require.NoError(t, err)
	require.Zero(t, testing.AllocsPerRun(100, c.Idle))
	require.NoError(t, c.Close())
	require.NotPanics(t, c.Idle)
	f.mu.Lock()
	defer f.mu.Unlock()
	require.Equal(t, []string{"close dev"}, f.log, "Idle reached the device")
}

// TestIdleCallsTheDevice: Context.Idle calls the device's Idle once per
// call, without allocating.
func TestIdleCallsTheDevice(t *testing.T) {
	name := fmt.Sprintf("fake-idle-%d", idleRegistrations.Add(1))
	var calls atomic.Int64
	provider.Register(name, idleFake{&fake{}, &calls})
	c, err := ctx.Open(ctx.Options{Provider: name})
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()
	require.Zero(t, calls.Load(), "Open called Idle")
	for i := 0; i < 10; i++ {
		c.Idle()
	}
	require.Equal(t, int64(10), calls.Load())
	require.Zero(t, testing.AllocsPerRun(100, c.Idle))
	require.Equal(t, int64(10+101), calls.Load())
}
