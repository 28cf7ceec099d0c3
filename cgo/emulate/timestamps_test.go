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
// its clock. The hardware Context's Clock (mlx5dv_get_clock_info over the
// clock info page the emulated kernel maps) converts them into the run's
// wall-clock window, and agrees with the software HCA's own Clock.
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
	hw, err := c.Clock()
	require.NoError(t, err, "the clock info page is mapped")

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
		// libmlx5's copy of the page converts as the model's own clock.
		require.Equal(t, clock.ToNanoseconds(ts), hw.ToNanoseconds(ts), "stamp %d", i)
		hat := hw.ToTime(ts)
		require.False(t, hat.Before(before.Add(-res)), "stamp %d at %v, before %v", i, hat, before)
		require.False(t, hat.After(after.Add(res)), "stamp %d at %v, after %v", i, hat, after)
	}
	// The snapshot libmlx5 read describes the model's clock.
	hi, si := hw.Info(), clock.Info()
	require.Equal(t, si.Mult, hi.Mult)
	require.Equal(t, si.Shift, hi.Shift)
	require.Equal(t, si.Mask, hi.Mask)
	require.Equal(t, hw.Resolution(), res)
	require.NoError(t, hw.Refresh())
	require.GreaterOrEqual(t, hw.Info().LastCycles, hi.LastCycles, "a refresh reads a later snapshot")
}
