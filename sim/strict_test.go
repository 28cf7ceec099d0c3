package sim

import (
	"math/bits"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

func violationKinds(f *Fabric) []ViolationKind {
	var k []ViolationKind
	for _, v := range f.Violations() {
		k = append(k, v.Kind)
	}
	return k
}

func TestStrictDSMismatch(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	a, _ := e.rcPair(qpOpts{})
	// ds says 2 (ctrl + raddr) but an inline segment follows: the builder
	// under-counted. The ring slot after the WQE is zero, so the model runs
	// out of segments for the inline data.
	w := a.build(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()))
	w = append(w, inlineSeg([]byte("lost"))...)
	w = append(w, make([]byte, 16)...) // pad to 64
	a.write(w)
	a.ring()
	e.run()
	// ds=2 is a legal zero-length write: no violation for the WQE itself,
	// and the stray segment is never looked at.
	require.Empty(t, e.f.Violations())
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)

	// ds too large: an all-zero data segment where the WQE should have ended.
	w = ctrlSeg(prm.OpRdmaWrite, 0, a.pi, a.qp.QPN(), 4, prm.FlagCQUpdate, 0)
	w = append(w, raddrSeg(e.addr2(0), e.mr2.RKey())...)
	w = append(w, inlineSeg([]byte("abc"))...)
	w = append(w, make([]byte, 16)...)
	a.write(w)
	a.ring()
	e.run()
	require.Equal(t, []ViolationKind{ViolationDS}, violationKinds(e.f))
	e.f.clearViolations()
	// The zero segment reads as 2 GiB, more than a message may carry.
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalLength, a.pi-1)

	// An inline length that runs past ds.
	a, _ = e.rcPair(qpOpts{})
	w = ctrlSeg(prm.OpSend, 0, a.pi, a.qp.QPN(), 2, prm.FlagCQUpdate, 0)
	w = append(w, inlineSeg(make([]byte, 40))...)
	a.write(w[:64])
	a.ring()
	e.run()
	require.Equal(t, []ViolationKind{ViolationDS}, violationKinds(e.f))
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalQPOp, a.pi-1)
}

func TestStrictDoorbellEndian(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	a, _ := e.rcPair(qpOpts{})
	a.write(a.build(prm.OpNop, 0, prm.FlagCQUpdate, 0))
	// A little-endian store of the producer index.
	*(*uint32)(unsafe.Add(a.d.DBRec, 4)) = uint32(a.pi)
	e.run()
	require.Equal(t, []ViolationKind{ViolationDoorbellEndian}, violationKinds(e.f))
	require.Empty(t, a.scq.drain(), "the bad doorbell is not acted on")
	a.ring()
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)

	// The CQ consumer index too.
	*(*uint32)(a.scq.d.DBRec) = 1
	e.run()
	require.Contains(t, violationKinds(e.f), ViolationDoorbellEndian)
	prm.Store32(a.scq.d.DBRec, a.scq.ci)
}

func TestStrictDoorbellBackwardsAndPastRing(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	a, _ := e.rcPair(qpOpts{sendDepth: 4})
	for i := 0; i < 3; i++ {
		a.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	}
	e.run()
	require.Len(t, a.scq.drain(), 3)
	prm.Store32(unsafe.Add(a.d.DBRec, 4), 1)
	e.run()
	require.Equal(t, []ViolationKind{ViolationDoorbellBackwards}, violationKinds(e.f))
	e.f.clearViolations()
	prm.Store32(unsafe.Add(a.d.DBRec, 4), uint32(a.pi)+a.d.SQ.WQECnt+1)
	e.run()
	require.Equal(t, []ViolationKind{ViolationDoorbellPastRing}, violationKinds(e.f))
	require.Empty(t, a.scq.drain())
	e.f.clearViolations()
	// The receive doorbell record as well.
	prm.Store32(a.d.DBRec, a.d.RQ.WQECnt+1)
	e.run()
	require.Equal(t, []ViolationKind{ViolationDoorbellPastRing}, violationKinds(e.f))
}

