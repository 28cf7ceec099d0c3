package wqebuilder_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestDumpNamesTheSegments posts a WQE and decodes it through the public
// ring decoder, including one that wraps at the ring end.
func TestDumpNamesTheSegments(t *testing.T) {
	f := newFixture(t, defaultOpts())
	q := f.q
	for q.ProducerIndex()%64 != 63 {
		require.NoError(t, q.Begin(0, 0).Nop().Finish())
		q.Complete(uint16(q.ProducerIndex() - 1))
	}
	pi := q.ProducerIndex()
	require.NoError(t, q.Begin(9, wqebuilder.Signaled).RdmaWriteImm(0xabcdef00, 0x1234, 0x55).
		SGE(0x7000, 64, 0x99).SGE(0x8000, 32, 0x99).SGE(0x9000, 16, 0x99).Finish())
	out := wqebuilder.Dump(q, pi, prm.TransportRC)
	require.Contains(t, out, prm.OpRdmaWriteImm.String())
	require.Contains(t, out, "addr=0x00000000abcdef00 rkey=0x00001234")
	require.Contains(t, out, "addr=0x0000000000007000")
	require.Contains(t, out, "addr=0x0000000000008000")
	require.Contains(t, out, "addr=0x0000000000009000", "the segment after the ring end is decoded")
	require.Contains(t, out, "wqebbs=2")
	require.Equal(t, "RDMA_WRITE_IMM", prm.OpRdmaWriteImm.String())
}
