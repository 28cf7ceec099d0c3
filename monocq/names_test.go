package monocq_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/monocq"
)

// TestPublicNames polls an error CQE and a good one through the exported
// names, the way code outside the module compares them.
func TestPublicNames(t *testing.T) {
	cq, complete, _, unmap := exampleRing()
	defer unmap()
	complete(monocq.CQEReq, 0x11, 3, 64)
	var got []monocq.CQEOpcode
	n := cq.Poll(8, func(c *monocq.CQE) {
		got = append(got, c.Opcode())
		require.Contains(t, monocq.DumpCQE(c[:]), "REQ")
	})
	require.Equal(t, 1, n)
	require.Equal(t, []monocq.CQEOpcode{monocq.CQEReq}, got)
	require.Equal(t, "RNR_RETRY_EXC_ERR", monocq.SyndromeRNRRetryExc.String())
	require.True(t, monocq.CQEReqErr.IsError())
	require.False(t, monocq.Syndrome(0x77).Known())
}
