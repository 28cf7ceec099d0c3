//go:build cgo && linux

package emulate_test

import (
	"syscall"
	"testing"

	"github.com/mlx5kit/mlx5kit/internal/devattr"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// modifyCommands is how many modify commands the emulated kernel has
// answered, of either form libmlx5 sends.
func modifyCommands() int {
	return emulate.CallCount("write MODIFY_QP") + emulate.CallCount("write EX_MODIFY_QP")
}

// TestCgoProviderProbesDCReadAtomicDepth opens the emulated device through
// the cgo provider, where rdma-core (before 47) does not report DC's
// read/atomic depths, and checks that Query reports the model's DC
// initiator depth, learnt by the provider's probe; that a DCI
// brought to RTS with that depth is accepted by the kernel; and that one
// deeper is refused before any modify command is sent, with EINVAL and an
// error that names the limit.
func TestCgoProviderProbesDCReadAtomicDepth(t *testing.T) {
	f := emulate.Fabric()
	require.NotNil(t, f, "the emulation is on")
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	model, err := simadopt.Provider(f).OpenDevice(d.Name())
	require.NoError(t, err)
	defer model.Close()
	want, err := model.Query()
	require.NoError(t, err)
	require.NotZero(t, want.MaxDCInitRdAtomic)

	attr, err := d.Query()
	require.NoError(t, err)
	require.True(t, attr.DC)
	require.False(t, d.DVAttr().Has(devattr.DVMaskMaxDCRdAtomic), "rdma-core reports no DC depths: the probe is what tells")
	require.Equal(t, want.MaxQPInitRdAtomic, attr.MaxQPInitRdAtomic)
	require.Equal(t, want.MaxDCInitRdAtomic, attr.MaxDCInitRdAtomic, "the probed DC initiator depth")

	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 16}})
	require.NoError(t, err)
	dci, err := pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeDCI, SendCQ: cq,
		Caps: ctx.QueuePairCaps{SendDepth: 4, MaxSendSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1}))
	require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU1024}))
	rts := ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7}

	sent := modifyCommands()
	rts.MaxRdAtomic = uint8(attr.MaxDCInitRdAtomic + 1)
	err = dci.Modify(rts)
	require.ErrorIs(t, err, syscall.EINVAL, "deeper than DC's depth")
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "max_dc_init_rd_atom")
	require.Equal(t, sent, modifyCommands(), "refused before the verb")

	rts.MaxRdAtomic = uint8(attr.MaxDCInitRdAtomic)
	require.NoError(t, dci.Modify(rts), "DC's depth is accepted by the kernel")
	require.Equal(t, sent+1, modifyCommands())
	st, err := dci.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTS, st)
}
