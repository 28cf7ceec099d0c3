//go:build cgo && linux

package emulate_test

import (
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestCgoProviderQueuePairs creates two RC QPs through the kit's cgo
// provider (mlx5dv_create_qp of rdma-core unmodified), connects them
// through INIT, RTR and RTS with ibv_modify_qp, posts an RDMA WRITE with
// the kit's WQE builder on the ring libmlx5 allocated, and polls the CQE
// with monocq from the CQ ring libmlx5 allocated: the model executed the
// WQE from libmlx5's memory.
func TestCgoProviderQueuePairs(t *testing.T) {
	f := emulate.Fabric()
	require.NotNil(t, f, "the emulation is on")
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 64}})
	require.NoError(t, err)
	// The provider probes the device with throw-away QPs once, when first
	// asked (Query): let it do so before counting.
	_, err = d.Query()
	require.NoError(t, err)
	creates := emulate.CallCount("write CREATE_QP")
	var qps [2]*verbs.QueuePair
	for i := range qps {
		qps[i], err = pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq,
			Caps: ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 32}})
		require.NoError(t, err, "mlx5dv_create_qp")
	}
	if os.Getenv(emulate.EnvABI) == emulate.ABIWrite {
		require.Equal(t, creates+2, emulate.CallCount("write CREATE_QP"))
	}
	require.Positive(t, emulate.CallCount("write CREATE_QP"), "the write command libibverbs falls back to")
	for _, q := range qps {
		dq := q.Descriptor()
		reg, size, ok := emulate.WatchedRegister(dq.QPN)
		require.True(t, ok, "strict mode watches a doorbell register of QPN %#x", dq.QPN)
		require.Equal(t, dq.BlueFlame, reg, "the one libmlx5 rings (mlx5dv_qp.bf.reg)")
		require.Equal(t, dq.BlueFlameSize, size, "with its buffers (mlx5dv_qp.bf.size)")
	}
	connectLoopback(t, d, qps, ctx.AccessLocalWrite|ctx.AccessRemoteWrite)
	for _, q := range qps {
		st, err := q.State()
		require.NoError(t, err, "ibv_query_qp")
		require.Equal(t, ctx.QPStateRTS, st, "QUERY_QP reports the model's state")
	}
	err = qps[0].Modify(ctx.QPAttr{State: ctx.QPStateRTR})
	require.ErrorIs(t, err, ctx.ErrInvalidState, "RTS→RTR refused by the transition table")

	buf, err := ctx.AllocBuffer(8192, ctx.BufferOptions{})
	require.NoError(t, err)
	defer buf.Close()
	mr, err := pd.RegisterMemory(buf.Pointer(), 8192, ctx.AccessLocalWrite|ctx.AccessRemoteWrite)
	require.NoError(t, err)
	b := buf.Bytes()
	for i := range 100 {
		b[i] = byte(i*13 + 7)
	}

	dq := qps[0].Descriptor()
	sq, poll := loopbackQueues(t, qps[0], cq)
	base := uint64(uintptr(buf.Pointer()))
	require.NoError(t, sq.Begin(1, wqebuilder.Signaled).RdmaWrite(base+4096, mr.RKey()).SGE(base, 100, mr.LKey()).Finish())
	sq.RingDoorbell()

	var ops []prm.CQEOpcode
	var qpns []uint32
	var bytes []uint32
	waitCQEs(t, poll, 1, func(c *monocq.CQE) {
		ops = append(ops, c.Opcode())
		qpns = append(qpns, c.QPN())
		bytes = append(bytes, c.ByteCount())
	})
	require.Equal(t, []prm.CQEOpcode{prm.CQEReq}, ops, "one requester CQE")
	require.Equal(t, []uint32{dq.QPN}, qpns)
	require.Equal(t, b[:100], b[4096:4196], "the RDMA WRITE moved the bytes")
	require.Empty(t, f.Violations(), "the WQE libmlx5's ring carried is well formed")

	require.NoError(t, mr.Close())
	destroys := emulate.CallCount("write DESTROY_QP") + emulate.CallCount("ioctl QP_DESTROY")
	for _, q := range qps {
		require.NoError(t, q.Close(), "ibv_destroy_qp")
	}
	require.Equal(t, destroys+2, emulate.CallCount("write DESTROY_QP")+emulate.CallCount("ioctl QP_DESTROY"))
	require.NoError(t, cq.Close())
	require.NoError(t, pd.Close())
}

// connectLoopback moves two RC QPs of one device through INIT, RTR and
// RTS, each to the other, on port 1 (by LID, or by GID 0 on RoCE), with
// access as the responder's rights.
func connectLoopback(t *testing.T, d *verbs.Device, qps [2]*verbs.QueuePair, access ctx.Access) {
	t.Helper()
	pa, err := d.QueryPort(1)
	require.NoError(t, err)
	path := ctx.AddressAttr{Port: 1, DLID: pa.LID}
	if pa.LinkLayer == ctx.LinkLayerEthernet {
		// RoCE: the path names the peer's GID (the same port here).
		g, err := d.QueryGID(1, 0)
		require.NoError(t, err)
		path = ctx.AddressAttr{Port: 1, GlobalRoute: true, DGID: g.GID, HopLimit: 64}
	}
	for i, q := range qps {
		peer := qps[1-i].Descriptor().QPN
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: access}))
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: peer, PathMTU: ctx.MTU1024,
			Path: path, MinRNRTimer: 12, MaxDestRdAtomic: 1}))
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 1}))
	}
}

// loopbackQueues returns the kit's send queue over q's ring and a poller
// of cq's ring, both as libmlx5 allocated them.
func loopbackQueues(t *testing.T, q *verbs.QueuePair, cq *verbs.CompletionQueue) (*wqebuilder.SendQueue, *monocq.CQ) {
	t.Helper()
	dq := q.Descriptor()
	sq, err := wqebuilder.New(wqebuilder.Config{Buf: dq.SQ.Buf, WQECnt: dq.SQ.WQECnt, QPN: dq.QPN, DBRec: dq.DBRec,
		BlueFlame: dq.BlueFlame, BlueFlameSize: dq.BlueFlameSize, MaxInline: dq.MaxInline, MaxSGE: dq.MaxSendSGE, Memory: dq.Memory})
	require.NoError(t, err)
	dc := cq.Descriptor()
	poll, err := monocq.New(monocq.Config{Buf: dc.Buf, CQECnt: dc.CQECnt, CQESize: dc.CQESize, DBRec: dc.DBRec, UAR: dc.UAR, CQN: dc.CQN, Memory: dc.Memory})
	require.NoError(t, err)
	return sq, poll
}

// waitCQEs polls until n CQEs came, or fails the test after ten seconds.
func waitCQEs(t *testing.T, poll *monocq.CQ, n int, each func(*monocq.CQE)) {
	t.Helper()
	got := 0
	for deadline := time.Now().Add(10 * time.Second); got < n; time.Sleep(time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "%d of %d CQEs in 10 s", got, n)
		got += poll.Poll(n-got, each)
	}
}