func TestStrictWQEIndexQPNAndOpcode(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	a, _ := e.rcPair(qpOpts{})
	w := ctrlSeg(prm.OpNop, 0, a.pi+5, a.qp.QPN(), 1, prm.FlagCQUpdate, 0)
	a.write(append(w, make([]byte, 48)...))
	a.ring()
	e.run()
	// The doorbell carries the control segment's first 8 bytes, which
	// name WQE a.pi+5: the BlueFlame check finds another WQE's bytes in
	// that slot.
	require.Equal(t, []ViolationKind{ViolationBlueFlame, ViolationWQEIndex}, violationKinds(e.f))
	require.Equal(t, prm.CQEReq, a.scq.one(t).op, "not fatal unless StrictFatal")
	e.f.clearViolations()

	w = ctrlSeg(prm.OpNop, 0, a.pi, a.qp.QPN()+1, 1, prm.FlagCQUpdate, 0)
	a.write(append(w, make([]byte, 48)...))
	a.ring()
	e.run()
	require.Equal(t, []ViolationKind{ViolationQPN}, violationKinds(e.f))
	a.scq.drain()
	e.f.clearViolations()

	i := a.post(prm.OpTSO, 0, prm.FlagCQUpdate, 0)
	e.run()
	require.Equal(t, []ViolationKind{ViolationOpcode}, violationKinds(e.f))
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalQPOp, i)
}

func TestStrictFatal(t *testing.T) {
	e := newEnv(t, Options{StrictFatal: true})
	e.allowViolations = true
	a, _ := e.rcPair(qpOpts{})
	w := ctrlSeg(prm.OpNop, 0, a.pi+1, a.qp.QPN(), 1, prm.FlagCQUpdate, 0)
	a.write(append(w, make([]byte, 48)...))
	a.ring()
	require.ErrorIs(t, e.f.RunUntilIdle(), ErrViolation)
	// The doorbell names WQE 1 too (TestStrictWQEIndexQPNAndOpcode).
	require.Equal(t, []ViolationKind{ViolationBlueFlame, ViolationWQEIndex}, violationKinds(e.f))
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalQPOp, 0)
	e.f.clearViolations()
	require.NoError(t, e.f.RunUntilIdle())
}

func TestStrictOff(t *testing.T) {
	f := New(Options{})
	defer f.Close()
	c, err := f.Open("")
	require.NoError(t, err)
	defer c.Close()
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 4})
	require.NoError(t, err)
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	qp, err := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 4}})
	require.NoError(t, err)
	require.NoError(t, qp.Modify(ctx.QPAttr{State: ctx.QPStateInit}))
	d := provider.QPDescriptor(qp)
	*(*uint32)(unsafe.Add(d.DBRec, 4)) = bits.ReverseBytes32(0x01000000)
	require.NoError(t, f.RunUntilIdle())
	require.Empty(t, f.Violations(), "violations are recorded only in strict mode")
}

func TestCQArmAndEvent(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	cq, err := e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 8, EventChannel: true})
	require.NoError(t, err)
	require.GreaterOrEqual(t, provider.CQEventFD(cq), 0)
	d := provider.CQDescriptor(cq)
	qp, err := e.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: a.rcq.cq, Caps: ctx.QueuePairCaps{SendDepth: 8}})
	require.NoError(t, err)
	q := &testQP{e: e, qp: qp, d: provider.QPDescriptor(qp), scq: &testCQ{cq: cq, d: d}}
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	e.connectRC(q, b, 7, 1)

	arm := func(sn uint32, solicited bool) {
		cmd := uint32(prm.CQArmAny)
		if solicited {
			cmd = prm.CQArmSolicited
		}
		word := sn<<prm.CQArmSNShift | cmd | q.scq.ci&prm.CQConsumerIndexMask
		prm.Store32(unsafe.Add(d.DBRec, 4), word)
		prm.Store64(unsafe.Add(d.UAR, prm.CQDoorbellOffset), uint64(word)<<32|uint64(d.CQN))
	}
	ok, err := provider.ReadCQEvent(cq)
	require.NoError(t, err)
	require.False(t, ok)
	// Not armed: no event.
	q.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	e.run()
	q.scq.drain()
	ok, _ = provider.ReadCQEvent(cq)
	require.False(t, ok)
	// Armed: one event for the next completion.
	arm(0, false)
	e.run()
	ok, _ = provider.ReadCQEvent(cq)
	require.False(t, ok)
	q.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	q.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	e.run()
	ok, _ = provider.ReadCQEvent(cq)
	require.True(t, ok)
	ok, _ = provider.ReadCQEvent(cq)
	require.False(t, ok, "one event per arm")
	// Arming with completions pending fires at once.
	arm(1, false)
	e.run()
	ok, _ = provider.ReadCQEvent(cq)
	require.True(t, ok)
	q.scq.drain()
	// Solicited-only: an unsolicited completion does not fire.
	arm(2, true)
	q.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	e.run()
	ok, _ = provider.ReadCQEvent(cq)
	require.False(t, ok)
	require.Empty(t, e.f.Violations())
}

