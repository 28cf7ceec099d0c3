//go:build cgo && linux

package emulate_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestGOMAXPROCSWhileMapped: changing GOMAXPROCS (a stop and a start of
// the world, which can start threads) while the emulated device has
// mappings does not abort the process. The interposed munmap once called
// into Go for every munmap while any emulated mapping lived, including the
// C library's on a thread the runtime was starting, where Go code must not
// run ("exitsyscall: syscall frame is no longer valid").
func TestGOMAXPROCSWhileMapped(t *testing.T) {
	maps := emulate.MappingCount()
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware})
	require.NoError(t, err)
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 15})
	require.NoError(t, err) // libmlx5 maps a UAR page of the device
	for i := 0; i < 2000; i++ {
		p := runtime.GOMAXPROCS(1)
		runtime.GOMAXPROCS(p)
	}
	require.NoError(t, cq.Close())
	closeContextAndCollect(t, c, maps)
}

// closeContextAndCollect closes c and waits until the device's mappings
// are gone (ibv_close_device runs once the queues' memory is collected),
// so that the tests after it find the mappings they started with.
func closeContextAndCollect(t *testing.T, c *ctx.Context, maps int) {
	require.NoError(t, c.Close())
	for deadline := time.Now().Add(10 * time.Second); emulate.MappingCount() != maps && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, maps, emulate.MappingCount(), "the device's mappings are gone")
}
