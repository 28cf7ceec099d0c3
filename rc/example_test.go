package rc_test

import (
	"encoding/binary"
	"fmt"
	"log"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	_ "github.com/mlx5kit/mlx5kit/sim" // the software HCA, provider "sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// side is one end of a connection: a QP, its CQ's poller and a registered
// buffer.
type side struct {
	qp  *rc.QP
	p   *transport.Poller
	buf *ctx.Buffer
	mr  *ctx.MemoryRegion
}

func newSide(c *ctx.Context, pd *ctx.ProtectionDomain) *side {
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
	if err != nil {
		log.Fatal(err)
	}
	qp, err := rc.New(pd, cq, rc.Config{SendDepth: 16, RecvDepth: 16, MaxRecvSGE: 2, MaxInline: 64})
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
	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	if err != nil {
		log.Fatal(err)
	}
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteRead|ctx.AccessRemoteAtomic)
	if err != nil {
		log.Fatal(err)
	}
	return &side{qp: qp, p: p, buf: buf, mr: mr}
}

// wait polls until fn has been given one completion, and returns it.
func (s *side) wait() transport.Completion {
	var got transport.Completion
	deadline := time.Now().Add(10 * time.Second)
	for s.p.Poll(1, func(c *transport.Completion) { got = *c }) == 0 {
		if time.Now().After(deadline) {
			log.Fatal("no completion")
		}
	}
	if err := got.Err(); err != nil {
		log.Fatal(err)
	}
	return got
}

// open opens the software HCA and connects two RC QPs on it.
func open() (c *ctx.Context, a, b *side) {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware})
	if err != nil {
		log.Fatal(err)
	}
	pd, err := c.AllocProtectionDomain()
	if err != nil {
		log.Fatal(err)
	}
	a, b = newSide(c, pd), newSide(c, pd)
	// The endpoints would normally cross the network (package endpoint).
	if err := a.qp.Connect(b.qp.Endpoint()); err != nil {
		log.Fatal(err)
	}
	if err := b.qp.Connect(a.qp.Endpoint()); err != nil {
		log.Fatal(err)
	}
	return c, a, b
}

func (s *side) close() {
	_ = s.qp.Close()
	_ = s.mr.Close()
	_ = s.buf.Close()
}

// Ping-pong with RDMA writes with immediate: each message lands in the
// peer's buffer and consumes one of its receives, whose completion carries
// the immediate (here the round number) and the byte count.
func Example_writeImmediatePingPong() {
	c, a, b := open()
	defer c.Close()
	defer a.close()
	defer b.close()

	// A write with immediate consumes a receive WQE but needs no buffer.
	for _, s := range []*side{a, b} {
		for i := range 4 {
			if err := s.qp.PostRecv(uint64(i), 0, 0, 0); err != nil {
				log.Fatal(err)
			}
		}
	}
	send := func(from, to *side, round uint32, msg string) {
		st, err := from.qp.Post(uint64(round), wqebuilder.Signaled)
		if err != nil {
			log.Fatal(err)
		}
		err = st.RdmaWriteImm(uint64(to.mr.Addr()), to.mr.RKey(), round).Inline([]byte(msg)).FinishBlueFlame()
		if err != nil {
			log.Fatal(err)
		}
	}
	for round := uint32(1); round <= 3; round++ {
		send(a, b, round, fmt.Sprintf("ping %d", round))
		a.wait() // the write's own completion
		in := b.wait()
		fmt.Printf("b got %q (immediate %d)\n", b.buf.Bytes()[:in.ByteCount], in.Immediate)
		send(b, a, round, fmt.Sprintf("pong %d", round))
		b.wait()
		in = a.wait()
		fmt.Printf("a got %q (immediate %d)\n", a.buf.Bytes()[:in.ByteCount], in.Immediate)
	}
	// Output:
	// b got "ping 1" (immediate 1)
	// a got "pong 1" (immediate 1)
	// b got "ping 2" (immediate 2)
	// a got "pong 2" (immediate 2)
	// b got "ping 3" (immediate 3)
	// a got "pong 3" (immediate 3)
}

