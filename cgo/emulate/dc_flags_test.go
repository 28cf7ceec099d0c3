//go:build cgo && linux

package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestBothDCFlagsOnAnRCQP: process_vendor_flags takes the vendor flags'
// DC type only when exactly one of MLX5_QP_FLAG_TYPE_DCI and _DCT is set;
// with both on a QP of a uverbs type other than IB_QPT_DRIVER it consumes
// them and the QP is of its uverbs type (EINVAL is for a driver QP
// only). CREATE_QP of an RC QP with both flags creates an RC QP; it was
// refused with EINVAL.
func TestBothDCFlagsOnAnRCQP(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	const sqCnt, rqCnt, rqShift = 16, 8, 5
	buf, db := qpMemory(t, rqCnt<<rqShift, sqCnt)
	h, qpn, _, en := createQPCmd(k, a, fd, pd, cq, cq, qptRC, qpCaps{sendWR: 8, recvWR: 8, sendSGE: 1, recvSGE: 2},
		mlx5QPReq(addrOf(buf), addrOf(db), sqCnt, rqCnt, rqShift, mlx5QPFlagDCI|mlx5QPFlagDCT, 0))
	require.Zero(t, en, "an RC QP with both DC type flags")
	require.NotZero(t, qpn)
	require.Equal(t, ctx.QPTypeRC, k.files[fd].uctx.objects[h].qpType)
	require.Zero(t, destroyQPCmd(k, a, fd, h))
}
