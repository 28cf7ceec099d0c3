//go:build cgo && linux

package emulate_test

import (
	"os"
	"runtime"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
)

// TestHardwareProviderSRQLimitBoundIsTheRing: the hardware provider
// refuses an SRQ limit at or above the ring's WQE count, as ctx documents
// and the software HCA does: libmlx5 tells the kernel the ring and its
// wait queue together, so the kernel alone takes up to twice it.
func TestHardwareProviderSRQLimitBoundIsTheRing(t *testing.T) {
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	srq, err := pd.CreateSRQ(ctx.SRQConfig{Depth: 7, MaxSGE: 1})
	require.NoError(t, err)
	n := srq.Descriptor().WQECnt
	require.Equal(t, uint32(8), n)
	require.NoError(t, srq.ArmLimit(n-1))
	require.NoError(t, srq.ArmLimit(0))
	for _, l := range []uint32{n, 2*n - 1} {
		err := srq.ArmLimit(l)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "limit %d on a ring of %d WQEs", l, n)
		require.ErrorIs(t, err, syscall.EINVAL)
		require.Contains(t, err.Error(), "ibv_modify_srq")
		got, err := srq.Limit()
		require.NoError(t, err)
		require.Zero(t, got, "a refused limit changes nothing")
	}

	// The same through ctx, whose contract it is.
}

// TestHardwareProviderWaitEventOnClosedCQ: WaitEvent on a closed CQ is
// ErrClosed, as ReadEvent is; on a CQ without a completion channel it is
// ErrInvalidArgument.
func TestHardwareProviderWaitEventOnClosedCQ(t *testing.T) {
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 8, EventChannel: true}})
	require.NoError(t, err)
	require.NoError(t, cq.Close())
	_, err = cq.ReadEvent()
	require.ErrorIs(t, err, ctx.ErrClosed)
	_, err = cq.WaitEvent(time.Millisecond)
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.NotErrorIs(t, err, ctx.ErrInvalidArgument)

	// A CQ without a channel stays ErrInvalidArgument.
	cq2, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 8}})
	require.NoError(t, err)
	_, err = cq2.WaitEvent(time.Millisecond)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}

// TestHardwareProviderRingAllocationFailureIsENOMEM: a ring the provider's
// allocator cannot map fails the creation with ENOMEM (ctx.ErrNoMemory),
// named by the verb, not with an errno made up for a NULL without one.
func TestHardwareProviderRingAllocationFailureIsENOMEM(t *testing.T) {
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	_, err = d.Query() // the capability probe, before allocations fail
	require.NoError(t, err)
	verbs.FailAllocations(true)
	cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 64}})
	verbs.FailAllocations(false)
	require.Nil(t, cq)
	require.ErrorContains(t, err, "mlx5dv_create_cq")
	require.ErrorIs(t, err, syscall.ENOMEM)
	require.ErrorIs(t, err, ctx.ErrNoMemory)
}

// probedDeviceWithCQ opens the emulated device, runs its capability probe
// (before a test makes allocations fail) and returns it with a protection
// domain and a CQ of 64; the device is closed and its mappings checked at
// the end of the test.
func probedDeviceWithCQ(t *testing.T) (*verbs.Device, *verbs.ProtectionDomain, *verbs.CompletionQueue) {
	t.Helper()
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	t.Cleanup(func() { closeAndCollect(t, d, maps) })
	_, err = d.Query()
	require.NoError(t, err)
	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 64}})
	require.NoError(t, err)
	return d, pd, cq
}

// TestHardwareProviderFailedCreationsReleaseWhatTheyMade: a creation that
// fails after its first steps (the ring allocation fails inside
// mlx5dv_create_cq, mlx5dv_create_qp, ibv_create_srq) releases what those
// steps made: the completion channel (no descriptor left open), the thread
// domain (more failures than the device has dedicated BlueFlame registers
// leave the next QP one of its own) and the parent domain (the PD closes).
func TestHardwareProviderFailedCreationsReleaseWhatTheyMade(t *testing.T) {
	d, pd, cq := probedDeviceWithCQ(t)
	caps := ctx.QueuePairCaps{SendDepth: 4, RecvDepth: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	fds := len(openFDs())
	verbs.FailAllocations(true)
	t.Cleanup(func() { verbs.FailAllocations(false) })
	// The emulated device has 1024 dynamic BlueFlame registers.
	for i := 0; i < 1100; i++ {
		_, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 64, EventChannel: true}})
		require.ErrorContains(t, err, "mlx5dv_create_cq")
		require.ErrorIs(t, err, syscall.ENOMEM)
		for _, typ := range []ctx.QPType{ctx.QPTypeRC, ctx.QPTypeDCI} {
			_, err = pd.CreateQueuePair(verbs.QPConfig{Type: typ, SendCQ: cq, Caps: caps})
			require.ErrorContains(t, err, "mlx5dv_create_qp")
			require.ErrorIs(t, err, syscall.ENOMEM)
		}
		_, err = pd.CreateSRQ(ctx.SRQConfig{Depth: 7, MaxSGE: 1})
		require.ErrorContains(t, err, "ibv_create_srq")
		require.ErrorIs(t, err, syscall.ENOMEM)
	}
	verbs.FailAllocations(false)
	require.Equal(t, fds, len(openFDs()), "a completion channel of a failed CQ left open")

	qp, err := pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: caps})
	require.NoError(t, err)
	if _, set := os.LookupEnv("MLX5_SHUT_UP_BF"); !set {
		require.True(t, qp.DedicatedBlueFlame(), "the failed QPs' thread domains were released")
	}
	require.NoError(t, qp.Close())
	require.NoError(t, cq.Close())
	require.NoError(t, pd.Close(), "no parent domain of a failed creation holds the PD")
}

