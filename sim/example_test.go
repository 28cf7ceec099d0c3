package sim_test

import (
	"fmt"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// An RDMA write with immediate between two HCAs of a private, manually
// stepped software fabric: the WQE is built with wqebuilder, the model runs
// until idle, and both completions are read with monocq.
func Example() {
	f := sim.New(sim.Options{Strict: true})
	defer f.Close()
	c0 := must(f.Open("sim0"))
	defer c0.Close()
	c1 := must(f.Open("sim1"))
	defer c1.Close()

	type side struct {
		pd  *ctx.ProtectionDomain
		cq  *ctx.CompletionQueue
		qp  *ctx.QueuePair
		buf *ctx.Buffer
		mr  *ctx.MemoryRegion
		lid uint16
	}
	mk := func(c *ctx.Context) *side {
		s := &side{pd: must(c.AllocProtectionDomain())}
		s.cq = must(c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16}))
		s.qp = must(s.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: s.cq, RecvCQ: s.cq,
			Caps: ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 64}}))
		s.buf = must(ctx.AllocBuffer(4096, ctx.BufferOptions{}))
		s.mr = must(s.pd.RegisterBuffer(s.buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite))
		s.lid = must(c.QueryPort(1)).LID
		return s
	}
	a, b := mk(c0), mk(c1)
	defer a.buf.Close()
	defer b.buf.Close()
	for _, p := range [][2]*side{{a, b}, {b, a}} {
		me, peer := p[0], p[1]
		must(0, me.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: ctx.AccessRemoteWrite}))
		must(0, me.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: peer.qp.QPN(), PathMTU: ctx.MTU4096,
			Path: ctx.AddressAttr{DLID: peer.lid}, MinRNRTimer: 12}))
		must(0, me.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7}))
	}

	// The receiver posts one receive WQE (a write with immediate consumes
	// one): a single terminator segment, since no bytes land in it.
	rd := provider.QPDescriptor(b.qp)
	prm.PutDataEnd(rd.RQ.Buf)
	prm.Store32(rd.DBRec, 1)

	// The sender builds and posts the WQE.
	d := provider.QPDescriptor(a.qp)
	sq := must(wqebuilder.New(wqebuilder.Config{Buf: d.SQ.Buf, WQECnt: d.SQ.WQECnt, QPN: d.QPN, DBRec: d.DBRec,
		BlueFlame: d.BlueFlame, BlueFlameSize: d.BlueFlameSize, MaxInline: d.MaxInline, MaxSGE: d.MaxSendSGE}))
	err := sq.Begin(42, wqebuilder.Signaled).
		RdmaWriteImm(uint64(b.mr.Addr()), b.mr.RKey(), 0x1234).
		Inline([]byte("hello, HCA")).
		FinishBlueFlame()
	if err != nil {
		panic(err)
	}

	must(0, f.RunUntilIdle())

	poll := func(s *side) {
		cd := provider.CQDescriptor(s.cq)
		cq := must(monocq.New(monocq.Config{Buf: cd.Buf, CQECnt: cd.CQECnt, CQESize: cd.CQESize, DBRec: cd.DBRec, UAR: cd.UAR, CQN: cd.CQN}))
		cq.Poll(8, func(c *monocq.CQE) {
			fmt.Printf("%v wqe_counter=%d bytes=%d imm=%#x\n", c.Opcode(), c.WQECounter(), c.ByteCount(), c.Immediate())
			if c.Opcode() == prm.CQEReq {
				wrid, _ := sq.Complete(c.WQECounter())
				fmt.Println("work request", wrid, "done")
			}
		})
	}
	poll(a)
	poll(b)
	fmt.Printf("%s\n", unsafe.Slice((*byte)(b.buf.Pointer()), 10))
	fmt.Println("violations:", len(f.Violations()))
	// Output:
	// REQ wqe_counter=0 bytes=10 imm=0x0
	// work request 42 done
	// RESP_WR_IMM wqe_counter=0 bytes=10 imm=0x1234
	// hello, HCA
	// violations: 0
}

// Strict mode catches a doorbell record written in host byte order instead
// of big-endian.
func ExampleFabric_Violations() {
	f := sim.New(sim.Options{Strict: true})
	defer f.Close()
	c := must(f.Open(""))
	defer c.Close()
	pd := must(c.AllocProtectionDomain())
	cq := must(c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4}))
	qp := must(pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 4}}))
	must(0, qp.Modify(ctx.QPAttr{State: ctx.QPStateInit}))
	d := provider.QPDescriptor(qp)
	*(*uint32)(unsafe.Add(d.DBRec, 4)) = 1 // should be prm.Store32
	must(0, f.RunUntilIdle())
	for _, v := range f.Violations() {
		fmt.Println(v.Kind)
	}
	// Output: doorbell-endian
}
