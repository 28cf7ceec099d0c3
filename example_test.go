package mlx5kit_test

import (
	"context"
	"fmt"

	"github.com/mlx5kit/mlx5kit"
	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// Two channels on one device (an mlx5 NIC, or the software HCA when
// MLX5KIT_PROVIDER=sim chooses it): a sends "hello" and b receives it into
// its buffer. Error handling is shortened to must and check, which panic.
func Example() {
	buf := must(ctx.AllocBuffer(4096, ctx.BufferOptions{})) // mmap'd, never Go heap
	defer buf.Close()
	c := must(mlx5kit.Open(mlx5kit.Options{}))
	defer c.Close() // closes QPs, CQs, MRs and the PD in the right order
	pd := must(c.AllocProtectionDomain())
	mr := must(pd.RegisterBuffer(buf, ctx.AccessLocalWrite))

	pa := must(channel.New(pd, channel.Options{}))
	pb := must(channel.New(pd, channel.Options{}))
	a := must(pa.Handshake(pb.Endpoint())) // endpoints normally cross the network
	defer a.Close()
	b := must(pb.Handshake(pa.Endpoint()))
	defer b.Close()

	const inbox = 2048 // where b receives, in the same buffer
	recv := must(b.PostReceive(channel.RecvRequest{Local: []channel.SGE{channel.Slice(mr, inbox, 64)}}))
	n := copy(buf.Bytes(), "hello")
	bg := context.Background() // one with a deadline bounds the waits
	check(a.Send(bg, channel.SendRequest{Local: []channel.SGE{channel.Slice(mr, 0, n)}}))
	check(recv.Wait(bg)) // the receive's completion, or its error
	got, _ := recv.Result()
	fmt.Printf("%q\n", buf.Bytes()[inbox:inbox+int(got.ByteCount)])
	// Output: "hello"
}

// The raw rings under the channels: two RC queue pairs on one device, a
// writes "hello" into b's buffer with an immediate, and b learns of it from
// its completion queue through a Poller. The work request ids and the
// immediate are the program's own numbers, handed back in the completions.
func Example_rawRings() {
	buf := must(ctx.AllocBuffer(4096, ctx.BufferOptions{}))
	defer buf.Close()
	c := must(mlx5kit.Open(mlx5kit.Options{}))
	defer c.Close()
	pd := must(c.AllocProtectionDomain())
	mr := must(pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite))
	cqA := must(c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16}))
	cqB := must(c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16}))
	a := must(rc.New(pd, cqA, rc.Config{SendDepth: 8, MaxInline: 64}))
	b := must(rc.New(pd, cqB, rc.Config{SendDepth: 8, RecvDepth: 8}))
	check(a.Connect(b.Endpoint())) // endpoints normally cross the network
	check(b.Connect(a.Endpoint()))
	pollA, pollB := must(transport.NewPoller(cqA)), must(transport.NewPoller(cqB))
	check(pollA.Add(a))
	check(pollB.Add(b))

	const writeID, recvID, imm = 7, 1, 42
	check(b.BeginRecv(recvID).FinishDoorbell()) // a write with immediate takes a receive, no buffer
	st := must(a.Post(writeID, wqebuilder.Signaled))
	check(st.RdmaWriteImm(uint64(mr.Addr()), mr.RKey(), imm).Inline([]byte("hello")).FinishBlueFlame())

	for pollA.Poll(1, func(wc *transport.Completion) { check(wc.Err()) }) == 0 {
		c.Idle() // nothing on a NIC; on the software HCA, a round of the model
	}
	for pollB.Poll(1, func(wc *transport.Completion) {
		fmt.Printf("%q imm=%d wrid=%d\n", buf.Bytes()[:wc.ByteCount], wc.Immediate, wc.WRID)
	}) == 0 {
		c.Idle()
	}
	// Output: "hello" imm=42 wrid=1
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
