package sim

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// TestAdoptCompletionQueue creates a CQ over a ring and doorbell record the
// caller owns and checks that the model writes its CQEs there, that it
// refuses bad geometry, and that Close gives the CQN back.
func TestAdoptCompletionQueue(t *testing.T) {
	f := New(Options{})
	defer f.Close()
	dev, err := f.openDevice("")
	require.NoError(t, err)
	defer dev.Close()

	ring, err := ctx.AllocBuffer(8*prm.CQE64Size, ctx.BufferOptions{})
	require.NoError(t, err)
	defer ring.Close()
	db, err := ctx.AllocBuffer(64, ctx.BufferOptions{})
	require.NoError(t, err)
	defer db.Close()
	rb := unsafe.Slice((*byte)(ring.Pointer()), 8*prm.CQE64Size)
	for i := 0; i < 8; i++ {
		rb[i*prm.CQE64Size+prm.CQEOpOwn] = prm.CQEInvalidOpOwn | prm.CQEOwnerMask
	}

	cfg := simadopt.CQConfig{Ring: ring.Pointer(), Count: 8, CQESize: prm.CQE64Size, DBRec: db.Pointer()}
	for name, bad := range map[string]func(c *simadopt.CQConfig){
		"count not a power of two": func(c *simadopt.CQConfig) { c.Count = 6 },
		"count above the limit":    func(c *simadopt.CQConfig) { c.Count = maxCQE * 2 },
		"CQE size":                 func(c *simadopt.CQConfig) { c.CQESize = 32 },
		"misaligned record":        func(c *simadopt.CQConfig) { c.DBRec = unsafe.Add(db.Pointer(), 4) },
		"nil ring":                 func(c *simadopt.CQConfig) { c.Ring = nil },
		"completion vector":        func(c *simadopt.CQConfig) { c.CompVector = compVectors },
	} {
		c := cfg
		bad(&c)
		_, err := adoptCompletionQueue(dev, c)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
	}

	c, err := adoptCompletionQueue(dev, cfg)
	require.NoError(t, err)
	d := c.Descriptor()
	require.Equal(t, ring.Pointer(), d.Buf)
	require.Equal(t, db.Pointer(), d.DBRec)
	info, ok := f.lookupCQ(d.CQN)
	require.True(t, ok)
	require.Equal(t, uint32(8), info.Count)
	require.Equal(t, ring.Pointer(), info.Ring)

	var img [prm.CQE64Size]byte
	img[prm.CQEOpOwn] = prm.OpOwn(prm.CQEReqErr, prm.CQEFormatNone, false, 0)
	require.NoError(t, f.InjectCQE(d.CQN, img))
	require.Equal(t, prm.CQEReqErr, prm.OpOwnOpcode(rb[prm.CQEOpOwn]), "the CQE landed in the caller's ring")
	require.Equal(t, uint8(0), rb[prm.CQEOpOwn]&prm.CQEOwnerMask, "owner bit of lap 0")

	require.NoError(t, c.Close())
	_, ok = f.lookupCQ(d.CQN)
	require.False(t, ok, "closed CQ is gone")
}

