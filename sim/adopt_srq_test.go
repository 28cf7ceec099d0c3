package sim

import (
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// TestAdoptSharedReceiveQueueAndDC creates an SRQ over a ring and doorbell
// record the caller owns (its free list linked by the caller, as libmlx5
// links it), an RC QP and a DCT that receive through it, and a DCI over
// the caller's send ring; a SEND from a QP of the model's own lands in the
// SRQ through the RC QP, a SEND from the adopted DCI through the DCT, and
// each receive CQE carries the SRQ number. Bad geometry is refused.
func TestAdoptSharedReceiveQueueAndDC(t *testing.T) {
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
	newCQ := func(d provider.Device) (provider.CompletionQueue, *testCQ) {
		c, err := d.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16})
		require.NoError(t, err)
		return c, &testCQ{d: c.Descriptor()}
	}

	// The SRQ on B: 8 WQEs of 32 bytes (a next segment and one data
	// segment), linked 0→1→…→7.
	const srqCnt, srqStride = 8, 32
	ring := alloc(srqCnt * srqStride)
	srqDB := alloc(64)
	for i := 0; i < srqCnt; i++ {
		prm.Store16(unsafe.Add(ring.Pointer(), i*srqStride+prm.SRQNextWQEIndex), uint16((i+1)%srqCnt))
	}
	scfg := simadopt.SRQConfig{Ring: ring.Pointer(), Count: srqCnt, Stride: srqStride, DBRec: srqDB.Pointer()}
	for name, mut := range map[string]func(c *simadopt.SRQConfig){
		"count":             func(c *simadopt.SRQConfig) { c.Count = 6 },
		"count above limit": func(c *simadopt.SRQConfig) { c.Count = maxRecvWR * 2 },
		"stride":            func(c *simadopt.SRQConfig) { c.Stride = 48 },
		"stride too small":  func(c *simadopt.SRQConfig) { c.Stride = 16 },
		"stride too large":  func(c *simadopt.SRQConfig) { c.Stride = 1024 },
		"misaligned ring":   func(c *simadopt.SRQConfig) { c.Ring = unsafe.Add(ring.Pointer(), 16) },
		"misaligned record": func(c *simadopt.SRQConfig) { c.DBRec = unsafe.Add(srqDB.Pointer(), 2) },
		"nil record":        func(c *simadopt.SRQConfig) { c.DBRec = nil },
	} {
		c := scfg
		mut(&c)
		_, err := adoptSharedReceiveQueue(pdB, c)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
	}
	srqB, err := adoptSharedReceiveQueue(pdB, scfg)
	require.NoError(t, err)
	defer srqB.Close()
	srqn, ok := sharedReceiveQueueNumber(srqB)
	require.True(t, ok)
	require.Equal(t, srqB.Descriptor().SRQN, srqn)
	info, ok := f.lookupSRQ(srqn)
	require.True(t, ok)
	require.Equal(t, simadopt.SRQInfo{SRQN: srqn, Ring: ring.Pointer(), Count: srqCnt, Stride: srqStride, DBRec: srqDB.Pointer(),
		PDN: func() uint32 { n, _ := protectionDomainNumber(pdB); return n }()}, info)
	ts := &testSRQ{d: descriptor.SRQ{Buf: ring.Pointer(), DBRec: srqDB.Pointer(), Stride: srqStride, WQECnt: srqCnt},
		head: 0, tail: srqCnt - 1}

	dst := alloc(4096)
	mrB, err := pdB.RegisterMemory(dst.Pointer(), 4096, allAccess)
	require.NoError(t, err)
	src := alloc(4096)
	mrA, err := pdA.RegisterMemory(src.Pointer(), 4096, allAccess)
	require.NoError(t, err)
	lid := func(d provider.Device) uint16 {
		pa, err := d.QueryPort(1)
		require.NoError(t, err)
		return pa.LID
	}

	// An RC QP on B receiving through the SRQ, a model QP on A sending.
	cqB, tcqB := newCQ(devB)
	sqB, dbB := alloc(16*prm.WQEBBSize), alloc(64)
	rcfg := simadopt.QPConfig{Type: ctx.QPTypeRC, SendCQ: cqB, RecvCQ: cqB, SRQ: srqB,
		Caps: ctx.QueuePairCaps{SendDepth: 16, MaxSendSGE: 1},
		SQ:   sqB.Pointer(), SQCount: 16, DBRec: dbB.Pointer()}
	bad := rcfg
	bad.RQ, bad.RQCount, bad.RQStride = ring.Pointer(), 8, 32
	_, err = adoptQueuePair(pdB, bad)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument, "a receive ring and an SRQ")
	qb, err := adoptQueuePair(pdB, rcfg)
	require.NoError(t, err)
	defer qb.Close()
	cqA, tcqA := newCQ(devA)
	qa, err := pdA.CreateQueuePair(provider.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cqA, RecvCQ: cqA,
		Caps: ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	defer qa.Close()
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
	for i := 0; i < 2; i++ {
		ts.post(dataSeg(64, mrB.LKey(), uint64(uintptr(dst.Pointer()))+uint64(i)*64))
	}
	ta := &testQP{d: qa.Descriptor()}
	copy(src.Bytes(), "through the SRQ")
	w := ctrlSeg(prm.OpSend, 0, ta.pi, qa.Descriptor().QPN, 2, prm.FlagCQUpdate, 0)
	ta.write(append(w, dataSeg(15, mrA.LKey(), uint64(uintptr(src.Pointer())))...))
	ta.ring()
	require.NoError(t, f.RunUntilIdle())
	x, ok := tcqB.poll()
	require.True(t, ok, "a receive CQE on B")
	require.Equal(t, prm.CQERespSend, x.op)
	require.Equal(t, qb.Descriptor().QPN, x.qpn)
	require.Equal(t, srqn, x.srqn)
	require.Equal(t, uint16(0), x.counter, "SRQ WQE 0")
	require.Equal(t, "through the SRQ", string(dst.Bytes()[:15]))
	_, ok = tcqA.poll()
	require.True(t, ok, "the sender's CQE")

	// A DCT on B through the same SRQ, a DCI on A over the caller's ring.
	dcfg := simadopt.QPConfig{Type: ctx.QPTypeDCT, SendCQ: cqB, RecvCQ: cqB, SRQ: srqB, DCKey: 0xdc}
	for name, mut := range map[string]func(c *simadopt.QPConfig){
		"DCT without SRQ":  func(c *simadopt.QPConfig) { c.SRQ = nil },
		"DCT with a ring":  func(c *simadopt.QPConfig) { c.SQ, c.SQCount = sqB.Pointer(), 16 },
		"DCI with an SRQ":  func(c *simadopt.QPConfig) { *c = rcfg; c.Type = ctx.QPTypeDCI },
		"DCI with RQ":      func(c *simadopt.QPConfig) { *c = bad; c.SRQ, c.Type = nil, ctx.QPTypeDCI },
		"DCT without a CQ": func(c *simadopt.QPConfig) { c.SendCQ, c.RecvCQ = nil, nil },
	} {
		c := dcfg
		mut(&c)
		_, err := adoptQueuePair(pdB, c)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
	}
	dct, err := adoptQueuePair(pdB, dcfg)
	require.NoError(t, err)
	defer dct.Close()
	require.Nil(t, dct.Descriptor().SQ.Buf, "a DCT has no send ring")
	require.NoError(t, dct.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: allAccess}))
	require.NoError(t, dct.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU1024, MinRNRTimer: 1, Path: ctx.AddressAttr{Port: 1}}))

	sqA, dbA := alloc(16*prm.WQEBBSize), alloc(64)
	dci, err := adoptQueuePair(pdA, simadopt.QPConfig{Type: ctx.QPTypeDCI, SendCQ: cqA, RecvCQ: cqA,
		Caps: ctx.QueuePairCaps{SendDepth: 16, MaxSendSGE: 1, MaxInline: 32},
		SQ:   sqA.Pointer(), SQCount: 16, DBRec: dbA.Pointer()})
	require.NoError(t, err)
	defer dci.Close()
	require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1}))
	require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU1024}))
	require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7}))
	td := &testQP{d: dci.Descriptor()}
	require.Equal(t, sqA.Pointer(), td.d.SQ.Buf)
	payload := inlineSeg([]byte("DC into the SRQ"))
	w = ctrlSeg(prm.OpSend, 0, td.pi, dci.Descriptor().QPN, (16+48+len(payload))/16, prm.FlagCQUpdate, 0)
	w = append(w, dcAV(0xdc, dct.Descriptor().QPN, lid(devB))...)
	td.write(append(w, payload...))
	td.ring()
	require.NoError(t, f.RunUntilIdle())
	x, ok = tcqB.poll()
	require.True(t, ok, "a receive CQE of the DCT")
	require.Equal(t, prm.CQERespSend, x.op)
	require.Equal(t, dct.Descriptor().QPN, x.qpn)
	require.Equal(t, dci.Descriptor().QPN, x.srcQPN)
	require.Equal(t, srqn, x.srqn)
	require.Equal(t, uint16(1), x.counter, "SRQ WQE 1")
	require.Equal(t, "DC into the SRQ", string(dst.Bytes()[64:79]))
	x, ok = tcqA.poll()
	require.True(t, ok, "the DCI's CQE")
	require.Equal(t, prm.CQEReq, x.op)
	require.Empty(t, f.Violations())
	require.NoError(t, srqB.Close())
	_, ok = f.lookupSRQ(srqn)
	require.False(t, ok, "a closed SRQ is gone")
}

