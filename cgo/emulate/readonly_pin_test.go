//go:build cgo && linux

package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestKernelReadOnlyMemoryNotPinnedWritable: memory the device writes is
// pinned for writing (ib_umem_get with FOLL_WRITE for a writable MR, and
// for a CQ ring, IB_ACCESS_LOCAL_WRITE), which a read-only mapping
// refuses with EFAULT; memory the device only reads may be read-only.
func TestKernelReadOnlyMemoryNotPinnedWritable(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)

	mem, err := unix.Mmap(-1, 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	require.NoError(t, unix.Mprotect(mem[4096:2*4096], unix.PROT_READ))
	start := uint64(addrOf(mem))

	_, _, _, en = regMRCmd(k, a, fd, pd, start, 3*4096, start, accessLocalWrite)
	require.Equal(t, unix.EFAULT, en, "local write over a read-only page")
	_, _, _, en = regMRCmd(k, a, fd, pd, start+4096, 4096, start+4096, accessLocalWrite|accessRemoteWrite)
	require.Equal(t, unix.EFAULT, en, "remote write over a read-only page")
	_, _, _, en = regMRCmd(k, a, fd, pd, start, 4096, start, accessLocalWrite)
	require.Zero(t, en, "local write over a writable page")
	_, _, _, en = regMRCmd(k, a, fd, pd, start, 3*4096, start, accessRemoteRead)
	require.Zero(t, en, "remote read over a read-only page")

	ring, db := cqMemory(t, 64, 64)
	require.NoError(t, unix.Mprotect(ring, unix.PROT_READ))
	_, _, _, en = createCQCmd(k, a, fd, 63, 0, -1, mlx5CQReq(addrOf(ring), addrOf(db), 64), 8)
	require.Equal(t, unix.EFAULT, en, "a read-only CQ ring")

	ring, db = cqMemory(t, 64, 64)
	h, _, _, en := createCQCmd(k, a, fd, 31, 0, -1, mlx5CQReq(addrOf(ring), addrOf(db), 64), 8)
	require.Zero(t, en)
	ring2, _ := cqMemory(t, 64, 64)
	require.NoError(t, unix.Mprotect(ring2, unix.PROT_READ))
	_, en = resizeCQCmd(k, a, fd, h, 63, mlx5ResizeReq(addrOf(ring2), 64))
	require.Equal(t, unix.EFAULT, en, "resized onto a read-only ring")
}

// TestKernelQPReadOnlyDoorbellRecord: the model clears a QP's doorbell
// record when the QP goes to RESET, so a record on a read-only page is
// refused at CREATE_QP (EFAULT) rather than faulting the process at the
// first MODIFY_QP to RESET.
func TestKernelQPReadOnlyDoorbellRecord(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	const sqCnt, rqCnt, rqShift = 16, 8, 5
	buf, _ := qpMemory(t, rqCnt<<rqShift, sqCnt)
	db, err := unix.Mmap(-1, 0, 4096, unix.PROT_READ, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(db) })
	h, _, _, en := createQPCmd(k, a, fd, pd, cq, cq, qptRC, qpCaps{sendWR: 8, recvWR: 8, sendSGE: 1, recvSGE: 2},
		mlx5QPReq(addrOf(buf), addrOf(db), sqCnt, rqCnt, rqShift, 0, 0))
	if en == 0 {
		// Without the check the model faults the process here.
		_ = modifyQPCmd(k, a, fd, modifyQP{h: h, mask: mmState})
	}
	require.Equal(t, unix.EFAULT, en, "a read-only doorbell record")
	require.Len(t, k.files[fd].uctx.objects, 2, "no QP kept: the PD and the CQ")
}
