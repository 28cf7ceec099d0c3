package wqebuilder_test

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// exampleQueue maps a ring of 64 WQEBBs, a doorbell record and a BlueFlame
// page, as a provider hands them out, and returns a send queue over them.
func exampleQueue() (*wqebuilder.SendQueue, []byte, func()) {
	mem, err := unix.Mmap(-1, 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		panic(err)
	}
	q, err := wqebuilder.New(wqebuilder.Config{
		Buf:           unsafe.Pointer(&mem[0]),
		WQECnt:        64,
		QPN:           0x1234,
		DBRec:         unsafe.Pointer(&mem[4096]),
		BlueFlame:     unsafe.Pointer(&mem[8192]),
		BlueFlameSize: 256,
		MaxInline:     64,
		MaxSGE:        2,
	})
	if err != nil {
		panic(err)
	}
	return q, mem, func() { _ = unix.Munmap(mem) }
}

// An RDMA write with immediate data from a registered buffer, copied to the
// BlueFlame register; its completion retires it.
func Example() {
	q, mem, unmap := exampleQueue()
	defer unmap()

	err := q.Begin(42, wqebuilder.Signaled).
		RdmaWriteImm(0x7f0000001000, 0x5678, 7). // remote address, rkey, immediate
		SGE(0x7f0000002000, 4096, 0x9abc).       // local buffer, length, lkey
		FinishBlueFlame()
	if err != nil {
		panic(err)
	}
	fmt.Println(prm.DumpWQE(mem[:64*64], 0, prm.TransportRC))
	fmt.Printf("doorbell record: %d, in flight: %d WQEBB\n", prm.Load32(unsafe.Pointer(&mem[4096+4])), q.Outstanding())

	// The CQE of this WQE says wqe_counter 0.
	wrid, _ := q.Complete(0)
	fmt.Println("completed wrid", wrid, "in flight:", q.Outstanding())
	// Output:
	// WQE pi=0 slot=0/64 offset=0x0 RDMA_WRITE_IMM wqebbs=1 transport=RC
	//   ctrl    opcode=RDMA_WRITE_IMM(0x09) opmod=0x00 wqe_index=0 qpn=0x001234 ds=3 fm_ce_se=0x08[CQ_UPDATE] imm=0x00000007
	//   raddr   addr=0x00007f0000001000 rkey=0x00005678
	//   data    byte_count=4096 lkey=0x00009abc addr=0x00007f0000002000
	// doorbell record: 1, in flight: 1 WQEBB
	// completed wrid 42 in flight: 0
}

// A batch: several WQEs, only the last signaled, then one doorbell. The
// last completion retires the whole batch.
func ExampleSendQueue_RingDoorbell() {
	q, _, unmap := exampleQueue()
	defer unmap()

	var last uint32
	for i := range 8 {
		flags := wqebuilder.Flags(0)
		if i == 7 {
			flags = wqebuilder.Signaled
			last = q.ProducerIndex()
		}
		err := q.Begin(uint64(i), flags).Send().Inline([]byte("hello")).Finish()
		if err != nil {
			panic(err)
		}
	}
	fmt.Println("pending:", q.Pending())
	q.RingDoorbell()
	fmt.Println("pending:", q.Pending(), "in flight:", q.Outstanding())
	wrid, _ := q.Complete(uint16(last))
	fmt.Println("completed wrid", wrid, "in flight:", q.Outstanding())
	// Output:
	// pending: true
	// pending: false in flight: 8
	// completed wrid 7 in flight: 0
}

// A DC atomic: the address vector comes from an address handle
// (ctx.AddressHandle.AV; here encoded the same way without a device), then
// the DCT number and DC key per WQE.
func ExampleCtrlStage_DC() {
	q, mem, unmap := exampleQueue()
	defer unmap()

	av := addrvec.Address{DLID: 0x12, SL: 3}.AV()
	err := q.Begin(1, wqebuilder.Signaled).
		DC(&av, 0x4567, 0xdcdcdcdc).
		AtomicFA(0x1000, 0x22, 1).
		Result(0x2000, 0x33).
		FinishBlueFlame()
	if err != nil {
		panic(err)
	}
	fmt.Println(prm.DumpWQE(mem[:64*64], 0, prm.TransportDC))
	// Output:
	// WQE pi=0 slot=0/64 offset=0x0 ATOMIC_FA wqebbs=2 transport=DC
	//   ctrl    opcode=ATOMIC_FA(0x12) opmod=0x00 wqe_index=0 qpn=0x001234 ds=7 fm_ce_se=0x08[CQ_UPDATE]
	//   av      dc_key=0x00000000dcdcdcdc dct=0x004567 ext=1
	//           stat_rate_sl=0x03(rate 0) fl=0 mlid=0 rlid=0x0012 rmac=00:00:00:00:00:00 tclass=0 hop_limit=0 grh=0 sgid_index=0 flow_label=0x00000 rgid=::
	//   raddr   addr=0x0000000000001000 rkey=0x00000022
	//   atomic  add=0x0000000000000001
	//   data    byte_count=8 lkey=0x00000033 addr=0x0000000000002000
}

// Errors only the run can know come back from Finish, and nothing was
// posted.
func ExamplePostError() {
	q, _, unmap := exampleQueue()
	defer unmap()

	err := q.Begin(1, 0).Send().Inline(make([]byte, 100)).Finish() // MaxInline is 64
	fmt.Println(err)
	fmt.Println(errors.Is(err, wqebuilder.ErrInlineTooLong), q.ProducerIndex())
	// Output:
	// wqebuilder: post SEND on QP 0x1234: inline data longer than max inline
	// true 0
}
