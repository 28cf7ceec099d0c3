package sim

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestNewCQRingAsLibmlx5Initialises: a new CQ's ring holds what
// rdma-core's mlx5_alloc_cq_buf leaves in a ring libmlx5 creates on a NIC,
// the ring the kit's poller meets on hardware: every CQE64 (the second half
// of a 128-byte slot) INVALID with owner bit 0 (MLX5_CQE_INVALID << 4),
// every other byte zero. A poller's first lap then takes the same path on
// the model as on a NIC: the ring-full check of the slot before the
// consumer index sees owner bit 0, the lap's own, and an INVALID opcode.
func TestNewCQRingAsLibmlx5Initialises(t *testing.T) {
	e := newEnv(t, Options{})
	for _, size := range []uint32{prm.CQE64Size, prm.CQE128Size} {
		c := e.newCQ(e.c, 8, size)
		ring := unsafe.Slice((*byte)(c.d.Buf), c.d.CQECnt*c.d.CQESize)
		for i := uint32(0); i < c.d.CQECnt; i++ {
			slot := ring[i*size : (i+1)*size]
			want := make([]byte, size)
			want[size-prm.CQE64Size+prm.CQEOpOwn] = prm.CQEInvalidOpOwn
			require.Equal(t, want, slot, "CQE size %d, slot %d of a new ring", size, i)
		}
	}
}