func TestDelayCompletions(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	require.NoError(t, e.f.DelayCompletions(a.scq.cq.CQN(), 1_000_000))
	a.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	_, err := e.f.Step()
	require.NoError(t, err)
	require.Empty(t, a.scq.drain())
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	require.GreaterOrEqual(t, int64(e.f.Now()), int64(1_000_000))
	require.NoError(t, e.f.DelayCompletions(a.scq.cq.CQN(), 0))
	a.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	_, err = e.f.Step()
	require.NoError(t, err)
	require.Len(t, a.scq.drain(), 1)
}

func TestInjectCQE(t *testing.T) {
	e := newEnv(t, Options{})
	cq := e.newCQ(e.c, 3, 64)
	var img [64]byte
	img[prm.ErrCQESyndrome] = 0x77
	be.PutUint32(img[prm.ErrCQEWQEOpcodeQPN:], 0xabcdef)
	img[prm.CQEOpOwn] = prm.OpOwn(prm.CQEReqErr, 0, false, 0)
	for i := 0; i < 6; i++ { // two laps
		require.NoError(t, e.f.InjectCQE(cq.cq.CQN(), img))
		c := cq.one(t)
		require.Equal(t, prm.Syndrome(0x77), c.synd)
		require.False(t, c.synd.Known())
		require.Equal(t, uint32(0xabcdef), c.qpn)
	}
}

func TestStepIsOneWQEPerQP(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	for i := 0; i < 3; i++ {
		a.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	}
	for i := 1; i <= 3; i++ {
		ok, err := e.f.Step()
		require.NoError(t, err)
		require.True(t, ok)
		require.Len(t, a.scq.drain(), 1)
	}
	ok, err := e.f.Step()
	require.NoError(t, err)
	require.False(t, ok)
}

func TestCheckViolations(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	require.NoError(t, e.f.CheckViolations())
	a, _ := e.rcPair(qpOpts{})
	for i := 0; i < maxViolations+5; i++ {
		prm.Store32(unsafe.Add(a.d.DBRec, 4), uint32(0x10000+i))
		_, err := e.f.Step()
		require.NoError(t, err)
	}
	require.Len(t, e.f.Violations(), maxViolations)
	require.Equal(t, uint64(maxViolations+5), e.f.Stats().Violations)
	err := e.f.CheckViolations()
	require.Error(t, err)
	require.Contains(t, err.Error(), "5 more violations")
	require.Contains(t, err.Error(), "doorbell-endian")
}

func TestDefaultOptions(t *testing.T) {
	o := func(strict, link string) Options {
		t.Helper()
		o, err := defaultOptions(strict, link)
		require.NoError(t, err)
		return o
	}
	require.True(t, o("", "").Strict)
	require.False(t, o("0", "").Strict)
	require.True(t, o("fatal", "").StrictFatal)
	require.Equal(t, Engine, o("", "").Mode)
	for _, v := range []string{"", "ib", "infiniband", "InfiniBand"} {
		require.Equal(t, ctx.LinkLayerInfiniBand, o("", v).LinkLayer, "%q", v)
	}
	for _, v := range []string{"eth", "ethernet", "Ethernet", "roce", "RoCE"} {
		require.Equal(t, ctx.LinkLayerEthernet, o("", v).LinkLayer, "%q", v)
	}
	_, err := defaultOptions("", "iwarp")
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, `MLX5KIT_SIM_LINK_LAYER="iwarp"`)
}

// TestDefaultFabricLinkLayerRefused: a Fabric made as the default one is
// from a link layer it does not know refuses to list or open devices, and
// says why.
func TestDefaultFabricLinkLayerRefused(t *testing.T) {
	o, err := defaultOptions("", "iwarp")
	require.Error(t, err)
	f := New(o)
	defer f.Close()
	f.envErr = err
	_, err = f.devices()
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, EnvLinkLayer)
	_, err = f.openDevice("")
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}

func TestStrictBlueFlame(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	a, _ := e.rcPair(qpOpts{})
	bf := unsafe.Slice((*byte)(a.d.BlueFlame), 2*a.d.BlueFlameSize)
	w := a.build(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte("blue")))
	a.write(w)
	a.ring()
	copy(bf[0:], w) // a faithful BlueFlame copy
	copy(bf[len(w):64], make([]byte, 64-len(w)))
	e.run()
	require.Empty(t, e.f.Violations())
	// A doorbell-only write of the first 8 bytes into the other buffer.
	w = a.build(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	a.write(w)
	a.ring()
	copy(bf[256:], w[:8])
	e.run()
	require.Empty(t, e.f.Violations())
	// A corrupted copy.
	w = a.build(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte("flame")))
	a.write(w)
	a.ring()
	copy(bf[0:], w)
	bf[20] ^= 1
	e.run()
	require.Equal(t, []ViolationKind{ViolationBlueFlame}, violationKinds(e.f))
	require.Len(t, a.scq.drain(), 3)
}

