// Command inlinecheck posts and polls through packages rc, dc, ud and
// transport the way an application does (it imports those and wqebuilder,
// not the internal packages). TestInlining builds it with -gcflags=-m and -S and
// checks what the compiler inlined into these functions.
package main

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

var sink uint64

// PostWrite posts one RDMA write on an RC QP.
func PostWrite(qp *rc.QP, raddr uint64, rkey uint32, addr uint64, n, lkey uint32) error {
	s, err := qp.Post(1, wqebuilder.Signaled)
	if err != nil {
		return err
	}
	return s.RdmaWrite(raddr, rkey).SGE(addr, n, lkey).Finish()
}

// PostDC posts one RDMA write from a DCI.
func PostDC(d *dc.DCI, r *dc.Remote, raddr uint64, rkey uint32, addr uint64, n, lkey uint32) error {
	s, err := d.Post(1, wqebuilder.Signaled, r)
	if err != nil {
		return err
	}
	return s.RdmaWrite(raddr, rkey).SGE(addr, n, lkey).Finish()
}

// PostUD posts one UD send.
func PostUD(q *ud.QP, r *ud.Remote, addr uint64, n, lkey uint32) error {
	s, err := q.Post(1, wqebuilder.Signaled, r)
	if err != nil {
		return err
	}
	return s.Send().SGE(addr, n, lkey).Finish()
}

// PostRecv posts one receive buffer on an RC QP.
func PostRecv(qp *rc.QP, addr uint64, n, lkey uint32) error {
	return qp.PostRecv(1, addr, n, lkey)
}

// PostRecvStaged posts a receive WQE of two buffers on an RC QP.
func PostRecvStaged(qp *rc.QP, addr uint64, n, lkey uint32) error {
	return qp.BeginRecv(1).SGE(addr, n, lkey).SGE(addr+uint64(n), n, lkey).FinishDoorbell()
}

// PostSRQStaged posts a receive WQE of two buffers on a shared receive
// queue.
func PostSRQStaged(srq *transport.SharedReceiveQueue, addr uint64, n, lkey uint32) error {
	return srq.BeginRecv(1).SGE(addr, n, lkey).SGE(addr+uint64(n), n, lkey).FinishDoorbell()
}

// PollRC polls with a function literal.
func PollRC(p *transport.Poller) int {
	return p.Poll(64, func(c *transport.Completion) {
		if c.Match == transport.MatchOK {
			sink += c.WRID + uint64(c.ByteCount)
		}
	})
}

// PollDC polls with a function literal that asks the Completion's
// methods.
func PollDC(p *transport.Poller) int {
	return p.Poll(64, func(c *transport.Completion) {
		if !c.IsError() && c.Err() == nil {
			sink += c.WRID + uint64(c.ByteCount)
		}
	})
}

// PollUD polls with a function literal.
func PollUD(p *transport.Poller) int {
	return p.Poll(64, func(c *transport.Completion) {
		if c.Match == transport.MatchOK {
			sink += c.WRID + uint64(c.SourceQPN)
		}
	})
}

func main() {
	fmt.Println(PostWrite, PostDC, PostUD, PostRecv, PostRecvStaged, PostSRQStaged, PollRC, PollDC, PollUD)
}
