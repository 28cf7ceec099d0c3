// Command rconly posts sends and receives on an RC QP importing rc and
// wqebuilder only, not transport, whose Queue the QP embeds.
// TestInliningWithoutTransport builds it with -gcflags=-m and -S and checks
// that the receive posts of transport.Queue compile into these functions
// all the same.
package main

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// PostRecv posts one receive buffer.
func PostRecv(qp *rc.QP, addr uint64, n, lkey uint32) error {
	return qp.PostRecv(1, addr, n, lkey)
}

// PostRecvStaged posts a receive WQE of two buffers.
func PostRecvStaged(qp *rc.QP, addr uint64, n, lkey uint32) error {
	return qp.BeginRecv(1).SGE(addr, n, lkey).SGE(addr+uint64(n), n, lkey).FinishDoorbell()
}

// PostWrite posts one RDMA write.
func PostWrite(qp *rc.QP, raddr uint64, rkey uint32, addr uint64, n, lkey uint32) error {
	s, err := qp.Post(1, wqebuilder.Signaled)
	if err != nil {
		return err
	}
	return s.RdmaWrite(raddr, rkey).SGE(addr, n, lkey).Finish()
}

func main() { fmt.Println(PostRecv, PostRecvStaged, PostWrite) }
