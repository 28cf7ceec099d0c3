package mlx5kit_test

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit"
	"github.com/mlx5kit/mlx5kit/cgo"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// With no provider chosen, Open opens the NIC or fails with ErrNoDevice and
// says how to choose the software HCA; it never runs on the model unasked.
func TestOpenWithoutChoiceNeedsDevice(t *testing.T) {
	t.Setenv(ctx.EnvProvider, "")
	c, err := mlx5kit.Open(mlx5kit.Options{})
	if err == nil {
		defer c.Close()
		require.Equal(t, ctx.ProviderHardware, c.Provider(), "Open chose %s without being asked", c)
		require.Equal(t, ctx.KindHardware, c.Kind())
		return
	}
	if cgo.Enabled {
		require.ErrorIs(t, err, ctx.ErrNoDevice)
	} else {
		require.ErrorIs(t, err, cgo.ErrUnavailable, "a build without cgo has no hardware provider")
	}
	require.Contains(t, err.Error(), `Options.Provider to "sim"`)
	require.Contains(t, err.Error(), ctx.EnvProvider+"=sim")
}

func TestOpenExplicitProvider(t *testing.T) {
	c, err := mlx5kit.Open(mlx5kit.Options{Provider: ctx.ProviderSoftware})
	require.NoError(t, err)
	require.Equal(t, ctx.ProviderSoftware, c.Provider())
	require.NoError(t, c.Close())
	require.NoError(t, c.Close(), "Close is idempotent")

	_, err = mlx5kit.Open(mlx5kit.Options{Provider: "no-such-provider"})
	require.ErrorIs(t, err, ctx.ErrNotFound)
}

func TestOpenEnvironmentChoosesProvider(t *testing.T) {
	t.Setenv(ctx.EnvProvider, ctx.ProviderSoftware)
	c, err := mlx5kit.Open(mlx5kit.Options{})
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, ctx.ProviderSoftware, c.Provider())
}

// A buffer closed while a region on it is registered stays mapped for the
// region: an RDMA write into it still lands (on the software HCA it would
// otherwise fault the process), and the memory goes with the Context.
func TestWriteAfterBufferClose(t *testing.T) {
	c, err := mlx5kit.Open(mlx5kit.Options{Provider: ctx.ProviderSoftware})
	require.NoError(t, err)
	defer c.Close()
	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	cqA, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16})
	require.NoError(t, err)
	cqB, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16})
	require.NoError(t, err)
	a, err := rc.New(pd, cqA, rc.Config{SendDepth: 8, MaxInline: 64})
	require.NoError(t, err)
	b, err := rc.New(pd, cqB, rc.Config{SendDepth: 8, RecvDepth: 8})
	require.NoError(t, err)
	require.NoError(t, a.Connect(b.Endpoint()))
	require.NoError(t, b.Connect(a.Endpoint()))
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite)
	require.NoError(t, err)
	require.NoError(t, buf.Close())
	require.Nil(t, buf.Bytes())

	poller, err := transport.NewPoller(cqA)
	require.NoError(t, err)
	require.NoError(t, poller.Add(a))
	st, err := a.Post(1, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, st.RdmaWrite(uint64(mr.Addr()), mr.RKey()).Inline([]byte("late")).FinishBlueFlame())
	var werr error
	for n := 0; n == 0; {
		n = poller.Poll(1, func(wc *transport.Completion) { werr = wc.Err() })
	}
	require.NoError(t, werr)
	require.Equal(t, []byte("late"), mr.Bytes()[:4])
}

// Registering memory that is not mapped (a slice of a buffer kept past its
// Close) is refused as the kernel refuses it (ibv_reg_mr pins the pages:
// EFAULT). Accepted, the region would name whatever is mapped at that
// address later: here a new buffer, never registered, that an RDMA write
// through the stale region would change.
func TestRegisterUnmappedMemory(t *testing.T) {
	c, err := mlx5kit.Open(mlx5kit.Options{Provider: ctx.ProviderSoftware})
	require.NoError(t, err)
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	// The freed range may be mapped again at once by another part of the
	// process (the runtime, the race detector): that memory is mapped,
	// and registers; try again with another range then.
	for range 20 {
		var buf *ctx.Buffer
		buf, err = ctx.AllocBuffer(3*4096, ctx.BufferOptions{})
		require.NoError(t, err)
		stale := buf.Bytes()
		require.NoError(t, buf.Close())
		var mr *ctx.MemoryRegion
		if mr, err = pd.RegisterMemory(stale, ctx.AccessLocalWrite|ctx.AccessRemoteWrite); err == nil {
			require.NoError(t, mr.Close())
			continue
		}
		break
	}
	require.ErrorIs(t, err, syscall.EFAULT)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "ibv_reg_mr")
	var oe *ctx.OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, syscall.EFAULT, oe.Errno())

	// Mapped memory, a Buffer's, still registers.
	buf, err := ctx.AllocBuffer(3*4096, ctx.BufferOptions{})
	require.NoError(t, err)
	defer buf.Close()
	mr, err := pd.RegisterMemory(buf.Bytes()[100:5000], ctx.AccessLocalWrite)
	require.NoError(t, err)
	require.NoError(t, mr.Close())
}
