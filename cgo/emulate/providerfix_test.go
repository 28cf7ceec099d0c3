//go:build cgo && linux

package emulate_test

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestProviderFixesOnEmulatedDevice runs the hardware provider's fixes of
// send-queue sizing, QP state transitions and the port check through
// libmlx5 and the emulated kernel, where the provider's requests meet
// rdma-core's arithmetic and the kernel's checks as on a ConnectX:
//
//   - a send queue of half max_qp_wr one-SGE WQEs is created: rdma-core
//     sizes its slots for the operations the provider names
//     (IBV_QP_INIT_ATTR_SEND_OPS_FLAGS); without them each RC slot took
//     256 bytes and the ring needed twice the WQEBBs the device has;
//   - INIT→INIT and RTS→RTS are accepted, with the attribute mask the
//     kernel's table allows (the emulated kernel checks it, as
//     ib_modify_qp_is_ok does);
//   - a transition that leaves the port 0 (RESET→INIT without Port, a
//     path without Port at RTR) gets the QP's port (1), where the kernel
//     refuses port 0 with EINVAL (rdma_is_port_valid).
func TestProviderFixesOnEmulatedDevice(t *testing.T) {
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	attr, err := d.Query()
	require.NoError(t, err)
	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 64}})
	require.NoError(t, err)

	creates := emulate.CallCount("write CREATE_QP")
	deep, err := pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Caps: ctx.QueuePairCaps{SendDepth: attr.MaxQPWR / 2, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err, "a send queue of max_qp_wr/2 WQEs (%d)", attr.MaxQPWR/2)
	require.Equal(t, creates+1, emulate.CallCount("write CREATE_QP"), "the kernel took libmlx5's ring")
	dq := deep.Descriptor()
	require.LessOrEqual(t, dq.SQ.WQECnt, attr.MaxQPWR, "the ring within the device's WQEBBs")
	require.GreaterOrEqual(t, dq.SQ.WQECnt, attr.MaxQPWR/2, "one WQEBB or more per WQE")
	require.NoError(t, deep.Close())

	q, err := pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Caps: ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	init := ctx.QPAttr{State: ctx.QPStateInit, Access: ctx.AccessLocalWrite | ctx.AccessRemoteWrite}
	require.NoError(t, q.Modify(init), "RESET→INIT with the port left 0")
	require.NoError(t, q.Modify(init), "INIT→INIT")
	pa, err := d.QueryPort(1)
	require.NoError(t, err)
	path := ctx.AddressAttr{DLID: pa.LID}
	if pa.LinkLayer == ctx.LinkLayerEthernet {
		g, err := d.QueryGID(1, 0)
		require.NoError(t, err)
		path = ctx.AddressAttr{GlobalRoute: true, DGID: g.GID, HopLimit: 64}
	}
	require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: q.Descriptor().QPN, PathMTU: ctx.MTU1024,
		Path: path, MinRNRTimer: 12, MaxDestRdAtomic: 1}), "INIT→RTR, the path's port left 0")
	rts := ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 1}
	require.NoError(t, q.Modify(rts), "RTR→RTS")
	require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateRTS}), "RTS→RTS")
	st, err := q.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTS, st)
	require.NoError(t, q.Close())

	// The port check itself: port 2 of a one-port device.
	q, err = pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Caps: ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	err = q.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 2, Access: ctx.AccessLocalWrite})
	require.ErrorIs(t, err, syscall.EINVAL, "port 2")
	st, err = q.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateReset, st, "a refused modify changes nothing")
	require.NoError(t, q.Close())
	require.NoError(t, cq.Close())
	require.NoError(t, pd.Close())
}