// TestAdoptQueuePairRingSmallerThanKernelSizing adopts a send ring of one
// WQEBB for capabilities the kernel's own sizing of a WQE (with memory
// window binds, which libmlx5 leaves out when told the send operations)
// would give two: mlx5_ib takes a user QP's ring as the library sized it,
// so the model does too, and bounds the WQEs it executes by the ring.
func TestAdoptQueuePairRingSmallerThanKernelSizing(t *testing.T) {
	f := New(Options{Strict: true})
	defer f.Close()
	d, err := f.openDevice("")
	require.NoError(t, err)
	defer d.Close()
	p, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	c, err := d.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4})
	require.NoError(t, err)
	sq, err := ctx.AllocBuffer(prm.WQEBBSize, ctx.BufferOptions{})
	require.NoError(t, err)
	defer sq.Close()
	db, err := ctx.AllocBuffer(64, ctx.BufferOptions{})
	require.NoError(t, err)
	defer db.Close()
	for _, typ := range []ctx.QPType{ctx.QPTypeRC, ctx.QPTypeDCI} {
		q, err := adoptQueuePair(p, simadopt.QPConfig{Type: typ, SendCQ: c, RecvCQ: c,
			Caps: ctx.QueuePairCaps{SendDepth: 1, MaxSendSGE: 1, MaxInline: 12},
			SQ:   sq.Pointer(), SQCount: 1, DBRec: db.Pointer()})
		require.NoError(t, err, "%v", typ)
		require.Equal(t, uint32(1), q.Descriptor().SQ.WQECnt)
		require.Equal(t, uint32(1), q.(*qp).maxWQEBBs, "the ring bounds the WQE")
		require.NoError(t, q.Close())
	}
}

