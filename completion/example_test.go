package completion_test

import (
	"fmt"
	"time"

	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// A Notifier sleeps until the device raises a completion event instead of
// spinning on an empty ring.
func ExampleNotifier() {
	fabric := sim.New(sim.Options{Mode: sim.Engine})
	defer fabric.Close()
	dev, _ := fabric.Open("")
	defer dev.Close()
	cq, _ := dev.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16, EventChannel: true})
	poll, _ := transport.NewCQ(cq)

	n, err := completion.NewNotifier(cq, poll)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer n.Close()

	// Nothing completes: the wait ends at its timeout.
	fmt.Println(n.WaitTimeout(10 * time.Millisecond))

	// A completion arrives while the consumer sleeps.
	go func() {
		time.Sleep(5 * time.Millisecond)
		_ = fabric.InjectCQE(cq.CQN(), reqCQE(0x100, 7))
	}()
	if err := n.WaitTimeout(5 * time.Second); err != nil {
		fmt.Println(err)
		return
	}
	poll.Poll(16, func(c *monocq.CQE) {
		fmt.Printf("QPN 0x%x wqe_counter %d error %v\n", c.QPN(), c.WQECounter(), c.Err())
	})
	// Output:
	// completion: wait on CQ 0x40: context deadline exceeded
	// QPN 0x100 wqe_counter 7 error <nil>
}
