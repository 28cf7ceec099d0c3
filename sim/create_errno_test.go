package sim

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestCreateRefusalsCarryEINVAL: a create the kernel (or libmlx5 above it)
// refuses for a size or index past the device's limits carries EINVAL, as
// the hardware provider's error does, besides ctx.ErrInvalidArgument.
func TestCreateRefusalsCarryEINVAL(t *testing.T) {
	e := newEnv(t, Options{})
	cq, err := e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16})
	require.NoError(t, err)
	a, err := e.c.Query()
	require.NoError(t, err)
	for name, create := range map[string]func() error{
		"CQ past max_cqe": func() error {
			_, err := e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: uint32(a.MaxCQE) + 1})
			return err
		},
		"CQ completion vector": func() error {
			_, err := e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4, CompVector: 1 << 20})
			return err
		},
		"QP past max_qp_wr": func() error {
			_, err := e.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq,
				Caps: ctx.QueuePairCaps{SendDepth: uint32(a.MaxQPWR) + 1, RecvDepth: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
			return err
		},
		"QP inline": func() error {
			_, err := e.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq,
				Caps: ctx.QueuePairCaps{SendDepth: 1, RecvDepth: 1, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 1 << 16}})
			return err
		},
		"SRQ SGEs": func() error {
			_, err := e.pd.CreateSRQ(ctx.SRQConfig{Depth: 4, MaxSGE: 1 << 10})
			return err
		},
		"AH port": func() error {
			_, err := e.pd.CreateAddressHandle(ctx.AddressAttr{Port: 9, DLID: 1})
			return err
		},
	} {
		err := create()
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
		require.ErrorIs(t, err, syscall.EINVAL, name)
		var oe *ctx.OpError
		require.True(t, errors.As(err, &oe), name)
		require.Equal(t, syscall.EINVAL, oe.Errno(), name)
		require.Contains(t, err.Error(), "EINVAL (invalid argument)", name)
	}
}