func TestStrictReceiveZeroLength(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	a, b := e.rcPair(qpOpts{})
	b.postRecv(dataSeg(0, e.mr2.LKey(), e.addr2(0)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("x")))
	e.run()
	require.Equal(t, []ViolationKind{ViolationReceive}, violationKinds(e.f))
	require.Equal(t, prm.CQERespSend, b.rcq.one(t).op, "the device sees a 2 GiB buffer; a one-byte send fits")
}

// TestStrictSRQDoorbellPastRing: an SRQ of n WQEs holds at most n-1 posted
// receives (the free list always keeps its tail WQE), counted from what the
// device has consumed; a WQE counter beyond that is reported, naming the
// SRQ, and not acted on.
func TestStrictSRQDoorbellPastRing(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	srq := e.newSRQ(e.pd2, 3, 1)
	n := srq.d.WQECnt
	require.Equal(t, uint32(4), n)
	a := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
	e.connectRC(a, b, 0, 1) // no RNR retries: a SEND without a receive fails
	for i := uint32(0); i < n-1; i++ {
		srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(int(i)*64)))
	}
	e.run()
	require.Empty(t, e.f.Violations(), "n-1 posted receives fit")

	prm.Store32(srq.d.DBRec, n)
	e.run()
	v := e.f.Violations()
	require.Len(t, v, 1)
	require.Equal(t, ViolationDoorbellPastRing, v[0].Kind)
	require.Equal(t, srq.srq.SRQN(), v[0].SRQN)
	require.Zero(t, v[0].QPN)
	e.f.clearViolations()

	// Two receives consumed (and freed) make room for two more, not three.
	for i := 0; i < 2; i++ {
		a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte{byte(i)}))
	}
	e.run()
	require.Len(t, a.scq.drain(), 2)
	for _, c := range b.rcq.drain() {
		require.Equal(t, prm.CQERespSend, c.op)
		srq.free(c.counter)
	}
	for i := 0; i < 2; i++ {
		srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(256+i*64)))
	}
	require.Equal(t, uint16(n-1+2), srq.counter)
	e.run()
	require.Empty(t, e.f.Violations())
	prm.Store32(srq.d.DBRec, uint32(srq.counter)+1)
	e.run()
	v = e.f.Violations()
	require.Len(t, v, 1)
	require.Equal(t, ViolationDoorbellPastRing, v[0].Kind)
	require.Equal(t, srq.srq.SRQN(), v[0].SRQN)
	e.f.clearViolations()

	// The rejected counter was not taken: the three receives posted are
	// the three there are, and a fourth SEND finds none.
	prm.Store32(srq.d.DBRec, uint32(srq.counter))
	var last uint16
	for i := 0; i < 4; i++ {
		last = a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte{byte(i)}))
	}
	e.run()
	require.Len(t, b.rcq.drain(), 3)
	got := a.scq.drain()
	require.Len(t, got, 4)
	requireErr(t, got[3], prm.CQEReqErr, prm.SyndromeRNRRetryExc, last)
	require.Empty(t, e.f.Violations())
}

// TestStrictBlueFlameDoesNotAllocate: in Manual strict mode every round
// compares the BlueFlame buffers with the ring; a post with a BlueFlame
// copy (and one with a doorbell-only write) is checked without allocating.
func TestStrictBlueFlameDoesNotAllocate(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{sendDepth: 64})
	bf := unsafe.Slice((*byte)(a.d.BlueFlame), 2*a.d.BlueFlameSize)
	w := a.build(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), inlineSeg([]byte("blue")))
	half := 0
	post := func(copyLen int) {
		w[1], w[2] = byte(a.pi>>8), byte(a.pi)
		a.write(w)
		a.ring()
		copy(bf[half*int(a.d.BlueFlameSize):], w[:copyLen])
		half ^= 1
		_, err := e.f.Step()
		require.NoError(t, err)
		_, ok := a.scq.poll()
		require.True(t, ok)
	}
	require.Zero(t, testing.AllocsPerRun(200, func() { post(len(w)) }), "BlueFlame copies")
	require.Zero(t, testing.AllocsPerRun(200, func() { post(8) }), "doorbell-only writes")
	require.Empty(t, e.f.Violations())
}
