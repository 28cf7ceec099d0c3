//go:build cgo && linux

package emulate_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
)

// TestExtendedVerbsUnderPreload compiles testdata/ext_verbs.c and runs it
// with the emulation preloaded, over both ABIs and both link layers:
// rdma-core's extended verbs as packaged, QPs from ibv_create_qp_ex posted
// with the ibv_wr_* API (RDMA WRITE with and without immediate, READ,
// compare-and-swap and fetch-and-add on a uint64_t in host byte order, as
// under IBV_ATOMIC_HCA on a ConnectX, SEND with and without immediate, SGE
// lists, inline data and inline data lists that run past the end of the
// send ring, several WRs per ibv_wr_start, ibv_wr_abort, UD with
// ibv_wr_set_ud_addr) and CQs from ibv_create_cq_ex read with the
// ibv_wc_read_* accessors. The program checks every destination byte for
// byte and every completion field, and prints a FAIL line for each that is
// not what a ConnectX gives: a wrong rkey completes with
// IBV_WC_REM_ACCESS_ERR and flushes the WR after it (on a CQ that stamps
// its CQEs too), a SEND longer than its receive completes with
// IBV_WC_REM_INV_REQ_ERR and the receive with IBV_WC_LOC_LEN_ERR, and
// every successful completion has a timestamp, over the write ABI too
// (libibverbs creates the CQ with the legacy command there).
func TestExtendedVerbsUnderPreload(t *testing.T) {
	prog, lib := cProgram(t, "ext_verbs", "-lmlx5")

	for _, abi := range []string{"", emulate.ABIWrite} {
		for _, link := range []string{"infiniband", "ethernet"} {
			t.Run("abi="+abi+",link="+link, func(t *testing.T) {
				s := runPreloaded(t, prog, lib, abi, link)
				require.Contains(t, s, "link "+link+"\n")
				require.NotContains(t, s, "FAIL")
				for _, line := range []string{
					"rdma_write sge: checked\n", "rdma_write sge list: checked\n", "rdma_write_imm: checked\n",
					"rdma_read sge list: checked\n", "atomics: checked\n", "send: checked\n", "batch: checked\n",
					"abort: checked\n", "refused: checked\n",
					// The vendor syndrome of a remote access error is the
					// model's (docs/hardware.md, "Vendor syndromes").
					"wrong rkey: remote access error (vendor_err ",
					"), then Work Request Flushed Error (vendor_err 0xf9)\n",
					"long send: remote invalid request error, short receive: local length error\n",
					// libmlx5 refuses at creation an operation the QP
					// type has not, and sets every builder the type has
					// whatever send_ops_flags says.
					"UD with RDMA_WRITE: Operation not supported\n", "RC with TSO: Operation not supported\n",
					"RC SEND-only QP, RDMA_WRITE: checked\n",
					"failures 0\n", "done\n",
				} {
					require.Contains(t, s, line)
				}
				// The rings wrap many times, inline data runs past their
				// end, and UD data starts at the ring's start after
				// headers that fill the last WQEBB (the counts follow from
				// the sizes the program posts and the ring sizes libmlx5
				// chose; the program checks each WQE's place and size in
				// the ring against its count).
				require.Contains(t, s, "rc ring: 16 WQEBBs, 24 times round, inline data across the end 11 times, data at the ring start 0 times\n")
				require.Contains(t, s, "rc inline write ring: 16 WQEBBs, 15 times round, inline data across the end 9 times\n")
				require.Contains(t, s, "ud ring: 32 WQEBBs, 34 times round, inline data across the end 13 times, data at the ring start 14 times\n")
			})
		}
	}
}
