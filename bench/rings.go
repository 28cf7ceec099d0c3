package bench

import (
	"fmt"
	"math/bits"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Geometry of the queue memory every post/poll benchmark runs over. A
// latency-oriented QP: 256 send WQEBBs (16 KiB), 256 CQE64s (16 KiB), a
// BlueFlame register of two 256-byte halves.
const (
	benchWQECnt      = 256
	benchCQECnt      = 256
	benchBlueFlame   = 256
	benchQPN         = 0x1234
	benchPayloadSize = 4096
	pageSize         = 4096
)

// queueMemory is one anonymous mapping laid out like the send queue, the
// completion queue, their doorbell records and the BlueFlame page that
// mlx5dv_init_obj hands out, plus a payload buffer for the SGE. Both the Go
// and the C loops run over it, so they see the same addresses, alignment and
// cache footprint.
type queueMemory struct {
	region []byte

	sq      unsafe.Pointer // wqeCnt WQEBBs
	sqEnd   unsafe.Pointer
	wqeCnt  uint32
	qpDBRec unsafe.Pointer // two big-endian words: [0] receive, [1] send
	bf      unsafe.Pointer // BlueFlame register, two halves of bfSize
	bfSize  uint32
	cq      unsafe.Pointer // cqeCnt CQE64s
	cqeCnt  uint32
	cqDBRec unsafe.Pointer // [0] consumer index, [1] arm
	payload unsafe.Pointer // benchPayloadSize bytes
	qpn     uint32
}

// newQueueMemory maps the rings. Layout, page aligned: SQ, CQ, a page of
// doorbell records (QP at 0, CQ at 64: separate cache lines, as rdma-core's
// doorbell allocator hands them out), the BlueFlame page, the payload.
func newQueueMemory(wqeCnt, cqeCnt uint32) (*queueMemory, error) {
	if wqeCnt == 0 || wqeCnt&(wqeCnt-1) != 0 || cqeCnt == 0 || cqeCnt&(cqeCnt-1) != 0 {
		return nil, fmt.Errorf("bench: map rings: counts %d/%d must be powers of two", wqeCnt, cqeCnt)
	}
	sqBytes := roundPage(int(wqeCnt) * prm.WQEBBSize)
	cqBytes := roundPage(int(cqeCnt) * prm.CQE64Size)
	total := sqBytes + cqBytes + pageSize + pageSize + roundPage(benchPayloadSize)
	region, err := unix.Mmap(-1, 0, total, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANON|unix.MAP_POPULATE)
	if err != nil {
		return nil, fmt.Errorf("bench: map rings: %w", err)
	}
	base := unsafe.Pointer(unsafe.SliceData(region))
	m := &queueMemory{
		region: region,
		sq:     base,
		sqEnd:  unsafe.Add(base, int(wqeCnt)*prm.WQEBBSize),
		wqeCnt: wqeCnt,
		cq:     unsafe.Add(base, sqBytes),
		cqeCnt: cqeCnt,
		bfSize: benchBlueFlame,
		qpn:    benchQPN,
	}
	dbPage := unsafe.Add(base, sqBytes+cqBytes)
	m.qpDBRec = dbPage
	m.cqDBRec = unsafe.Add(dbPage, 64)
	m.bf = unsafe.Add(dbPage, pageSize)
	m.payload = unsafe.Add(dbPage, 2*pageSize)
	m.reset()
	return m, nil
}

func roundPage(n int) int { return (n + pageSize - 1) &^ (pageSize - 1) }

// reset clears the rings and marks every CQE invalid (opcode 15, owner 0),
// as a freshly created CQ.
func (m *queueMemory) reset() {
	clear(m.region)
	for i := uint32(0); i < m.cqeCnt; i++ {
		*(*uint8)(unsafe.Add(m.cq, uintptr(i)*prm.CQE64Size+prm.CQEOpOwn)) = prm.CQEInvalidOpOwn
	}
}

// close unmaps the rings.
func (m *queueMemory) close() error {
	if m.region == nil {
		return nil
	}
	err := unix.Munmap(m.region)
	m.region = nil
	return err
}

// wqe returns the address of WQEBB i (modulo the ring).
func (m *queueMemory) wqe(i uint32) unsafe.Pointer {
	return unsafe.Add(m.sq, uintptr(i&(m.wqeCnt-1))*prm.WQEBBSize)
}

// cqe returns the address of CQE i (modulo the ring).
func (m *queueMemory) cqe(i uint32) unsafe.Pointer {
	return unsafe.Add(m.cq, uintptr(i&(m.cqeCnt-1))*prm.CQE64Size)
}

// The work request every benchmark iteration posts: RDMA_WRITE_IMM of 8
// bytes from the payload buffer, one SGE, signaled.
const (
	benchLKey  = 0x1111
	benchRKey  = 0x2222
	benchRAddr = 0x7f00_0000_1000
	benchLen   = 8
	benchImm   = 0xabcd0123
)

// completer stands in for the device: after each post it reads the send
// producer index from the QP's doorbell record and writes the requester
// CQE64 of the WQE before it (send opcode and QPN, wqe_counter, then the
// op_own byte with the owner bit of its pass over the ring). It is written
// store for store like floor_complete_cqe in cfloor.c, so the Go and C loops
// pay the same for it.
type completer struct {
	cq   unsafe.Pointer
	mask uint32 // cqeCnt - 1
	cnt  uint32 // cqeCnt: this bit of the index is the owner bit
	// ownerScale is 1<<24 / cqeCnt (the benchmark rings are far below
	// 2^24 CQEs): (index & cnt) * ownerScale is the owner bit where op_own
	// sits in the CQE's last word, with no variable shift (which Go guards
	// against counts of 32 or more).
	ownerScale uint32
	pi         uint32
	qpDBRec    unsafe.Pointer
	// sopDropQPN is the CQE's sop_drop_qpn word as it lies in memory:
	// the send opcode and the QPN, big-endian.
	sopDropQPN uint32
}

func newCompleter(m *queueMemory) completer {
	return completer{cq: m.cq, mask: m.cqeCnt - 1, cnt: m.cqeCnt, ownerScale: 1 << 24 / m.cqeCnt, qpDBRec: m.qpDBRec,
		sopDropQPN: bits.ReverseBytes32(uint32(prm.OpRdmaWriteImm)<<prm.CQESendOpShift | m.qpn)}
}

// complete writes one CQE. It is small enough to be inlined, as its C twin
// is. Its second store writes wqe_counter, signature and op_own together
// (bytes 60 to 63, little-endian word), so op_own is never seen before the
// counter.
func (c *completer) complete() {
	pi := bits.ReverseBytes32(*(*uint32)(unsafe.Add(c.qpDBRec, prm.DoorbellRecordSendB)))
	n := c.pi
	c.pi = n + 1
	cqe := unsafe.Add(c.cq, uintptr(n&c.mask)*prm.CQE64Size)
	*(*uint32)(unsafe.Add(cqe, prm.CQESopDropQPN)) = c.sopDropQPN
	opOwn := uint32(prm.CQEReq)<<(prm.CQEOpcodeShift+24) | (n&c.cnt)*c.ownerScale
	*(*uint32)(unsafe.Add(cqe, prm.CQEWQECounter)) = uint32(bits.ReverseBytes16(uint16(pi-1))) | opOwn
}
