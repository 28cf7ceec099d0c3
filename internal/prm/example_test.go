package prm_test

import (
	"fmt"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// A signaled RDMA_WRITE with one data segment, written with the segment
// encoders into slot 1 of a two-WQEBB ring and decoded again.
func ExampleDumpWQE() {
	ring := make([]byte, 2*prm.WQEBBSize)
	wqe := unsafe.Pointer(&ring[prm.WQEBBSize])
	prm.PutCtrl(wqe, 1, prm.OpRdmaWrite, 0, 0x1c2, prm.FlagCQUpdate, 3, 0, 0)
	prm.PutRaddr(unsafe.Add(wqe, prm.CtrlSize), 0x7f0000001000, 0x2001)
	prm.PutData(unsafe.Add(wqe, prm.CtrlSize+prm.RaddrSize), 256, 0x3002, 0x7f0000200000)
	fmt.Println(prm.DumpWQE(ring, 1, prm.TransportRC))
	// Output:
	// WQE pi=1 slot=1/2 offset=0x40 RDMA_WRITE wqebbs=1 transport=RC
	//   ctrl    opcode=RDMA_WRITE(0x08) opmod=0x00 wqe_index=1 qpn=0x0001c2 ds=3 fm_ce_se=0x08[CQ_UPDATE]
	//   raddr   addr=0x00007f0000001000 rkey=0x00002001
	//   data    byte_count=256 lkey=0x00003002 addr=0x00007f0000200000
}

// An error completion for a remote access violation.
func ExampleDumpCQE() {
	cqe := make([]byte, prm.CQE64Size)
	cqe[prm.ErrCQESyndrome] = uint8(prm.SyndromeRemoteAccess)
	cqe[prm.ErrCQEVendorSyndrome] = 0x88
	prm.Store32(unsafe.Pointer(&cqe[prm.ErrCQEWQEOpcodeQPN]), uint32(prm.OpRdmaWrite)<<24|0x1c2)
	prm.Store16(unsafe.Pointer(&cqe[prm.CQEWQECounter]), 1)
	cqe[prm.CQEOpOwn] = prm.OpOwn(prm.CQEReqErr, prm.CQEFormatNone, false, 1)
	fmt.Println(prm.DumpCQE(cqe))
	// Output:
	// CQE REQ_ERR(13) owner=1 se=0 format=NONE wqe_counter=1
	//   error   syndrome=REMOTE_ACCESS_ERR(0x13) vendor_syndrome=0x88 qpn=0x0001c2 wqe_opcode=RDMA_WRITE
}
