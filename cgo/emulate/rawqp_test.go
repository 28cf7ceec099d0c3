//go:build cgo && linux

package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/kerrno"
)

// TestCreateRawPacketQPNeedsNetRaw: create_qp (uverbs_cmd.c) refuses a raw
// packet QP with EPERM unless the caller may use raw packets
// (rdma_dev_has_raw_cap), before it looks any handle up; with the
// capability mlx5_ib would create it, which the model cannot
// (EOPNOTSUPP).
func TestCreateRawPacketQPNeedsNetRaw(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	buf, db := qpMemory(t, 8<<5, 16)
	vendor := mlx5QPReq(addrOf(buf), addrOf(db), 16, 8, 5, 0, 0)
	caps := qpCaps{sendWR: 8, recvWR: 8, sendSGE: 1, recvSGE: 2}
	saved := kerrno.HasRawCap
	t.Cleanup(func() { kerrno.HasRawCap = saved })

	kerrno.HasRawCap = func() bool { return false }
	_, _, _, en := createQPCmd(k, a, fd, pd, cq, cq, qptRawPacket, caps, vendor)
	require.Equal(t, unix.EPERM, en, "without CAP_NET_RAW")
	_, _, _, en = createQPCmd(k, a, fd, 0xbeef, 0xbeef, 0xbeef, qptRawPacket, caps, vendor)
	require.Equal(t, unix.EPERM, en, "before the handles are looked up")

	kerrno.HasRawCap = func() bool { return true }
	_, _, _, en = createQPCmd(k, a, fd, pd, cq, cq, qptRawPacket, caps, vendor)
	require.Equal(t, unix.EOPNOTSUPP, en, "with CAP_NET_RAW")
}
