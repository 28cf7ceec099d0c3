package ctx_test

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	_ "github.com/mlx5kit/mlx5kit/sim" // the software HCA, provider "sim"
)

// Open a device (the software HCA here: the example asks for it), allocate
// the control-plane objects a transport needs, and let Close tear them all
// down in order.
func Example() {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware})
	if err != nil {
		panic(err)
	}
	defer c.Close()
	fmt.Println("device:", c.DeviceName(), c.Kind())

	pd, err := c.AllocProtectionDomain()
	if err != nil {
		panic(err)
	}
	buf, err := ctx.AllocBuffer(1<<16, ctx.BufferOptions{})
	if err != nil {
		panic(err)
	}
	defer buf.Close()
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite)
	if err != nil {
		panic(err)
	}
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
	if err != nil {
		panic(err)
	}
	qp, err := pd.CreateQueuePair(ctx.QueuePairConfig{
		Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Caps: ctx.QueuePairCaps{SendDepth: 64, RecvDepth: 64, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInline: 64},
	})
	if err != nil {
		panic(err)
	}
	fmt.Println("QP type:", qp.Type(), "CQ depth:", cq.Config().Depth)
	fmt.Println("MR length:", mr.Len())

	// Closing the PD destroys the QP and deregisters the MR first.
	if err := pd.Close(); err != nil {
		panic(err)
	}
	fmt.Println("QP closed:", qp.Closed(), "MR closed:", mr.Closed())
	_, err = pd.CreateSRQ(ctx.SRQConfig{Depth: 8})
	fmt.Println(err)
	// Output:
	// device: sim0 software
	// QP type: RC CQ depth: 64
	// MR length: 65536
	// QP closed: true MR closed: true
	// ctx: create SRQ: object is closed
}
