// Command inlinecheck posts and polls through package rc the way an
// application does, importing only rc and wqebuilder. TestInlining builds it
// with -gcflags=-m and -S and checks what the compiler inlined into these
// functions.
package main

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

var sink uint64

// PostWrite posts one RDMA write.
func PostWrite(qp *rc.QP, raddr uint64, rkey uint32, addr uint64, n, lkey uint32) error {
	s, err := qp.Post(1, wqebuilder.Signaled)
	if err != nil {
		return err
	}
	return s.RdmaWrite(raddr, rkey).SGE(addr, n, lkey).Finish()
}

// PollCompletions polls with a function literal.
func PollCompletions(p *rc.Poller) int {
	return p.Poll(64, func(c *rc.Completion) {
		if c.Status == rc.StatusOK {
			sink += c.WRID + uint64(c.ByteCount)
		}
	})
}

func main() {
	fmt.Println(PostWrite, PollCompletions)
}