// TestAdoptAfterDeviceFatal: after a fatal device error, adopting an SRQ
// or a queue pair (UD, DCI, DCT) on the failed device fails with EIO, as
// creating one does (CreateSRQ, CreateQueuePair): the device in internal
// error refuses CREATE_SRQ, CREATE_QP and CREATE_DCT. They used to
// succeed.
func TestAdoptAfterDeviceFatal(t *testing.T) {
	f := New(Options{})
	defer f.Close()
	d, err := f.openDevice("sim0")
	require.NoError(t, err)
	defer func() { _ = d.Close() }()
	p, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	c, err := d.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16})
	require.NoError(t, err)
	alloc := func(n int) *ctx.Buffer {
		b, err := ctx.AllocBuffer(n, ctx.BufferOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	ring, db := alloc(8*32), alloc(64)
	scfg := simadopt.SRQConfig{Ring: ring.Pointer(), Count: 8, Stride: 32, DBRec: db.Pointer()}
	s, err := adoptSharedReceiveQueue(p, scfg)
	require.NoError(t, err)
	sq, qdb := alloc(16*prm.WQEBBSize), alloc(64)
	udCfg := simadopt.QPConfig{Type: ctx.QPTypeUD, SendCQ: c, RecvCQ: c, SRQ: s, SQ: sq.Pointer(), SQCount: 16, DBRec: qdb.Pointer(),
		Caps: ctx.QueuePairCaps{SendDepth: 4}}

	require.NoError(t, f.FailDevice("sim0"))
	eio := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, syscall.EIO)
		require.Contains(t, err.Error(), "fatal device error")
	}
	_, err = adoptSharedReceiveQueue(p, scfg)
	eio(err)
	_, err = adoptQueuePair(p, udCfg)
	eio(err)
	_, err = adoptQueuePair(p, simadopt.QPConfig{Type: ctx.QPTypeDCT, SendCQ: c, RecvCQ: c, SRQ: s, DCKey: 1})
	eio(err)
	require.NoError(t, s.Close(), "destroying still works")
}

// TestAdoptCQAfterDeviceFatal: after a fatal device error creating a CQ
// over the caller's ring and resizing one fail with EIO, as every verb but
// those that destroy does (the firmware's CREATE_CQ and MODIFY_CQ fail in
// the internal-error state); destroying it still works.
func TestAdoptCQAfterDeviceFatal(t *testing.T) {
	f := New(Options{})
	defer f.Close()
	d, err := f.openDevice("sim0")
	require.NoError(t, err)
	defer func() { _ = d.Close() }()
	alloc := func(n int) *ctx.Buffer {
		b, err := ctx.AllocBuffer(n, ctx.BufferOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	ring, db, ring2 := alloc(8*prm.CQE64Size), alloc(64), alloc(16*prm.CQE64Size)
	cfg := simadopt.CQConfig{Ring: ring.Pointer(), Count: 8, CQESize: prm.CQE64Size, DBRec: db.Pointer()}
	c, err := adoptCompletionQueue(d, cfg)
	require.NoError(t, err)

	require.NoError(t, f.FailDevice("sim0"))
	eio := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, syscall.EIO)
		require.Contains(t, err.Error(), "fatal device error")
	}
	c2, err := adoptCompletionQueue(d, simadopt.CQConfig{Ring: ring2.Pointer(), Count: 16, CQESize: prm.CQE64Size, DBRec: db.Pointer()})
	require.Nil(t, c2)
	eio(err)
	eio(simadopt.ResizeCompletionQueue(c, simadopt.CQResize{Ring: ring2.Pointer(), Count: 16}))
	require.NoError(t, c.Close(), "destroying still works")
}
