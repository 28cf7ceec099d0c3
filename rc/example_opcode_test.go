package rc_test

import (
	"fmt"
	"log"

	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// A program outside the kit tells completions apart by their opcodes:
// monocq's CQE opcodes say what arrived at a receive (a SEND, or an RDMA
// WRITE with immediate, whose immediate may be 0), wqebuilder's send
// opcodes what a send completion completed.
func Example_completionOpcodes() {
	c, a, b := open()
	defer c.Close()
	defer a.close()
	defer b.close()

	for i := range 2 {
		if err := b.qp.BeginRecv(uint64(i)).SGE(uint64(b.mr.Addr()), 64, b.mr.LKey()).FinishDoorbell(); err != nil {
			log.Fatal(err)
		}
	}
	st, err := a.qp.Post(1, wqebuilder.Signaled)
	if err != nil {
		log.Fatal(err)
	}
	if err := st.Send().Inline([]byte("hello")).FinishBlueFlame(); err != nil {
		log.Fatal(err)
	}
	st, err = a.qp.Post(2, wqebuilder.Signaled)
	if err != nil {
		log.Fatal(err)
	}
	if err := st.RdmaWriteImm(uint64(b.mr.Addr())+128, b.mr.RKey(), 0).Inline([]byte("world")).FinishBlueFlame(); err != nil {
		log.Fatal(err)
	}
	describe := func(wc transport.Completion) string {
		switch {
		case wc.Opcode == monocq.CQEReq && wc.SendOpcode == wqebuilder.OpSend:
			return "my SEND completed"
		case wc.Opcode == monocq.CQEReq && wc.SendOpcode == wqebuilder.OpRdmaWriteImm:
			return "my RDMA WRITE with immediate completed"
		case wc.Opcode == monocq.CQERespSend:
			return "a SEND arrived"
		case wc.Opcode == monocq.CQERespWrImm:
			return fmt.Sprintf("an RDMA WRITE with immediate %d arrived", wc.Immediate)
		}
		return wc.Opcode.String()
	}
	for range 2 {
		fmt.Println(describe(a.wait()))
	}
	for range 2 {
		fmt.Println(describe(b.wait()))
	}
	// Output:
	// my SEND completed
	// my RDMA WRITE with immediate completed
	// a SEND arrived
	// an RDMA WRITE with immediate 0 arrived
}
