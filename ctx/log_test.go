package ctx_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/sim"
)

// recorder is a slog.Handler that keeps every record, at every level.
type recorder struct {
	mu      sync.Mutex
	records []slog.Record
}

func (r *recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r *recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.records = append(r.records, rec.Clone())
	return nil
}
func (r *recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *recorder) WithGroup(string) slog.Handler      { return r }

// take returns the records so far, their attributes as a map, and forgets
// them.
func (r *recorder) take() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, rec := range r.records {
		m := map[string]string{"msg": rec.Message, "level": rec.Level.String()}
		rec.Attrs(func(a slog.Attr) bool { m[a.Key] = a.Value.String(); return true })
		out = append(out, m)
	}
	r.records = nil
	return out
}

func TestLogger(t *testing.T) {
	rec := &recorder{}
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware, Logger: slog.New(rec)})
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })

	e, err := c.ChooseGID(1, ctx.GIDSelector{})
	require.NoError(t, err)
	got := rec.take()
	require.Len(t, got, 1)
	require.Equal(t, "mlx5kit: GID chosen", got[0]["msg"])
	require.Equal(t, "INFO", got[0]["level"])
	require.Equal(t, e.GID.String(), got[0]["gid"])
	require.Equal(t, c.DeviceName(), got[0]["device"])
	require.Equal(t, "1", got[0]["port"])

	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8})
	require.NoError(t, err)
	qp, err := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 4, RecvDepth: 4}})
	require.NoError(t, err)
	require.NoError(t, qp.Modify(ctx.QPAttr{State: ctx.QPStateInit}))
	// A refused transition is not one.
	require.Error(t, qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS}))
	got = rec.take()
	require.Len(t, got, 1, "%v", got)
	require.Equal(t, map[string]string{"msg": "mlx5kit: QP transition", "level": "DEBUG", "device": c.DeviceName(),
		"qp_type": "RC", "qpn": itoa(qp.QPN()), "from": "RESET", "to": "INIT"}, got[0])

	// An async event, read: logged at Error for a fatal one.
	require.NoError(t, sim.Default().FailQP(qp.QPN()))
	ev, ok, err := provider.ReadAsyncEvent(c)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, ctx.EventQPFatal, ev.Type)
	got = rec.take()
	require.Len(t, got, 1, "%v", got)
	require.Equal(t, "mlx5kit: async event", got[0]["msg"])
	require.Equal(t, "ERROR", got[0]["level"])
	require.Equal(t, "QP_FATAL", got[0]["event"])
	require.Equal(t, itoa(qp.QPN()), got[0]["qpn"])
	_, ok, err = provider.ReadAsyncEvent(c)
	require.NoError(t, err)
	require.False(t, ok)
	require.Empty(t, rec.take(), "no event, nothing logged")

	// Nil is silent; SetLogger turns it on and off.
	c.SetLogger(nil)
	_, err = c.ChooseGID(1, ctx.GIDSelector{})
	require.NoError(t, err)
	require.Empty(t, rec.take())
}

func itoa(v uint32) string { return slog.Uint64Value(uint64(v)).String() }
