package bufpool_test

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/bufpool"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// A UD queue pair receives into pool buffers; the sender takes its buffer
// from a pool too, and both go back after the completions.
func Example() {
	fabric := sim.New(sim.Options{})
	defer fabric.Close()
	dev, _ := fabric.Open("sim0")
	defer dev.Close()
	pd, _ := dev.AllocProtectionDomain()
	cq, _ := dev.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 32})
	qp, _ := ud.New(pd, cq, ud.Config{SendDepth: 8, RecvDepth: 8, QKey: 0x42})
	poller, _ := transport.NewPoller(cq)
	_ = poller.Add(qp)

	pool, err := bufpool.New(pd, 16, ud.GRHSize+64, 0)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer pool.Close()
	posted, _ := bufpool.PostReceives(pool, &qp.Queue, 4)
	fmt.Println("receives posted:", posted, "free buffers:", pool.Free())

	// Send a datagram to ourselves from another pool buffer.
	self, _ := qp.NewRemote(qp.Endpoint())
	defer self.Close()
	i, _ := pool.Pop()
	n := copy(pool.Buffer(i), []byte("hello, pool"))
	addr, length, lkey := pool.SGE(i, n)
	s, _ := qp.Post(uint64(i), wqebuilder.Signaled, self)
	_ = s.Send().SGE(addr, length, lkey).FinishBlueFlame()
	_ = fabric.RunUntilIdle()

	poller.Poll(8, func(c *transport.Completion) {
		j, _ := pool.Index(c.WRID)
		if c.IsSend() {
			_ = pool.Push(j)
			return
		}
		fmt.Printf("buffer %d received %q\n", j, pool.Buffer(j)[ud.GRHSize:c.ByteCount])
		_ = bufpool.Repost(pool, &qp.Queue, j)
	})
	fmt.Println("free buffers:", pool.Free())
	// Output:
	// receives posted: 4 free buffers: 12
	// buffer 0 received "hello, pool"
	// free buffers: 12
}
