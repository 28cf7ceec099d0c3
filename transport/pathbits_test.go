package transport

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// TestCompletionPathBits: a receive completion carries the DLID path bits
// of its CQE (ibv_wc's dlid_path_bits), and the next completion decoded
// into the same Completion, a send, clears them.
func TestCompletionPathBits(t *testing.T) {
	var cqe monocq.CQE
	binary.BigEndian.PutUint32(cqe[prm.CQEFlagsRQPN:], 0x42)
	cqe[prm.CQEMLPath] = 0x80 | 5 // bit 7 is not a path bit
	cqe[prm.CQEOpOwn] = uint8(prm.CQERespSend) << 4
	var c Completion
	c.decode(nil, &cqe)
	require.Equal(t, uint8(5), c.PathBits)
	require.Equal(t, uint32(0x42), c.SourceQPN)

	cqe[prm.CQEOpOwn] = uint8(prm.CQEReq) << 4
	c.decode(nil, &cqe)
	require.Zero(t, c.PathBits, "a send completion has no path bits")
}
