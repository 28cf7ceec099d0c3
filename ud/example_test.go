package ud_test

import (
	"fmt"
	"log"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	_ "github.com/mlx5kit/mlx5kit/sim" // the software HCA, provider "sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// A UD client sends a datagram to a server, which answers the sender named
// by the receive completion. Every receive buffer starts with 40 bytes of
// GRH space.
func Example_sendAndReply() {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	if err != nil {
		log.Fatal(err)
	}
	buf, err := ctx.AllocBuffer(1<<16, ctx.BufferOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Close()
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite)
	if err != nil {
		log.Fatal(err)
	}
	mem, base := buf.Bytes(), uint64(mr.Addr())

	type node struct {
		qp  *ud.QP
		p   *transport.Poller
		off int // its receive buffer
	}
	newNode := func(off int) node {
		cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16})
		if err != nil {
			log.Fatal(err)
		}
		qp, err := ud.New(pd, cq, ud.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 64, QKey: 0x11111111})
		if err != nil {
			log.Fatal(err)
		}
		p, err := transport.NewPoller(cq)
		if err != nil {
			log.Fatal(err)
		}
		if err := p.Add(qp); err != nil {
			log.Fatal(err)
		}
		if err := qp.PostRecv(1, base+uint64(off), 2048, mr.LKey()); err != nil {
			log.Fatal(err)
		}
		return node{qp, p, off}
	}
	// wait returns the next receive completion of n (send completions are
	// counted and skipped).
	wait := func(n node) transport.Completion {
		var got transport.Completion
		deadline := time.Now().Add(10 * time.Second)
		for found := false; !found; {
			n.p.Poll(4, func(c *transport.Completion) {
				if err := c.Err(); err != nil {
					log.Fatal(err)
				}
				if !c.IsSend() {
					got, found = *c, true
				}
			})
			if time.Now().After(deadline) {
				log.Fatal("timed out")
			}
		}
		return got
	}
	server, client := newNode(0), newNode(4096)

	// The client knows the server's endpoint (QPN, qkey, address).
	to, err := client.qp.NewRemote(server.qp.Endpoint())
	if err != nil {
		log.Fatal(err)
	}
	defer to.Close()
	s, err := client.qp.Post(1, wqebuilder.Signaled, to)
	if err != nil {
		log.Fatal(err)
	}
	if err := s.Send().Inline([]byte("ping")).FinishBlueFlame(); err != nil {
		log.Fatal(err)
	}

	in := wait(server)
	payload := mem[server.off+ud.GRHSize : server.off+int(in.ByteCount)]
	fmt.Printf("server got %q (%d bytes with the GRH space), from the client: %v\n",
		payload, in.ByteCount, in.SourceQPN == client.qp.QPN())

	// Answer whoever sent it.
	back, err := server.qp.ReplyRemote(&in, mem[server.off:server.off+ud.GRHSize])
	if err != nil {
		log.Fatal(err)
	}
	defer back.Close()
	s, err = server.qp.Post(2, wqebuilder.Signaled, back)
	if err != nil {
		log.Fatal(err)
	}
	if err := s.SendImm(7).Inline([]byte("pong")).FinishBlueFlame(); err != nil {
		log.Fatal(err)
	}
	in = wait(client)
	fmt.Printf("client got %q with immediate %d\n", mem[client.off+ud.GRHSize:client.off+int(in.ByteCount)], in.Immediate)
	// Output:
	// server got "ping" (44 bytes with the GRH space), from the client: true
	// client got "pong" with immediate 7
}