// A receive WQE may scatter one message over several buffers: here the
// first 8 bytes land apart from the rest. BeginRecv, SGE and
// FinishDoorbell compile into the caller; a stage that cannot be posted
// (the queue full, too many buffers, a closed QP, a stage finished twice)
// returns its error from FinishDoorbell and posts nothing.
func ExampleQP_BeginRecv() {
	c, a, b := open()
	defer c.Close()
	defer a.close()
	defer b.close()

	header, body := uint64(b.mr.Addr()), uint64(b.mr.Addr())+512
	err := b.qp.BeginRecv(7).SGE(header, 8, b.mr.LKey()).SGE(body, 256, b.mr.LKey()).FinishDoorbell()
	if err != nil {
		log.Fatal(err)
	}
	msg := "HEADER01the rest of the message"
	copy(a.buf.Bytes(), msg)
	st, err := a.qp.Post(1, wqebuilder.Signaled)
	if err != nil {
		log.Fatal(err)
	}
	if err := st.Send().SGE(uint64(a.mr.Addr()), uint32(len(msg)), a.mr.LKey()).FinishBlueFlame(); err != nil {
		log.Fatal(err)
	}
	a.wait()
	in := b.wait()
	data := b.buf.Bytes()
	fmt.Printf("receive %d: %d bytes, header %q, body %q\n", in.WRID, in.ByteCount, data[:8], data[512:512+in.ByteCount-8])
	// Output:
	// receive 7: 31 bytes, header "HEADER01", body "the rest of the message"
}

// RDMA read and atomics: a reads b's memory and updates a counter and a
// lock word there without b's CPU taking part. Atomics work on 8-byte
// words in host byte order and return the old value in host byte order.
func Example_readAndAtomics() {
	c, a, b := open()
	defer c.Close()
	defer a.close()
	defer b.close()

	remote := b.buf.Bytes()
	copy(remote[64:], "remote data")
	binary.NativeEndian.PutUint64(remote[0:], 41) // a counter
	binary.NativeEndian.PutUint64(remote[8:], 0)  // a lock word
	raddr, rkey := uint64(b.mr.Addr()), b.mr.RKey()
	laddr, lkey := uint64(a.mr.Addr()), a.mr.LKey()
	local := a.buf.Bytes()

	st, err := a.qp.Post(1, wqebuilder.Signaled)
	if err != nil {
		log.Fatal(err)
	}
	if err := st.RdmaRead(raddr+64, rkey).SGE(laddr+256, 11, lkey).FinishBlueFlame(); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("read %q (%d bytes)\n", local[256:267], a.wait().ByteCount)

	st, _ = a.qp.Post(2, wqebuilder.Signaled)
	if err := st.AtomicFA(raddr, rkey, 1).Result(laddr, lkey).FinishBlueFlame(); err != nil {
		log.Fatal(err)
	}
	a.wait()
	fmt.Println("fetch-and-add returned", binary.NativeEndian.Uint64(local[0:]), "counter now", binary.NativeEndian.Uint64(remote[0:]))

	for _, try := range []struct{ compare, swap uint64 }{{0, 7}, {0, 9}} {
		st, _ = a.qp.Post(3, wqebuilder.Signaled)
		if err := st.AtomicCS(raddr+8, rkey, try.compare, try.swap).Result(laddr+8, lkey).FinishBlueFlame(); err != nil {
			log.Fatal(err)
		}
		a.wait()
		old := binary.NativeEndian.Uint64(local[8:])
		fmt.Printf("compare-and-swap %d→%d: old %d, taken %v\n", try.compare, try.swap, old, old == try.compare)
	}
	// Output:
	// read "remote data" (11 bytes)
	// fetch-and-add returned 41 counter now 42
	// compare-and-swap 0→7: old 0, taken true
	// compare-and-swap 0→9: old 7, taken false
}
