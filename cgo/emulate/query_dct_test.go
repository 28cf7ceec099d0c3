//go:build cgo && linux

package emulate

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// More offsets in QUERY_QP's response.
const (
	qqCurState = 2*qpDestSize + 45
	qqSigAll   = 2*qpDestSize + 58
)

// queryQPMaskCmd sends QUERY_QP with the given attribute mask and returns
// the response.
func queryQPMaskCmd(k *kernel, a *arena, fd int, h, mask uint32) ([]byte, syscall.Errno) {
	resp, respAddr := a.alloc(queryQPRespSize)
	core := respCore(respAddr, make([]byte, 8)...)
	ne.PutUint32(core[8:], h)
	ne.PutUint32(core[12:], mask)
	buf, n := a.writeCmd(cmdQueryQP, core, queryQPRespSize/4)
	if _, en := k.write(fd, buf, n); en != 0 {
		return nil, en
	}
	return resp, 0
}

// TestQueryDCT: QUERY_QP of a DCT is mlx5_ib_dct_query_qp's (hw/mlx5/qp.c):
// EINVAL for a mask with a bit outside STATE, ACCESS_FLAGS, PORT,
// MIN_RNR_TIMER, AV, PATH_MTU and PKEY_INDEX, and for a DCT not in RTR;
// otherwise only the attributes the mask asks are filled, the rest of
// struct ib_qp_attr and the init attributes zeroed. The AV's GRH fields
// it fills go unseen: its ah_attr has no GRH flag, so
// copy_ah_attr_to_uverbs copies none of them. The zeroed sq_sig_type is
// IB_SIGNAL_ALL_WR, which ib_uverbs_query_qp answers as sq_sig_all 1.
func TestQueryDCT(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	ringCQ, cqdb := cqMemory(t, 64, 64)
	cq, _, _, en := createCQCmd(k, a, fd, 63, 0, -1, mlx5CQReq(addrOf(ringCQ), addrOf(cqdb), 64), 8)
	require.Zero(t, en)
	ring, db := srqMemory(t, 16, 32)
	srq, _, _, _, en := createSRQCmd(k, a, fd, pd, 15, 1, mlx5SRQReq(addrOf(ring), addrOf(db), 0))
	require.Zero(t, en)
	pa, err := k.files[fd].uctx.dev.QueryPort(1)
	require.NoError(t, err)
	dh, _, en := createQPOnSRQ(k, a, fd, pd, cq, srq, qptDriver, qpCaps{}, dctReq(0, 0x1234))
	require.Zero(t, en)

	const dctMask = mmState | mmAccess | mmPort | mmMinRNR | mmAV | mmMTU | mmPKey
	_, en = queryQPMaskCmd(k, a, fd, dh, mmState)
	require.Equal(t, unix.EINVAL, en, "a DCT in RESET")
	require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: dh, mask: mmState | mmAccess | mmPKey | mmPort, state: 1, port: 1,
		access: accessLocalWrite | accessRemoteWrite}))
	_, en = queryQPMaskCmd(k, a, fd, dh, mmState)
	require.Equal(t, unix.EINVAL, en, "a DCT in INIT")
	rtr := modifyQP{h: dh, mask: mmState | mmAV | mmMTU | mmMinRNR, state: 2, mtu: 3, pathPort: 1, dlid: pa.LID, minRNR: 12}
	_, en = exModifyQPCmd(k, a, fd, rtr, 0, make([]byte, mlx5ModifyQPSize), exModifyQPRespSize/8, mlx5ModifyQPRespSize/8)
	require.Zero(t, en)

	for _, mask := range []uint32{dctMask | mmSQPSN, dctMask | mmTimeout, 0x1fffff} {
		_, en = queryQPMaskCmd(k, a, fd, dh, mask)
		require.Equal(t, unix.EINVAL, en, "mask %#x", mask)
	}
	q, en := queryQPMaskCmd(k, a, fd, dh, dctMask)
	require.Zero(t, en)
	require.Equal(t, uint8(2), q[qqState], "RTR")
	require.Zero(t, q[qqCurState], "cur_qp_state: not filled")
	require.Equal(t, uint8(3), q[qqPathMTU])
	require.Equal(t, uint8(12), q[qqMinRNR])
	require.Equal(t, uint8(1), q[qqPort])
	require.Equal(t, uint32(accessRemoteWrite), ne.Uint32(q[qqAccess:]))
	require.Equal(t, make([]byte, 2*qpDestSize), q[:2*qpDestSize], "no address vector")
	require.Equal(t, make([]byte, 20), q[2*qpDestSize:2*qpDestSize+20], "no capabilities")
	require.Zero(t, q[qqMaxRdAtom])
	require.Zero(t, q[qqMaxDestRd])
	require.Equal(t, uint8(1), q[qqSigAll], "sq_sig_type IB_SIGNAL_ALL_WR (0)")

	q, en = queryQPMaskCmd(k, a, fd, dh, mmState)
	require.Zero(t, en)
	require.Equal(t, uint8(2), q[qqState])
	require.Zero(t, q[qqPathMTU], "not asked")
	require.Zero(t, q[qqMinRNR], "not asked")
	require.Zero(t, q[qqPort], "not asked")
	require.Zero(t, ne.Uint32(q[qqAccess:]), "not asked")
}
