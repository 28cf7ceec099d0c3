package ctx_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestNilProtectionDomain: the verbs of a nil *ProtectionDomain fail with
// ErrInvalidArgument naming the verb, as RegisterMemory and RegisterBuffer
// of one do (and as the Context's verbs do for a nil *Context); they
// panicked.
func TestNilProtectionDomain(t *testing.T) {
	var pd *ctx.ProtectionDomain
	for op, call := range map[string]func() error{
		"register dma-buf MR": func() error { _, err := pd.RegisterDMABuf(0, 0, 4096, 0, ctx.AccessLocalWrite); return err },
		"create SRQ":          func() error { _, err := pd.CreateSRQ(ctx.SRQConfig{Depth: 1}); return err },
		"create AH":           func() error { _, err := pd.CreateAddressHandle(ctx.AddressAttr{}); return err },
		"create RC QP": func() error {
			_, err := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: &ctx.CompletionQueue{}, Caps: ctx.QueuePairCaps{SendDepth: 1}})
			return err
		},
	} {
		var err error
		require.NotPanics(t, func() { err = call() }, op)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, op)
		var oe *ctx.OpError
		require.ErrorAs(t, err, &oe, op)
		require.Equal(t, op, oe.Op)
	}
}
