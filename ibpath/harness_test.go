package ibpath_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// node is one device of a software fabric with a PD, a CQ and a registered
// buffer.
type node struct {
	dev  *ctx.Context
	pd   *ctx.ProtectionDomain
	cq   *ctx.CompletionQueue
	poll *monocq.CQ
	buf  *ctx.Buffer
	mr   *ctx.MemoryRegion
}

func newFabric(t *testing.T, link ctx.LinkLayer) *sim.Fabric {
	f := sim.New(sim.Options{LinkLayer: link, Strict: true})
	t.Cleanup(func() {
		require.Empty(t, f.Violations())
		_ = f.Close()
	})
	return f
}

func newNode(t *testing.T, f *sim.Fabric, name string) *node {
	t.Helper()
	dev, err := f.Open(name)
	require.NoError(t, err)
	t.Cleanup(func() { _ = dev.Close() })
	pd, err := dev.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := dev.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
	require.NoError(t, err)
	d := provider.CQDescriptor(cq)
	poll, err := monocq.New(monocq.Config{Buf: d.Buf, CQECnt: d.CQECnt, CQESize: d.CQESize, DBRec: d.DBRec, UAR: d.UAR, CQN: d.CQN})
	require.NoError(t, err)
	buf, err := ctx.AllocBuffer(1<<16, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteRead)
	require.NoError(t, err)
	return &node{dev: dev, pd: pd, cq: cq, poll: poll, buf: buf, mr: mr}
}

func (n *node) addr(off int) uint64 { return uint64(n.mr.Addr()) + uint64(off) }

// testQP is a QP with a send queue writer and a hand-written receive queue.
type testQP struct {
	qp     *ctx.QueuePair
	sq     *wqebuilder.SendQueue
	desc   descriptor.QP
	rqHead uint32
}

func (n *node) newQP(t *testing.T, typ ctx.QPType) *testQP {
	t.Helper()
	qp, err := n.pd.CreateQueuePair(ctx.QueuePairConfig{Type: typ, SendCQ: n.cq, RecvCQ: n.cq,
		Caps: ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	d := provider.QPDescriptor(qp)
	sq, err := wqebuilder.New(wqebuilder.Config{Buf: d.SQ.Buf, WQECnt: d.SQ.WQECnt, QPN: d.QPN, DBRec: d.DBRec,
		BlueFlame: d.BlueFlame, BlueFlameSize: d.BlueFlameSize, MaxInline: d.MaxInline, MaxSGE: d.MaxSendSGE})
	require.NoError(t, err)
	return &testQP{qp: qp, sq: sq, desc: d}
}

// postRecv writes one receive WQE (a single data segment) and moves the
// receive doorbell record.
func (q *testQP) postRecv(addr uint64, n, lkey uint32) {
	slot := unsafe.Add(q.desc.RQ.Buf, uintptr(q.rqHead&(q.desc.RQ.WQECnt-1))*uintptr(q.desc.RQ.Stride))
	prm.PutData(slot, n, lkey, addr)
	if q.desc.RQ.Stride > prm.DataSize {
		prm.PutDataEnd(unsafe.Add(slot, prm.DataSize))
	}
	q.rqHead++
	prm.Store32(unsafe.Add(q.desc.DBRec, prm.DoorbellRecordRecvB), q.rqHead&0xffff)
}

// drain runs the fabric until idle and returns copies of every CQE.
func drain(t *testing.T, f *sim.Fabric, n *node) []monocq.CQE {
	t.Helper()
	require.NoError(t, f.RunUntilIdle())
	var out []monocq.CQE
	n.poll.Poll(64, func(c *monocq.CQE) { out = append(out, *c) })
	return out
}
