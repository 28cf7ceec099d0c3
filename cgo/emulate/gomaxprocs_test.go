package emulate_test

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestGOMAXPROCSWhileMapped: changing GOMAXPROCS (a stop and a start of
// the world, which can start threads) while the emulated device has
// mappings does not abort the process. The interposed munmap once called
// into Go for every munmap while any emulated mapping lived, including the
// C library's on a thread the runtime was starting, where Go code must not
// run ("exitsyscall: syscall frame is no longer valid").
func TestGOMAXPROCSWhileMapped(t *testing.T) {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware})
	require.NoError(t, err)
	defer c.Close()
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 15})
	require.NoError(t, err) // libmlx5 maps a UAR page of the device
	defer cq.Close()
	for i := 0; i < 2000; i++ {
		p := runtime.GOMAXPROCS(1)
		runtime.GOMAXPROCS(p)
	}
}
