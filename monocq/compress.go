package monocq

import (
	"unsafe"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// A compressed session in the basic layout (the one a CQ created through
// mlx5dv_create_cq with MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE produces,
// read as the Linux mlx5e driver and DPDK's mlx5_rx.c read it):
//
//	slot p      the title: a CQE64 with format 3 whose fields are shared by
//	            every completion of the session, and byte_cnt = n, the
//	            number of completions
//	slot p+1    mini-CQEs 0..7
//	slot p+8k   mini-CQEs 8k..8k+7, for k >= 1
//	the rest    holes the device does not write
//
// The session takes exactly the n slots p .. p+n-1, one per completion, so
// it is expanded in place: completion i is written, as an ordinary CQE with
// the owner bit of slot p+i, into slot p+i. Each group of eight is read out
// of its mini-CQE slot before that slot is overwritten (the group's slot lies
// inside the range the group fills). Afterwards every slot of the session
// carries this lap's owner bit, so none of the session's stale bytes (holes,
// mini-CQE arrays whose last byte lands in op_own) can look valid on the next
// lap, which is what DPDK's and the kernel's op_own rewriting achieves.
//
// Requester sessions take wqe_counter and the send opcode from each
// mini-CQE; responder sessions count wqe_counter up from the title's and take
// the first mini-CQE word (RSS hash, or checksum and stride index) into
// rss_hash_result. byte_cnt always comes from the mini-CQE.

// expand rewrites the compressed session whose title is at consumer index
// pos. window is the number of slots from pos on that the device may have
// written. It returns why the session cannot be expanded, or "".
func (cq *CQ) expand(pos, window uint32) string {
	title := *cq.slot(pos) // a copy: slot pos is overwritten below
	n := prm.Load32(unsafe.Pointer(&title[prm.CQEByteCnt]))
	op := title[prm.CQEOpOwn]
	opcode := prm.OpOwnOpcode(op)
	switch {
	case n < 2:
		return "compressed session of fewer than 2 CQEs"
	case n > window:
		return "compressed session longer than the slots the device may have written"
	case opcode != prm.CQEReq && (opcode < prm.CQERespWrImm || opcode > prm.CQERespSendInv):
		return "compressed session with opcode " + opcode.String()
	}
	requester := opcode == prm.CQEReq
	wqeCounter := prm.Load16(unsafe.Pointer(&title[prm.CQEWQECounter]))
	keep := op &^ (prm.CQEFormatMask<<prm.CQEFormatShift | prm.CQEOwnerMask)

	for group := uint32(0); group*prm.MiniCQEsPerSlot < n; group++ {
		at := group * prm.MiniCQEsPerSlot
		from := at
		if group == 0 {
			from = 1
		}
		minis := *cq.slot(pos + from)
		for j := uint32(0); j < prm.MiniCQEsPerSlot && at+j < n; j++ {
			i := at + j
			m := (*[prm.MiniCQESize]byte)(minis[j*prm.MiniCQESize:])
			c := cq.slot(pos + i)
			*c = title
			copy(c[prm.CQEByteCnt:prm.CQEByteCnt+4], m[prm.MiniRespByteCnt:])
			if requester {
				copy(c[prm.CQEWQECounter:prm.CQEWQECounter+2], m[prm.MiniReqWQECounter:])
				c[prm.CQESopDropQPN] = m[prm.MiniReqSWOpcode]
			} else {
				prm.Store16(unsafe.Pointer(&c[prm.CQEWQECounter]), wqeCounter+uint16(i))
				copy(c[prm.CQERxHashResult:prm.CQERxHashResult+4], m[prm.MiniRespRxHash:])
			}
			c[prm.CQEOpOwn] = keep | uint8((pos+i)>>(cq.logCnt&31))&prm.CQEOwnerMask
		}
	}
	// The rewritten slots must reach memory before the consumer index that
	// hands them back to the device.
	blueflame.StoreBarrier()
	cq.sessions++
	cq.miniCQEs += uint64(n)
	return ""
}
