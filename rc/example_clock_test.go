package rc_test

import (
	"fmt"
	"log"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// Counting a queue pair's posts and completions: enable it on the queue
// pair and on its Poller, then read snapshots, which allocate nothing.
func Example_counters() {
	c, a, b := open()
	defer c.Close()
	defer a.close()
	defer b.close()
	a.qp.EnableCounters()
	a.p.EnableCounters()
	for i := range 3 {
		s, err := a.qp.Post(uint64(i), wqebuilder.Signaled)
		if err != nil {
			log.Fatal(err)
		}
		if err := s.RdmaWrite(uint64(b.mr.Addr()), b.mr.RKey()).Inline([]byte("hi")).FinishBlueFlame(); err != nil {
			log.Fatal(err)
		}
		a.wait()
	}
	q := a.qp.Counters()
	fmt.Println("posts:", q.Posts, "rings:", q.BlueFlameCopies+q.Doorbells)
	fmt.Println("send completions:", q.SendCompletions, "errors:", q.Errors.Total)
	fmt.Println("retries counted by the model:", q.RetriesCounted, q.RNRRetries, q.TransportRetries)
	fmt.Println("CQ completions:", a.p.Counters().Completions)
	// Output:
	// posts: 3 rings: 3
	// send completions: 3 errors: 0
	// retries counted by the model: true 0 0
	// CQ completions: 3
}

// Completion timestamps: a CQ created with Timestamps carries the device
// clock in every completion, and the Context's Clock converts it.
func Example_completionTimestamps() {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	if err != nil {
		log.Fatal(err)
	}
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16, Timestamps: true})
	if err != nil {
		log.Fatal(err)
	}
	p, err := transport.NewPoller(cq)
	if err != nil {
		log.Fatal(err)
	}
	// A queue pair connected to itself writes into its own memory.
	qp, err := rc.New(pd, cq, rc.Config{SendDepth: 16, RecvDepth: 1, MaxInline: 64})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Add(qp); err != nil {
		log.Fatal(err)
	}
	if err := qp.Connect(qp.Endpoint()); err != nil {
		log.Fatal(err)
	}
	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Close()
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	clock, err := c.Clock()
	if err != nil {
		log.Fatal(err)
	}

	start := time.Now()
	var stamps []uint64
	for i := range 3 {
		s, err := qp.Post(uint64(i), wqebuilder.Signaled)
		if err != nil {
			log.Fatal(err)
		}
		if err := s.RdmaWrite(uint64(mr.Addr()), mr.RKey()).Inline([]byte("tick")).FinishBlueFlame(); err != nil {
			log.Fatal(err)
		}
		for p.Poll(1, func(c *transport.Completion) { stamps = append(stamps, c.Timestamp) }) == 0 {
		}
	}
	end := time.Now()
	inOrder, inRun := true, true
	for i, ts := range stamps {
		at := clock.ToTime(ts)
		inOrder = inOrder && (i == 0 || ts >= stamps[i-1])
		inRun = inRun && !at.Before(start.Add(-clock.Resolution())) && !at.After(end.Add(clock.Resolution()))
	}
	fmt.Println("resolution:", clock.Resolution())
	fmt.Println("in order:", inOrder, "within the run:", inRun)
	// Output:
	// resolution: 4ns
	// in order: true within the run: true
}
