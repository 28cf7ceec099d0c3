package monocq_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// TestPublicNames polls a CQE and names its opcode and a syndrome through
// the exported types.
func TestPublicNames(t *testing.T) {
	cq, complete, _, unmap := exampleRing()
	defer unmap()
	complete(prm.CQEReq, 0x11, 3, 64)
	var got []monocq.CQEOpcode
	n := cq.Poll(8, func(c *monocq.CQE) {
		got = append(got, c.Opcode())
		require.Contains(t, c.String(), "REQ")
	})
	require.Equal(t, 1, n)
	require.Equal(t, []monocq.CQEOpcode{prm.CQEReq}, got)
	require.Equal(t, "RNR_RETRY_EXC_ERR", monocq.Syndrome(prm.SyndromeRNRRetryExc).String())
	require.True(t, prm.CQEReqErr.IsError())
	require.False(t, monocq.Syndrome(0x77).Known())
}
