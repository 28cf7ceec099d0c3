//go:build cgo && linux

package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestQueryQPSignalsAll: QUERY_QP answers sq_sig_all as CREATE_QP asked
// it (create_qp sets sq_sig_type from it, mlx5_ib keeps it as the QP's
// sq_signal_bits and mlx5_ib_query_qp reads it back; ib_uverbs_query_qp
// copies it into the response).
func TestQueryQPSignalsAll(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	const sqSigAllOffset = 2*qpDestSize + 10*4 + 2*2 + 14 // struct ib_uverbs_query_qp_resp
	for _, sig := range []byte{0, 1} {
		buf, db := qpMemory(t, 8<<5, 16)
		resp, respAddr := a.alloc(createQPRespSize + mlx5CreateQPResp)
		core := respCore(respAddr, make([]byte, 48)...)
		ne.PutUint32(core[16:], pd)
		ne.PutUint32(core[20:], cq)
		ne.PutUint32(core[24:], cq)
		ne.PutUint32(core[32:], 8)
		ne.PutUint32(core[36:], 8)
		ne.PutUint32(core[40:], 1)
		ne.PutUint32(core[44:], 2)
		core[52] = sig
		core[53] = qptRC
		core = append(core, mlx5QPReq(addrOf(buf), addrOf(db), 16, 8, 5, 0, 0)...)
		cmd, n := a.writeCmd(cmdCreateQP, core, (createQPRespSize+mlx5CreateQPResp)/4)
		_, en := k.write(fd, cmd, n)
		require.Zero(t, en)
		q, en := queryQPCmd(k, a, fd, ne.Uint32(resp))
		require.Zero(t, en)
		require.Equal(t, sig, q[sqSigAllOffset], "sq_sig_all %d", sig)
	}
}
