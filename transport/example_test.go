package transport_test

import (
	"fmt"
	"log"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	_ "github.com/mlx5kit/mlx5kit/sim" // the software HCA, provider "sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

func must[T any](v T, err error) T {
	if err != nil {
		log.Fatal(err)
	}
	return v
}

func check(err error) {
	if err != nil {
		log.Fatal(err)
	}
}

// One Poller takes the completions of a CQ that two queue pairs share and
// hands each to its queue pair's Queue, found by QPN: here the send
// completion of a and the receive completion of b.
func ExamplePoller() {
	c := must(ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware}))
	defer c.Close() // closes the QPs, the CQ, the MR and the PD in order
	pd := must(c.AllocProtectionDomain())
	cq := must(c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16}))
	a := must(rc.New(pd, cq, rc.Config{SendDepth: 4, RecvDepth: 4, MaxInline: 16}))
	b := must(rc.New(pd, cq, rc.Config{SendDepth: 4, RecvDepth: 4}))
	check(a.Connect(b.Endpoint())) // endpoints normally cross the network
	check(b.Connect(a.Endpoint()))
	buf := must(ctx.AllocBuffer(4096, ctx.BufferOptions{}))
	defer buf.Close()
	mr := must(pd.RegisterBuffer(buf, ctx.AccessLocalWrite))

	p := must(transport.NewPoller(cq))
	check(p.Add(a))
	check(p.Add(b))

	check(b.PostRecv(7, uint64(mr.Addr()), 64, mr.LKey()))
	s := must(a.Post(9, wqebuilder.Signaled))
	check(s.Send().Inline([]byte("hello")).FinishBlueFlame())

	deadline := time.Now().Add(10 * time.Second)
	for got := 0; got < 2 && time.Now().Before(deadline); {
		got += p.Poll(2, func(x *transport.Completion) {
			check(x.Err())
			switch x.Queue {
			case &a.Queue:
				fmt.Printf("a: send %d completed\n", x.WRID)
			case &b.Queue:
				fmt.Printf("b: receive %d: %q\n", x.WRID, buf.Bytes()[:x.ByteCount])
			}
		})
	}
	// Unordered output:
	// a: send 9 completed
	// b: receive 7: "hello"
}

// A Poller's Close gives its completion queue back: the next Poller for
// it takes the completions the first left in the ring, each once.
func ExamplePoller_Close() {
	c := must(ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware}))
	defer c.Close()
	pd := must(c.AllocProtectionDomain())
	cq := must(c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16}))
	q := must(rc.New(pd, cq, rc.Config{SendDepth: 4, RecvDepth: 4}))
	check(q.Connect(q.Endpoint())) // a loopback connection
	for id := uint64(1); id <= 2; id++ {
		s := must(q.Post(id, wqebuilder.Signaled))
		check(s.Nop().FinishBlueFlame())
	}
	show := func(x *transport.Completion) { fmt.Println("completed", x.WRID) }
	poll := func(p *transport.Poller, want int) {
		deadline := time.Now().Add(10 * time.Second)
		for got := 0; got < want && time.Now().Before(deadline); {
			got += p.Poll(want-got, show)
		}
	}

	first := must(transport.NewPoller(cq))
	check(first.Add(q))
	poll(first, 1)
	_, err := transport.NewPoller(cq)
	fmt.Println("second Poller while the first is open:", err != nil)
	check(first.Close())

	second := must(transport.NewPoller(cq))
	check(second.Add(q))
	poll(second, 1)
	// Output:
	// completed 1
	// second Poller while the first is open: true
	// completed 2
}