// TestHardwareProviderFailedQPNamesWhatRdmaCoreWasGiven: the error of a
// failed mlx5dv_create_qp describes the capabilities rdma-core was given,
// not the configuration's: a DCI, and a QP on an SRQ, have no receive
// queue whatever RecvDepth says.
func TestHardwareProviderFailedQPNamesWhatRdmaCoreWasGiven(t *testing.T) {
	_, pd, cq := probedDeviceWithCQ(t)
	srq, err := pd.CreateSRQ(ctx.SRQConfig{Depth: 7, MaxSGE: 1})
	require.NoError(t, err)
	caps := ctx.QueuePairCaps{SendDepth: 4, RecvDepth: 4, MaxSendSGE: 1, MaxRecvSGE: 1}
	verbs.FailAllocations(true)
	t.Cleanup(func() { verbs.FailAllocations(false) })
	_, err = pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeDCI, SendCQ: cq, Caps: caps})
	require.ErrorIs(t, err, syscall.ENOMEM)
	require.ErrorContains(t, err, "DCI QP (send 4×")
	require.ErrorContains(t, err, "recv 0×0 SGE, SRQ false")
	_, err = pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, SRQ: srq, Caps: caps})
	require.ErrorIs(t, err, syscall.ENOMEM)
	require.ErrorContains(t, err, "recv 0×0 SGE, SRQ true")
	verbs.FailAllocations(false)
}

// TestHardwareProviderProbeFailureNotKept: a capability probe that fails
// for want of memory fails Query with ctx.ErrNoMemory, and the next Query
// probes again: the failure is not kept as capabilities the device lacks
// (no DC, no 128-byte CQEs, no inline data).
func TestHardwareProviderProbeFailureNotKept(t *testing.T) {
	maps := emulate.MappingCount()
	ref, err := verbs.Open("")
	require.NoError(t, err)
	want, err := ref.Query()
	require.NoError(t, err)
	closeAndCollect(t, ref, maps)
	require.True(t, want.DC)
	require.NotZero(t, want.MaxInline)

	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	verbs.FailAllocations(true)
	_, err = d.Query()
	verbs.FailAllocations(false)
	require.ErrorIs(t, err, ctx.ErrNoMemory)
	require.ErrorIs(t, err, syscall.ENOMEM)
	got, err := d.Query()
	require.NoError(t, err)
	require.Equal(t, want.DC, got.DC, "the failed probe was kept")
	require.Equal(t, want.CQE128, got.CQE128)
	require.Equal(t, want.MaxInline, got.MaxInline)
	require.Equal(t, want.MaxSendWQESize, got.MaxSendWQESize)
	require.Equal(t, want.SendLimitsRC, got.SendLimitsRC)
	require.Equal(t, want.BlueFlameSize, got.BlueFlameSize)
}

// TestHardwareProviderRecvSGEProbe: the hardware provider finds the
// receive WQE's scatter limit libmlx5 takes (max_rq_desc_sz / 16, which
// the emulated kernel sets from the model's max_sge); a queue pair with
// that many receive SGEs is created, one more is refused at create by the
// kit with the limit named.
func TestHardwareProviderRecvSGEProbe(t *testing.T) {
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	a, err := d.Query()
	require.NoError(t, err)
	require.NotZero(t, a.MaxRecvSGE)
	require.Equal(t, a.MaxSGE, a.MaxRecvSGE, "the model's receive WQE holds max_sge entries")
}

