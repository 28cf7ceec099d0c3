//go:build cgo && linux

package emulate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
)

// TestDCUnderPreload compiles testdata/dc_pingpong.c, a DCI and a DCT of
// one process created with mlx5dv_create_qp, the DCT on an SRQ, 100 SENDs
// posted with the ibv_wr_* API and mlx5dv_wr_set_dc_addr and completed
// through ibv_poll_cq of libmlx5 as packaged, and runs it with the
// emulation preloaded over both ABIs (InfiniBand ports: on RoCE libmlx5
// asks the kernel for the address handle's MAC): the DCT number libmlx5
// learnt at RTR addresses the WQEs libmlx5 wrote, the model executes them,
// and libmlx5 reads the CQEs the model writes, with 64- and 128-byte CQEs:
// over 128-byte CQEs the payloads of short messages come from the DCT's
// CQEs (scatter-to-CQE, which libmlx5 asks for a DCT only when the kernel
// announces it, and mlx5_ib turns on for a DCT only over 128-byte CQEs).
func TestDCUnderPreload(t *testing.T) {
	prog, lib := cProgram(t, "dc_pingpong", "-lmlx5")

	for _, abi := range []string{"", emulate.ABIWrite} {
		for _, cqe := range []string{"64", "128"} {
			t.Run("abi="+abi+"/cqe="+cqe, func(t *testing.T) {
				// libmlx5's CQE size (MLX5_CQE_SIZE, 64 by default).
				t.Setenv("MLX5_CQE_SIZE", cqe)
				out := runPreloaded(t, prog, lib, abi, "infiniband")
				s := out
				require.Contains(t, s, "dct number known: 1\n", "the DCT number of the RTR response")
				require.Contains(t, s, "DCT to RTS: Invalid argument\n", "a DCT stops at RTR (mlx5_ib_modify_dct)")
				require.Contains(t, s, "messages 100 sends 100 recvs 100 wrong 0 mismatches 0\n")
				// libmlx5 asks scatter-to-CQE for a DCT only when
				// QUERY_DEVICE announces it (SCAT2CQE_DCT), and
				// create_dct turns it on only over 128-byte CQEs: in
				// a 64-byte one the payload would cover the DCI's QPN
				// (wc.src_qp, checked above).
				scattered := map[string]string{"64": "no", "128": "yes"}[cqe]
				require.Contains(t, s, "DCT receives scattered to the CQE: "+scattered+"\n")
				require.Contains(t, s, "done\n")
			})
		}
	}
}
