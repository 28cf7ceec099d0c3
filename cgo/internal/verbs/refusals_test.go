//go:build cgo && linux

package verbs_test

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	. "github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// requireVerbErrno checks that err is the VerbError of verb carrying errno
// in its chain and its text, with ctx.ErrInvalidArgument.
func requireVerbErrno(t *testing.T, err error, verb string, errno syscall.Errno) {
	t.Helper()
	var ve *VerbError
	require.True(t, errors.As(err, &ve), "%v", err)
	require.Equal(t, verb, ve.Verb)
	require.ErrorIs(t, err, errno)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "EINVAL")
}

// TestHardwareRefusalsBeforeTheVerbCarryItsErrno: what the provider
// refuses before calling rdma-core, because rdma-core or the kernel would
// refuse it with EINVAL, carries EINVAL as the verb's own refusal would: a
// completion vector the device has not (the uverbs core's check), a send
// queue beyond its type's limits (mlx5_calc_sq_size), and on RoCE an
// address without a GRH (mlx5_create_ah; rdma_check_ah_attr at RTR).
func TestHardwareRefusalsBeforeTheVerbCarryItsErrno(t *testing.T) {
	d := hwDevice(t)
	path, port := loopbackPath(t, d)
	a, err := d.Query()
	require.NoError(t, err)
	_, err = d.CreateCompletionQueue(CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 4, CompVector: a.CompVectors}})
	requireVerbErrno(t, err, "mlx5dv_create_cq", syscall.EINVAL)

	cq, err := d.CreateCompletionQueue(CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 4}})
	require.NoError(t, err)
	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	lim := a.SendLimits(ctx.QPTypeRC)
	for _, caps := range []ctx.QueuePairCaps{
		{SendDepth: lim.MaxDepth + 1, MaxSendSGE: 1},
		{SendDepth: 1, MaxSendSGE: lim.MaxSGE + 1},
		{SendDepth: 1, MaxSendSGE: 1, MaxInline: lim.MaxInline + 1},
	} {
		caps.RecvDepth, caps.MaxRecvSGE = 1, 1
		_, err = pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: caps})
		requireVerbErrno(t, err, "mlx5dv_create_qp", syscall.EINVAL)
	}

	// A port the device has not: mlx5_create_ah refuses it, named as
	// ibv_create_ah (not the port query behind it).
	noPort := path
	noPort.Port = a.PhysPortCount + 1
	_, err = pd.CreateAddressHandle(noPort)
	requireVerbErrno(t, err, "ibv_create_ah", syscall.EINVAL)

	if port.LinkLayer != ctx.LinkLayerEthernet {
		return
	}
	noGRH := path
	noGRH.GlobalRoute = false
	_, err = pd.CreateAddressHandle(noGRH)
	requireVerbErrno(t, err, "ibv_create_ah", syscall.EINVAL)
	qp, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 1, RecvDepth: 1, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: path.Port}))
	err = qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, Path: noGRH, PathMTU: ctx.MTU1024, RemoteQPN: qp.Descriptor().QPN})
	requireVerbErrno(t, err, "ibv_modify_qp", syscall.EINVAL)
}