// TestHardwareProviderSendLimitsUnderEmulation: every send-queue limit the
// hardware provider reports can be created under the emulated kernel. For
// inline sizes that need a 1 KiB slot libmlx5 grants what fills the slot
// (UD: 956 bytes, more than the 940 a WQE of the kit expresses) and tells
// the kernel so; mlx5_ib takes the library's ring as it comes and checks no
// inline size, so neither may the emulated kernel.
func TestHardwareProviderSendLimitsUnderEmulation(t *testing.T) {
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	a, err := d.Query()
	require.NoError(t, err)
	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 64}})
	require.NoError(t, err)
	for _, typ := range []ctx.QPType{ctx.QPTypeRC, ctx.QPTypeUD} {
		lim := sqsize.LimitsOf(typ, sqsize.DeviceOf(a))
		require.NotZero(t, lim.MaxInline, typ)
		for _, inline := range []uint32{900, lim.MaxInline} {
			qp, err := pd.CreateQueuePair(verbs.QPConfig{Type: typ, SendCQ: cq, RecvCQ: cq,
				Caps: ctx.QueuePairCaps{SendDepth: 4, RecvDepth: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: inline}})
			require.NoError(t, err, "%v with %d bytes inline (limit %d)", typ, inline, lim.MaxInline)
			require.NoError(t, qp.Close())
		}
	}
}

// TestReportedQueueLimitsAreTaken: a CQ of DeviceAttr.MaxCQE entries and
// an SRQ of DeviceAttr.MaxSRQSGE scatter entries are created through
// rdma-core on the emulated device as on the software HCA itself, and
// one more is refused by both. mlx5_ib reports max_cqe as
// (1 << log_max_cq_sz) - 1, since rdma-core rounds a CQ's entries up to a
// power of two above the depth, and max_srq_sge as the data segments of a
// receive WQE less one, since libmlx5 rounds an SRQ WQE (a next segment
// and the data segments) up to a power of two.
func TestReportedQueueLimitsAreTaken(t *testing.T) {
	for _, p := range []string{ctx.ProviderHardware, ctx.ProviderSoftware} {
		t.Run(p, func(t *testing.T) {
			maps := emulate.MappingCount()
			c, err := ctx.Open(ctx.Options{Provider: p, Device: "sim0"})
			require.NoError(t, err)
			defer func() {
				// rdma-core closes the device once the queue memory
				// is collected.
				require.NoError(t, c.Close())
				for deadline := time.Now().Add(10 * time.Second); emulate.MappingCount() != maps && time.Now().Before(deadline); {
					runtime.GC()
					time.Sleep(time.Millisecond)
				}
				require.Equal(t, maps, emulate.MappingCount(), "the device was closed")
			}()
			a, err := c.Query()
			require.NoError(t, err)
			pd, err := c.AllocProtectionDomain()
			require.NoError(t, err)

			cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: a.MaxCQE})
			require.NoError(t, err, "a CQ of max_cqe %d entries", a.MaxCQE)
			require.NoError(t, cq.Close())
			_, err = c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: a.MaxCQE + 1})
			require.ErrorIs(t, err, ctx.ErrInvalidArgument, "a CQ of max_cqe+1 entries")

			srq, err := pd.CreateSRQ(ctx.SRQConfig{Depth: 4, MaxSGE: a.MaxSRQSGE})
			require.NoError(t, err, "an SRQ of max_srq_sge %d", a.MaxSRQSGE)
			require.NoError(t, srq.Close())
			_, err = pd.CreateSRQ(ctx.SRQConfig{Depth: 4, MaxSGE: a.MaxSRQSGE + 1})
			require.ErrorIs(t, err, ctx.ErrInvalidArgument, "an SRQ of max_srq_sge+1")
		})
	}
}

// TestQueryGIDsOfAMissingPort: the GID table of a port the device does not
// have is refused through the hardware provider as on the software HCA,
// not returned empty.
func TestQueryGIDsOfAMissingPort(t *testing.T) {
	for _, p := range []string{ctx.ProviderHardware, ctx.ProviderSoftware} {
		t.Run(p, func(t *testing.T) {
			c, err := ctx.Open(ctx.Options{Provider: p, Device: "sim0"})
			require.NoError(t, err)
			defer func() { require.NoError(t, c.Close()) }()
			a, err := c.Query()
			require.NoError(t, err)
			gids, err := c.QueryGIDs(1)
			require.NoError(t, err)
			require.NotEmpty(t, gids)
			for _, port := range []uint8{0, a.PhysPortCount + 1, 255} {
				gids, err := c.QueryGIDs(port)
				require.ErrorIs(t, err, ctx.ErrInvalidArgument, "port %d", port)
				require.Nil(t, gids)
				if p == ctx.ProviderHardware {
					require.ErrorIs(t, err, syscall.EINVAL, "port %d", port)
				}
			}
		})
	}
}
