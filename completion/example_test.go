package completion_test

import (
	"errors"
	"fmt"
	"time"

	"github.com/mlx5kit/mlx5kit/completion"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/sim"
)

// An error CQE turns into an *Error that names what failed and matches the
// sentinel of its status.
func ExampleFromCQE() {
	// A requester error CQE: RDMA_WRITE on QPN 0x105 hit a bad rkey.
	cqe := errorCQE(0xd, 0x08, 0x105, 3, 0x13, 0)

	err := fmt.Errorf("write to peer 2: %w", completion.FromCQE(cqe).WithWRID(42))
	fmt.Println(err)
	fmt.Println(errors.Is(err, completion.ErrRemoteAccess), errors.Is(err, completion.ErrFlushed))
	var ce *completion.Error
	if errors.As(err, &ce) {
		fmt.Println(ce.Status, ce.Syndrome, ce.WRID)
	}
	// Output:
	// write to peer 2: completion: RDMA_WRITE on QPN 0x105 failed: REM_ACCESS_ERR (syndrome REMOTE_ACCESS_ERR 0x13, vendor syndrome 0x00), wqe_counter 3, wr_id 0x2a
	// true false
	// REM_ACCESS_ERR REMOTE_ACCESS_ERR 42
}

// A Notifier sleeps until the device raises a completion event instead of
// spinning on an empty ring.
func ExampleNotifier() {
	fabric := sim.New(sim.Options{Mode: sim.Engine})
	defer fabric.Close()
	dev, _ := fabric.Open("")
	defer dev.Close()
	cq, _ := dev.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16, EventChannel: true})
	d := cq.Descriptor()
	poll, _ := monocq.New(monocq.Config{Buf: d.Buf, CQECnt: d.CQECnt, CQESize: d.CQESize, DBRec: d.DBRec, UAR: d.UAR, CQN: d.CQN})

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
		fmt.Printf("QPN 0x%x wqe_counter %d error %v\n", c.QPN(), c.WQECounter(), completion.Check(c))
	})
	// Output:
	// completion: wait on CQ 0x40: context deadline exceeded
	// QPN 0x100 wqe_counter 7 error <nil>
}
