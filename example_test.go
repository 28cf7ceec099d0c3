package mlx5kit_test

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// Two RC queue pairs on one device (an mlx5 NIC, or the software HCA when
// MLX5KIT_PROVIDER=sim chooses it): a writes "hello" into b's buffer with an immediate, and b
// learns of it from its completion queue. Error handling is shortened to
// must; see the rc package for the full ping-pong.
func Example() {
	buf := must(ctx.AllocBuffer(4096, ctx.BufferOptions{})) // mmap'd, never Go heap
	defer buf.Close()
	c := must(mlx5kit.Open(mlx5kit.Options{}))
	defer c.Close() // closes QPs, CQs, MRs and the PD in the right order
	pd := must(c.AllocProtectionDomain())
	cqA := must(c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16}))
	cqB := must(c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16}))
	a := must(rc.New(pd, cqA, nil, rc.Config{SendDepth: 8, MaxInline: 64}))
	b := must(rc.New(pd, cqB, nil, rc.Config{SendDepth: 8, RecvDepth: 8}))
	check(a.Connect(b.Endpoint())) // endpoints normally cross the network
	check(b.Connect(a.Endpoint()))
	mr := must(pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite))
	check(b.PostRecv(1, 0, 0, 0)) // a write with immediate consumes a receive

	pollA, pollB := must(rc.NewPoller(cqA)), must(rc.NewPoller(cqB))
	check(pollA.Add(&a.Queue))
	check(pollB.Add(&b.Queue))
	st := must(a.Post(7, wqebuilder.Signaled))
	check(st.RdmaWriteImm(uint64(mr.Addr()), mr.RKey(), 42).Inline([]byte("hello")).FinishBlueFlame())

	for pollA.Poll(1, func(wc *rc.Completion) { check(wc.Err()) }) == 0 {
	}
	for pollB.Poll(1, func(wc *rc.Completion) {
		fmt.Printf("%q imm=%d\n", buf.Bytes()[:wc.ByteCount], wc.Immediate)
	}) == 0 {
	}
	// Output: "hello" imm=42
}

func must[T any](v T, err error) T {
	check(err)
	return v
}

func check(err error) {
	if err != nil {
		panic(err)
	}
}
