package sim

import (
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// nop writes a signaled NOP at q's producer index and returns its index.
func (q *testQP) nop() uint16 { return q.write(q.build(prm.OpNop, 0, prm.FlagCQUpdate, 0)) }

// TestStrictDoorbellRecordOnly: a send doorbell record moved with no write
// to the doorbell register is reported (a ConnectX would not fetch the
// WQE) and, in Strict mode, executed all the same; a post that writes the
// register after the record, one record per WQE with one register write
// for the batch, and receive posts (a record only, as on mlx5) are not
// reported.
func TestStrictDoorbellRecordOnly(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	a, b := e.rcPair(qpOpts{})

	i := a.nop()
	a.ringRecord()
	e.run()
	v := e.f.Violations()
	require.Len(t, v, 1)
	require.Equal(t, ViolationDoorbellRecordOnly, v[0].Kind)
	require.Equal(t, a.qp.QPN(), v[0].QPN)
	require.Equal(t, i, v[0].WQEIndex, "the first WQE the record announced alone")
	require.Contains(t, v[0].Error(), "moved from 0 to 1")
	x := a.scq.one(t)
	require.Equal(t, prm.CQEReq, x.op, "Strict executes the WQE all the same")
	require.Equal(t, i, x.counter)
	e.f.clearViolations()

	// A later advance with still no register write is reported again.
	a.nop()
	a.ringRecord()
	e.run()
	require.Equal(t, []ViolationKind{ViolationDoorbellRecordOnly}, violationKinds(e.f))
	a.scq.one(t)
	e.f.clearViolations()

	// The record, then the register: a correct post.
	a.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	// A record per WQE and one register write for the batch, as a
	// program that rings once for a list of WQEs may.
	a.nop()
	a.ringRecord()
	a.nop()
	a.ring()
	e.run()
	require.Len(t, a.scq.drain(), 2)
	// Receive queues have a record only.
	b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("record only")))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	require.Equal(t, prm.CQERespSend, b.rcq.one(t).op)
	require.Empty(t, e.f.Violations())
}

// TestStrictDoorbellAfterReset: after RESET a QP's producer index starts
// at 0 again, and a program that starts its register's buffer toggle
// again writes the very bytes of its first post before the reset: the
// register looks unchanged, but it names the WQE that ends at the record,
// and that is a doorbell. A record moved alone after the reset is still
// reported.
func TestStrictDoorbellAfterReset(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	a, b := e.rcPair(qpOpts{})
	a.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	e.run()
	a.scq.one(t)
	for _, q := range []*testQP{a, b} {
		require.NoError(t, q.qp.Modify(ctx.QPAttr{State: ctx.QPStateReset}))
	}
	e.connectRC(a, b, 7, 1)
	a.pi, a.bfOff = 0, 0
	a.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	require.Empty(t, e.f.Violations(), "the same doorbell bytes as before the reset")

	a.nop()
	a.ringRecord()
	e.run()
	require.Equal(t, []ViolationKind{ViolationDoorbellRecordOnly}, violationKinds(e.f))
	a.scq.one(t)
}

// TestStrictDoorbellRecordOnlyBlueFlame: posts through the kit's
// blueflame package (a BlueFlame copy, an 8-byte doorbell, on a register
// of the QP's own and on the device's shared doorbell-only one) are not
// reported; a record-only post on the shared register is.
func TestStrictDoorbellRecordOnlyBlueFlame(t *testing.T) {
	for _, shared := range []bool{false, true} {
		opts := Options{}
		if shared {
			opts.BlueFlameRegisters = -1
		}
		e := newEnv(t, opts)
		e.allowViolations = true
		a, _ := e.rcPair(qpOpts{})
		require.Equal(t, shared, a.d.BlueFlameSize == 0)
		reg, err := blueflame.NewRegister(a.d.BlueFlame, a.d.BlueFlameSize)
		require.NoError(t, err)
		ring := a.d.SQ.Buf
		db, err := blueflame.NewSendDoorbell(reg, a.d.DBRec, ring, unsafe.Add(ring, a.d.SQ.WQECnt*prm.WQEBBSize))
		require.NoError(t, err)
		slot := func(i uint16) unsafe.Pointer {
			return unsafe.Add(ring, int(uint32(i)&(a.d.SQ.WQECnt-1))*prm.WQEBBSize)
		}
		for n := 0; n < 8; n++ {
			i := a.nop()
			if n%2 == 0 {
				db.Post(uint32(a.pi), slot(i), prm.WQEBBSize)
			} else {
				db.Ring(uint32(a.pi), slot(i))
			}
			e.run()
			require.Equal(t, prm.CQEReq, a.scq.one(t).op)
		}
		require.Empty(t, e.f.Violations(), "shared register: %v", shared)

		a.nop()
		a.ringRecord()
		e.run()
		require.Equal(t, []ViolationKind{ViolationDoorbellRecordOnly}, violationKinds(e.f), "shared register: %v", shared)
		a.scq.one(t)
	}
}

