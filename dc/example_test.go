package dc_test

import (
	"fmt"
	"log"
	"sort"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	_ "github.com/mlx5kit/mlx5kit/sim" // the software HCA, provider "sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// One DC initiator reaches three DC targets: a SEND to each (received
// through the targets' shared receive queue) and an RDMA write into each
// target's own memory, all from one send queue.
func Example_oneInitiatorManyTargets() {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware})
	if err != nil {
		log.Fatal(err)
	}
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	if err != nil {
		log.Fatal(err)
	}
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
	if err != nil {
		log.Fatal(err)
	}
	p, err := transport.NewPoller(cq)
	if err != nil {
		log.Fatal(err)
	}
	buf, err := ctx.AllocBuffer(1<<16, ctx.BufferOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer buf.Close()
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite)
	if err != nil {
		log.Fatal(err)
	}
	base, mem := uint64(mr.Addr()), buf.Bytes()

	// The targets: one SRQ for their SENDs, one DC access key each.
	srq, err := transport.NewSharedReceiveQueue(pd, ctx.SRQConfig{Depth: 16})
	if err != nil {
		log.Fatal(err)
	}
	name := map[uint32]string{}
	var remotes []*dc.Remote
	dci, err := dc.NewDCI(pd, cq, dc.DCIConfig{SendDepth: 32, MaxInline: 64})
	if err != nil {
		log.Fatal(err)
	}
	if err := p.Add(dci); err != nil {
		log.Fatal(err)
	}
	for i, n := range []string{"alpha", "beta", "gamma"} {
		dct, err := dc.NewDCT(pd, cq, dc.DCTConfig{SRQ: srq, Key: 0xd0c0 + uint64(i)})
		if err != nil {
			log.Fatal(err)
		}
		if err := p.Add(dct); err != nil {
			log.Fatal(err)
		}
		name[dct.QPN()] = n
		// dct.Endpoint() is what would cross the network.
		r, err := dci.NewRemote(dct.Endpoint())
		if err != nil {
			log.Fatal(err)
		}
		defer r.Close()
		remotes = append(remotes, r)
	}
	for i := range 3 {
		if err := srq.PostRecv(uint64(i), base+uint64(1024*i), 1024, mr.LKey()); err != nil {
			log.Fatal(err)
		}
	}

	for i, r := range remotes {
		msg := fmt.Sprintf("hello %s", name[r.DCTNumber()])
		s, err := dci.Post(uint64(10+i), wqebuilder.Signaled, r)
		if err != nil {
			log.Fatal(err)
		}
		if err := s.Send().Inline([]byte(msg)).Finish(); err != nil {
			log.Fatal(err)
		}
		// The targets share the region here; each gets its own slot.
		slot := base + 8192 + uint64(64*i)
		s, err = dci.Post(uint64(20+i), wqebuilder.Signaled, r)
		if err != nil {
			log.Fatal(err)
		}
		if err := s.RdmaWrite(slot, mr.RKey()).Inline([]byte("written by DC")).Finish(); err != nil {
			log.Fatal(err)
		}
	}
	dci.RingDoorbell() // one doorbell for the six WQEs

	var lines []string
	sends := 0
	deadline := time.Now().Add(10 * time.Second)
	for sends < 6 || len(lines) < 3 {
		p.Poll(16, func(c *transport.Completion) {
			if err := c.Err(); err != nil {
				log.Fatal(err)
			}
			if c.IsSend() {
				sends++
				return
			}
			msg := mem[1024*c.WRID : 1024*c.WRID+uint64(c.ByteCount)]
			lines = append(lines, fmt.Sprintf("%s received %q from the DCI", name[c.QPN], msg))
		})
		if time.Now().After(deadline) {
			log.Fatal("timed out")
		}
	}
	sort.Strings(lines)
	for _, l := range lines {
		fmt.Println(l)
	}
	for i := range 3 {
		fmt.Printf("slot %d: %q\n", i, mem[8192+64*i:8192+64*i+13])
	}
	// Output:
	// alpha received "hello alpha" from the DCI
	// beta received "hello beta" from the DCI
	// gamma received "hello gamma" from the DCI
	// slot 0: "written by DC"
	// slot 1: "written by DC"
	// slot 2: "written by DC"
}
