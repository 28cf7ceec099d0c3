package monocq_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// exampleRing maps a ring of 8 CQEs and a doorbell record the way a provider
// does, and returns the poller and a function that plays the device.
func exampleRing() (cq *monocq.CQ, complete func(op prm.CQEOpcode, qpn uint32, wqeCounter uint16, byteCnt uint32), dbrec []byte, unmap func()) {
	mem, err := unix.Mmap(-1, 0, 2*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		panic(err)
	}
	ring, dbrec, uar := mem[:8*64], mem[4096:4104], mem[4096+2048:]
	for i := 0; i < 8; i++ {
		ring[i*64+prm.CQEOpOwn] = prm.CQEInvalidOpOwn
	}
	cq, err = monocq.New(monocq.Config{
		Buf: unsafe.Pointer(&ring[0]), CQECnt: 8, CQESize: 64,
		DBRec: unsafe.Pointer(&dbrec[0]), UAR: unsafe.Pointer(&uar[0]), CQN: 0x21,
	})
	if err != nil {
		panic(err)
	}
	pi := 0
	complete = func(op prm.CQEOpcode, qpn uint32, wqeCounter uint16, byteCnt uint32) {
		c := ring[pi%8*64:][:64]
		binary.BigEndian.PutUint32(c[prm.CQESopDropQPN:], uint32(prm.OpRdmaWrite)<<24|qpn)
		binary.BigEndian.PutUint16(c[prm.CQEWQECounter:], wqeCounter)
		binary.BigEndian.PutUint32(c[prm.CQEByteCnt:], byteCnt)
		if op == prm.CQEReqErr {
			c[prm.ErrCQESyndrome] = uint8(prm.SyndromeRemoteAccess)
		}
		c[prm.CQEOpOwn] = prm.OpOwn(op, prm.CQEFormatNone, false, uint8(pi/8)&1)
		pi++
	}
	return cq, complete, dbrec, func() { _ = unix.Munmap(mem) }
}

// Range over a batch: the loop body is compiled into the poll loop.
func Example() {
	cq, complete, dbrec, unmap := exampleRing()
	defer unmap()
	complete(prm.CQEReq, 0x12, 0, 0)
	complete(prm.CQERespSend, 0x13, 5, 512)

	for c := range cq.All(16) {
		fmt.Println(c.Opcode(), c.QPN(), c.WQECounter(), c.ByteCount())
	}
	fmt.Println("consumer index record:", binary.BigEndian.Uint32(dbrec))
	// Output:
	// REQ 18 0 0
	// RESP_SEND 19 5 512
	// consumer index record: 2
}

func ExampleCQ_Poll() {
	cq, complete, _, unmap := exampleRing()
	defer unmap()
	for i := 0; i < 3; i++ {
		complete(prm.CQEReq, 0x12, uint16(4*i), 0)
	}
	var last uint16
	n := cq.Poll(16, func(c *monocq.CQE) { last = c.WQECounter() })
	fmt.Println(n, "completions, last wqe_counter", last)
	// Output: 3 completions, last wqe_counter 8
}

func ExampleCQ_Next() {
	cq, complete, _, unmap := exampleRing()
	defer unmap()
	complete(prm.CQEReq, 0x12, 0, 0)
	complete(prm.CQEReq, 0x12, 1, 0)

	fmt.Println("ready:", cq.Ready(64))
	for c := cq.Next(); c != nil; c = cq.Next() {
		fmt.Println("wqe_counter", c.WQECounter())
	}
	cq.Release()
	fmt.Println("consumer index:", cq.ConsumerIndex())
	// Output:
	// ready: 2
	// wqe_counter 0
	// wqe_counter 1
	// consumer index: 2
}

func ExampleCQE_Err() {
	cq, complete, _, unmap := exampleRing()
	defer unmap()
	complete(prm.CQEReqErr, 0x12, 7, 0)
	cq.Poll(16, func(c *monocq.CQE) {
		err := c.Err()
		fmt.Println(errors.Is(err, monocq.ErrCompletion))
		fmt.Println(err)
	})
	// Output:
	// true
	// monocq: RDMA_WRITE on QPN 0x12 failed: REM_ACCESS_ERR (syndrome REMOTE_ACCESS_ERR 0x13, vendor syndrome 0x00), wqe_counter 7
}

// Many queue pairs share one CQ: each CQE finds its queue by QPN.
func ExampleTable() {
	type queue struct {
		name      string
		completed int
	}
	cq, complete, _, unmap := exampleRing()
	defer unmap()
	queues := new(monocq.Table[queue])
	_ = queues.Register(0x12, &queue{name: "a"})
	_ = queues.Register(0x13, &queue{name: "b"})
	complete(prm.CQEReq, 0x12, 0, 0)
	complete(prm.CQEReq, 0x13, 0, 0)
	complete(prm.CQEReq, 0x12, 1, 0)
	complete(prm.CQEReq, 0x99, 0, 0)

	cq.Poll(16, func(c *monocq.CQE) {
		if q := queues.Lookup(c.QPN()); q != nil {
			q.completed++
			return
		}
		fmt.Printf("QPN %#x: %v\n", c.QPN(), monocq.ErrUnknownQPN)
	})
	a, b := queues.Lookup(0x12), queues.Lookup(0x13)
	fmt.Println(a.name, a.completed, b.name, b.completed)
	// Output:
	// QPN 0x99: unknown QPN
	// a 2 b 1
}

func ExampleCQ_Arm() {
	cq, _, dbrec, unmap := exampleRing()
	defer unmap()
	if err := cq.Arm(true); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("arm word %#08x\n", binary.BigEndian.Uint32(dbrec[4:]))
	cq.AcknowledgeEvent() // an event arrived
	_ = cq.Arm(false)
	fmt.Printf("arm word %#08x\n", binary.BigEndian.Uint32(dbrec[4:]))
	// Output:
	// arm word 0x01000000
	// arm word 0x10000000
}