// TestStrictFatalDoorbellRecordOnly: StrictFatal holds back the WQEs a
// record announced alone, as a ConnectX leaves them in the ring, reports
// the violation, and executes them once the register is written.
func TestStrictFatalDoorbellRecordOnly(t *testing.T) {
	e := newEnv(t, Options{StrictFatal: true})
	e.allowViolations = true
	a, _ := e.rcPair(qpOpts{})
	i := a.nop()
	a.ringRecord()
	require.ErrorIs(t, e.f.RunUntilIdle(), ErrViolation)
	require.Equal(t, []ViolationKind{ViolationDoorbellRecordOnly}, violationKinds(e.f))
	require.Empty(t, a.scq.drain(), "the WQE waits for the register")
	e.f.clearViolations()
	require.NoError(t, e.f.RunUntilIdle(), "reported once")
	require.Empty(t, a.scq.drain())

	a.ringRegister()
	require.NoError(t, e.f.RunUntilIdle())
	x := a.scq.one(t)
	require.Equal(t, prm.CQEReq, x.op)
	require.Equal(t, i, x.counter)
	require.Empty(t, e.f.Violations())
}

// TestStrictDoorbellRecordOnlyEngine: in Engine mode the engine may read
// the record between a post's two stores, so a register written after the
// model saw the record (within doorbellGrace) is no violation; a record
// left alone is reported once the grace has passed.
func TestStrictDoorbellRecordOnlyEngine(t *testing.T) {
	e := newEnv(t, Options{Mode: Engine})
	e.allowViolations = true
	a, _ := e.rcPair(qpOpts{})
	violated := func() bool { return len(e.f.Violations()) > 0 }

	// The record alone: the engine executes the WQE (Strict) before the
	// register is written.
	a.nop()
	a.ringRecord()
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 10*time.Second).op)
	a.ringRegister()
	require.Never(t, violated, doorbellGrace+doorbellGrace/2, time.Millisecond, "the register came within the grace")

	a.nop()
	a.ringRecord()
	require.Equal(t, prm.CQEReq, waitCQE(t, a.scq, 10*time.Second).op)
	require.Eventually(t, violated, 10*time.Second, time.Millisecond)
	require.Equal(t, []ViolationKind{ViolationDoorbellRecordOnly}, violationKinds(e.f))
}

// TestStrictDoorbellRecordOnlyAdopted: an adopted queue pair is checked
// against the register its creator named (simadopt.QPConfig.Register),
// until ForgetRegister; one created without a register is not checked.
func TestStrictDoorbellRecordOnlyAdopted(t *testing.T) {
	f := New(Options{Strict: true})
	defer f.Close()
	dev, err := f.openDevice("sim0")
	require.NoError(t, err)
	defer dev.Close()
	pd, err := dev.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := dev.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
	require.NoError(t, err)
	defer cq.Close()
	alloc := func(n int) *ctx.Buffer {
		b, err := ctx.AllocBuffer(n, ctx.BufferOptions{})
		require.NoError(t, err)
		t.Cleanup(func() { _ = b.Close() })
		return b
	}
	// A UAR page of the caller's: the register at 0x800, two buffers of
	// 256 bytes.
	uar := alloc(4096)
	reg := unsafe.Add(uar.Pointer(), 0x800)
	adopt := func(withRegister bool) (provider.QueuePair, *testQP) {
		const sqCnt = 16
		ring, db := alloc(sqCnt*prm.WQEBBSize), alloc(64)
		cfg := simadopt.QPConfig{Type: ctx.QPTypeUD, SendCQ: cq, RecvCQ: cq,
			Caps: ctx.QueuePairCaps{SendDepth: sqCnt, MaxSendSGE: 1},
			SQ:   ring.Pointer(), SQCount: sqCnt, DBRec: db.Pointer()}
		if withRegister {
			cfg.Register, cfg.RegisterSize = reg, 256
		}
		q, err := adoptQueuePair(pd, cfg)
		require.NoError(t, err)
		t.Cleanup(func() { _ = q.Close() })
		for _, st := range []ctx.QPState{ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS} {
			require.NoError(t, q.Modify(ctx.QPAttr{State: st, Port: 1, QKey: 1}))
		}
		d := q.Descriptor()
		// The caller rings its own register, not the model's.
		d.BlueFlame, d.BlueFlameSize = reg, 256
		return q, &testQP{d: d}
	}
	scq := &testCQ{d: cq.Descriptor()}
	nop := func(q *testQP) {
		// A UD WQE carries an address vector, a NOP's too.
		w := ctrlSeg(prm.OpNop, 0, q.pi, q.d.QPN, 4, prm.FlagCQUpdate, 0)
		q.write(append(w, make([]byte, prm.AVSize)...))
	}
	run := func() {
		require.NoError(t, f.RunUntilIdle())
		require.Len(t, scq.drain(), 1, "the NOP ran")
	}

	q, tq := adopt(true)
	nop(tq)
	tq.ring()
	run()
	require.Empty(t, f.Violations(), "the record, then the caller's register")
	nop(tq)
	tq.ringRecord()
	run()
	require.Equal(t, []ViolationKind{ViolationDoorbellRecordOnly}, violationKinds(f))
	f.clearViolations()

	simadopt.ForgetRegister(q)
	nop(tq)
	tq.ringRecord()
	run()
	require.Empty(t, f.Violations(), "the register is no longer watched")

	_, tq = adopt(false)
	nop(tq)
	tq.ringRecord()
	run()
	require.Empty(t, f.Violations(), "no register named: not checked")
}
