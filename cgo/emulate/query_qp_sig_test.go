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
		resp, respAddr := a.alloc(createQPRespSize + mlx5CreateQPResp)
		core := legacyCreateRCQP(t, respAddr, pd, cq, func(req []byte) { req[52] = sig })
		cmd, n := a.writeCmd(cmdCreateQP, core, (createQPRespSize+mlx5CreateQPResp)/4)
		_, en := k.write(fd, cmd, n)
		require.Zero(t, en)
		q, en := queryQPCmd(k, a, fd, ne.Uint32(resp))
		require.Zero(t, en)
		require.Equal(t, sig, q[sqSigAllOffset], "sq_sig_all %d", sig)
	}
}