// TestAdoptQueuePair creates an RC QP over rings and a doorbell record the
// caller owns, connects it to a QP of the model's own, and checks that an
// RDMA WRITE written into the caller's send ring moves the bytes and
// completes in the (adopted) send CQ, that a SEND lands in a receive WQE
// of the caller's receive ring, and that bad geometry is refused.
func TestAdoptQueuePair(t *testing.T) {
	f := New(Options{Strict: true})
	defer f.Close()
	open := func(name string) (provider.Device, provider.ProtectionDomain) {
		d, err := f.openDevice(name)
		require.NoError(t, err)
		t.Cleanup(func() { _ = d.Close() })
		p, err := d.AllocProtectionDomain()
		require.NoError(t, err)
		return d, p
	}
	devA, pdA := open("sim0")
	devB, pdB := open("sim1")
	alloc := func(n int) *ctx.Buffer {
		b, err := ctx.AllocBuffer(n, ctx.BufferOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	newCQ := func(d provider.Device) provider.CompletionQueue {
		c, err := d.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16})
		require.NoError(t, err)
		return c
	}
	// The caller's memory: one buffer with the receive ring first and the
	// send ring after it, as libmlx5 lays them out.
	const sqCnt, rqCnt, rqStride = 16, 8, 32
	ring := alloc(sqCnt*prm.WQEBBSize + rqCnt*rqStride)
	db := alloc(64)
	sqBuf := unsafe.Add(ring.Pointer(), rqCnt*rqStride)
	cqA := newCQ(devA)
	cfg := simadopt.QPConfig{Type: ctx.QPTypeRC, SendCQ: cqA, RecvCQ: cqA,
		Caps: ctx.QueuePairCaps{SendDepth: sqCnt, RecvDepth: rqCnt, MaxSendSGE: 1, MaxRecvSGE: 2, MaxInline: 64},
		SQ:   sqBuf, SQCount: sqCnt, RQ: ring.Pointer(), RQCount: rqCnt, RQStride: rqStride, DBRec: db.Pointer()}
	for name, mut := range map[string]func(c *simadopt.QPConfig){
		"DCI type":                func(c *simadopt.QPConfig) { c.Type = ctx.QPTypeDCI },
		"send count":              func(c *simadopt.QPConfig) { c.SQCount = 12 },
		"send count above limit":  func(c *simadopt.QPConfig) { c.SQCount = maxSendWQEBB * 2 },
		"misaligned send ring":    func(c *simadopt.QPConfig) { c.SQ = unsafe.Add(sqBuf, 16) },
		"misaligned record":       func(c *simadopt.QPConfig) { c.DBRec = unsafe.Add(db.Pointer(), 4) },
		"receive stride":          func(c *simadopt.QPConfig) { c.RQStride = 24 },
		"receive count":           func(c *simadopt.QPConfig) { c.RQCount = 6 },
		"nil receive ring":        func(c *simadopt.QPConfig) { c.RQ = nil },
		"receive SGEs":            func(c *simadopt.QPConfig) { c.Caps.MaxRecvSGE = maxSGE + 1 },
		"inline beyond the sizes": func(c *simadopt.QPConfig) { c.Caps.MaxInline = 1 << 20 },
		"nil doorbell record":     func(c *simadopt.QPConfig) { c.DBRec = nil },
	} {
		c := cfg
		mut(&c)
		_, err := adoptQueuePair(pdA, c)
		require.Error(t, err, name)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
	}
	qa, err := adoptQueuePair(pdA, cfg)
	require.NoError(t, err)
	defer qa.Close()
	scqA := &testCQ{d: cqA.Descriptor()}
	da := qa.Descriptor()
	require.Equal(t, sqBuf, da.SQ.Buf)
	require.Equal(t, uint32(sqCnt), da.SQ.WQECnt)
	require.Equal(t, ring.Pointer(), da.RQ.Buf)
	require.Equal(t, uint32(rqStride), da.RQ.Stride)
	require.Equal(t, db.Pointer(), da.DBRec)

	cqB1 := newCQ(devB)
	scqB := &testCQ{d: cqB1.Descriptor()}
	qb, err := pdB.CreateQueuePair(provider.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cqB1, RecvCQ: cqB1,
		Caps: ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	defer qb.Close()

	lid := func(d provider.Device) uint16 {
		pa, err := d.QueryPort(1)
		require.NoError(t, err)
		return pa.LID
	}
	for _, x := range []struct {
		q    provider.QueuePair
		peer uint32
		lid  uint16
	}{{qa, qb.Descriptor().QPN, lid(devB)}, {qb, qa.Descriptor().QPN, lid(devA)}} {
		require.NoError(t, x.q.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
		require.NoError(t, x.q.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: x.peer, PathMTU: ctx.MTU1024,
			Path: ctx.AddressAttr{DLID: x.lid, Port: 1}, MinRNRTimer: 1, MaxDestRdAtomic: 4}))
		require.NoError(t, x.q.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 4}))
	}

	src, dst := alloc(4096), alloc(4096)
	mrA, err := pdA.RegisterMemory(src.Pointer(), 4096, allAccess)
	require.NoError(t, err)
	mrB, err := pdB.RegisterMemory(dst.Pointer(), 4096, allAccess)
	require.NoError(t, err)
	for i := range 100 {
		src.Bytes()[i] = byte(i*7 + 1)
	}

	tq := &testQP{d: da}
	w := ctrlSeg(prm.OpRdmaWrite, 0, tq.pi, qa.Descriptor().QPN, 3, prm.FlagCQUpdate, 0)
	w = append(w, raddrSeg(uint64(uintptr(dst.Pointer()))+8, mrB.RKey())...)
	w = append(w, dataSeg(100, mrA.LKey(), uint64(uintptr(src.Pointer())))...)
	tq.write(w)
	tq.ring()
	require.NoError(t, f.RunUntilIdle())
	require.Equal(t, src.Bytes()[:100], dst.Bytes()[8:108], "the WRITE from the caller's ring moved the bytes")
	x, ok := scqA.poll()
	require.True(t, ok, "a CQE in the send CQ")
	require.Equal(t, prm.CQEReq, x.op)
	require.Equal(t, qa.Descriptor().QPN, x.qpn)
	require.Equal(t, uint16(0), x.counter)

	// A SEND from the model's QP lands in the caller's receive ring.
	tq.postRecv(dataSeg(64, mrA.LKey(), uint64(uintptr(src.Pointer()))+1024))
	db0 := prm.Load32(db.Pointer())
	require.Equal(t, uint32(1), db0, "receive counter in the caller's record")
	tb := &testQP{d: qb.Descriptor()}
	w = ctrlSeg(prm.OpSend, 0, tb.pi, qb.Descriptor().QPN, 2, prm.FlagCQUpdate, 0)
	copy(dst.Bytes()[2048:], "through the adopted receive ring")
	w = append(w, dataSeg(32, mrB.LKey(), uint64(uintptr(dst.Pointer()))+2048)...)
	tb.write(w)
	tb.ring()
	require.NoError(t, f.RunUntilIdle())
	require.Equal(t, "through the adopted receive ring", string(src.Bytes()[1024:1056]))
	x, ok = scqA.poll()
	require.True(t, ok, "a receive CQE")
	require.Equal(t, prm.CQERespSend, x.op)
	require.Equal(t, uint32(32), x.byteCnt)
	_, ok = scqB.poll()
	require.True(t, ok, "the sender's CQE")
	require.Empty(t, f.Violations())
}
