//go:build cgo && linux

package emulate_test

import (
	"os"
	"os/exec"
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

// TestProviderPortDefaultOnTwoPorts checks the provider's port default on
// devices of two ports (MLX5KIT_EMULATE_PORTS=2, run in fresh processes on
// InfiniBand, RoCE and the write-only ABI): a QP brought to INIT on port 2
// and then moved without a port keeps port 2, so the address vector of its
// RTR, whose port is left 0, is on port 2, as the kernel requires when the
// modify does not name the port (modify_qp refuses an AV port other than
// the QP's with EINVAL). A provider that took port 1 for every modify
// without one put that address vector on port 1 and was refused. An RTR
// naming port 1 for a QP on port 2 is refused, which shows the port is
// checked.
func TestProviderPortDefaultOnTwoPorts(t *testing.T) {
	if os.Getenv(emulate.EnvPorts) != "2" {
		if os.Getenv(envChild) != "" {
			t.Skip("a child run of one-port devices")
		}
		for _, c := range []struct{ name, link, abi string }{
			{"infiniband", "infiniband", ""},
			{"ethernet", "ethernet", ""},
			{"write-abi-ethernet", "ethernet", emulate.ABIWrite},
		} {
			t.Run(c.name, func(t *testing.T) {
				cmd := exec.Command(os.Args[0], "-test.run", "^TestProviderPortDefaultOnTwoPorts$|^TestChildIsEmulated$", "-test.count", "1", "-test.v")
				cmd.Env = append(os.Environ(), envChild+"=1", emulate.EnvEmulate+"=1", emulate.EnvPorts+"=2",
					emulate.EnvLink+"="+c.link, emulate.EnvABI+"="+c.abi)
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "%s", out)
				require.Contains(t, string(out), "--- PASS: TestProviderPortDefaultOnTwoPorts")
				require.Contains(t, string(out), "--- PASS: TestChildIsEmulated")
			})
		}
		return
	}

	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	attr, err := d.Query()
	require.NoError(t, err)
	require.Equal(t, uint8(2), attr.PhysPortCount, "phys_port_cnt of the emulated device")
	pa, err := d.QueryPort(2)
	require.NoError(t, err)
	require.Equal(t, uint8(2), pa.Port)
	require.Equal(t, ctx.PortStateActive, pa.State)
	_, err = d.QueryPort(3)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument, "port 3 of a two-port device")
	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 64}})
	require.NoError(t, err)

	// The path to the device itself, its port left 0 (on RoCE the GID of
	// port 2's table).
	path := ctx.AddressAttr{DLID: pa.LID}
	if pa.LinkLayer == ctx.LinkLayerEthernet {
		g, err := d.QueryGID(2, 0)
		require.NoError(t, err)
		path = ctx.AddressAttr{GlobalRoute: true, DGID: g.GID, HopLimit: 64}
	}
	newRC := func() *verbs.QueuePair {
		q, err := pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Caps: ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
		require.NoError(t, err)
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 2, Access: ctx.AccessLocalWrite | ctx.AccessRemoteWrite}),
			"RESET→INIT on port 2")
		return q
	}
	rtr := func(q *verbs.QueuePair, p ctx.AddressAttr) error {
		return q.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: q.Descriptor().QPN, PathMTU: ctx.MTU1024,
			Path: p, MinRNRTimer: 12, MaxDestRdAtomic: 1})
	}

	q := newRC()
	require.NoError(t, rtr(q, path), "INIT→RTR of a QP on port 2, the path's port left 0")
	require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 1}), "RTR→RTS")
	st, err := q.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTS, st)
	require.NoError(t, q.Close())

	// INIT→INIT without a port keeps the QP on port 2.
	q = newRC()
	require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: ctx.AccessLocalWrite}), "INIT→INIT, the port left 0")
	on2 := path
	on2.Port = 2
	require.NoError(t, rtr(q, on2), "INIT→RTR with the path on port 2 after INIT→INIT")
	require.NoError(t, q.Close())

	// The check itself: an address vector on port 1 for a QP on port 2.
	q = newRC()
	on1 := path
	on1.Port = 1
	err = rtr(q, on1)
	require.ErrorIs(t, err, syscall.EINVAL, "the AV's port is not the QP's")
	st, err = q.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateInit, st, "a refused modify changes nothing")
	require.NoError(t, q.Close())

	// A DCT on port 2: its RTR's path, port left 0, is on port 2.
	srq, err := pd.CreateSRQ(ctx.SRQConfig{Depth: 16, MaxSGE: 1})
	require.NoError(t, err)
	dct, err := pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeDCT, RecvCQ: cq, SRQ: srq, DCKey: 0x22})
	require.NoError(t, err)
	require.NoError(t, dct.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 2, Access: ctx.AccessLocalWrite | ctx.AccessRemoteWrite}))
	require.NoError(t, dct.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU1024, Path: path, MinRNRTimer: 12}),
		"a DCT on port 2 to RTR, the path's port left 0")
	require.NotZero(t, dct.Descriptor().QPN, "the DCT number")
	require.NoError(t, dct.Close())
	require.NoError(t, srq.Close())
	require.NoError(t, cq.Close())
	require.NoError(t, pd.Close())
}
