//go:build cgo && linux

package emulate_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestContextCompletionTimestamps creates a CQ with Timestamps through the
// hardware provider on the emulated device (ibv_create_cq_ex with
// IBV_WC_EX_WITH_COMPLETION_TIMESTAMP, the kernel's
// IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION): the model stamps its CQEs from
// its clock, which the software HCA's own Clock converts into the run's
// wall-clock window. The emulated device maps no clock info page, so the
// hardware Context's Clock is refused.
func TestContextCompletionTimestamps(t *testing.T) {
	f := emulate.Fabric()
	require.NotNil(t, f, "the emulation is on")
	maps := emulate.MappingCount()
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware})
	require.NoError(t, err)
	defer func() {
		// The device closes once the queue memory is collected.
		require.NoError(t, c.Close())
		deadline := time.Now().Add(5 * time.Second)
		for emulate.MappingCount() != maps && time.Now().Before(deadline) {
			runtime.GC()
			time.Sleep(time.Millisecond)
		}
		require.Equal(t, maps, emulate.MappingCount())
	}()
	_, err = c.Clock()
	require.ErrorIs(t, err, ctx.ErrNotSupported)

	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)
	defer buf.Close()
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite)
	require.NoError(t, err)
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16, Timestamps: true})
	require.NoError(t, err)
	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	require.True(t, p.Timestamps())
	qp, err := rc.New(pd, cq, rc.Config{SendDepth: 16, RecvDepth: 1, MaxInline: 64})
	require.NoError(t, err)
	require.NoError(t, p.Add(qp))
	require.NoError(t, qp.Connect(qp.Endpoint()))

	// The model's clock, as the software HCA reports it.
	sc, err := f.Open("")
	require.NoError(t, err)
	defer sc.Close()
	clock, err := sc.Clock()
	require.NoError(t, err)

	before := time.Now()
	var stamps []uint64
	for i := range 5 {
		s, err := qp.Post(uint64(i), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.RdmaWrite(uint64(mr.Addr()), mr.RKey()).Inline([]byte("tick")).FinishBlueFlame())
		deadline := time.Now().Add(10 * time.Second)
		for p.Poll(1, func(wc *transport.Completion) {
			require.Equal(t, transport.MatchOK, wc.Match)
			stamps = append(stamps, wc.Timestamp)
		}) == 0 {
			require.True(t, time.Now().Before(deadline), "no completion")
		}
	}
	after := time.Now()
	res := clock.Resolution()
	for i, ts := range stamps {
		require.NotZero(t, ts)
		if i > 0 {
			require.GreaterOrEqual(t, ts, stamps[i-1])
		}
		at := clock.ToTime(ts)
		require.False(t, at.Before(before.Add(-res)), "stamp %d at %v, before %v", i, at, before)
		require.False(t, at.After(after.Add(res)), "stamp %d at %v, after %v", i, at, after)
	}
}
