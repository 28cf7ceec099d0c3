package wqebuilder_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// requirePostError checks a Finish error: the sentinel, the *PostError with
// the opcode and the QPN, and the message naming them.
func requirePostError(t *testing.T, err, sentinel error, op prm.Opcode) {
	t.Helper()
	require.ErrorIs(t, err, sentinel)
	var pe *wqebuilder.PostError
	require.True(t, errors.As(err, &pe))
	require.Equal(t, op, pe.Opcode)
	require.Equal(t, "wqebuilder", pe.Transport)
	require.Equal(t, fmt.Sprintf("wqebuilder: post %v on QP %#x: %v", op, pe.QPN, sentinel), err.Error())
}

// unchangedOutside requires that the ring bytes outside the WQEBBs
// [pi, pi+n) are as in before.
func unchangedOutside(t *testing.T, f *fixture, before []byte, pi, n uint32) {
	t.Helper()
	cnt := uint32(len(f.ring) / prm.WQEBBSize)
	for i := range cnt {
		if (i-pi%cnt+cnt)%cnt < n {
			continue
		}
		require.True(t, bytes.Equal(before[i*64:(i+1)*64], f.ring[i*64:(i+1)*64]), "WQEBB %d changed", i)
	}
}

// TestQueueFull fills the queue, then tries every opcode on every transport
// with payloads: each fails with ErrQueueFull and the ring, the indexes and
// the doorbell stay untouched.
func TestQueueFull(t *testing.T) {
	f := newFixture(t, defaultOpts())
	q := f.q
	n := 0
	for q.Free() >= f.cfg.MaxWQEBBs {
		require.NoError(t, q.Begin(uint64(n), 0).RdmaWrite(1, 2).SGE(3, 4, 5).Finish())
		n++
	}
	require.Equal(t, int(64-f.cfg.MaxWQEBBs+1), n)
	q.RingDoorbell()
	ring := f.snapshot()
	dbrec := append([]byte(nil), f.dbrec...)
	bf := append([]byte(nil), f.bf...)
	pi := q.ProducerIndex()
	r := rand.New(rand.NewPCG(1, 1))
	for _, op := range allOps {
		for _, tr := range transportsFor(op) {
			for _, bfPost := range []bool{false, true} {
				req := randomRequest(r, tr, op, 4, 220, int(f.cfg.MaxWQEBBs*4))
				err := req.build(q, bfPost)
				requirePostError(t, err, wqebuilder.ErrQueueFull, opcodes[op].op)
				require.True(t, bytes.Equal(ring, f.ring), "%s %s wrote to the ring", tr, op)
				require.Equal(t, pi, q.ProducerIndex())
				require.Equal(t, dbrec, f.dbrec)
				require.Equal(t, bf, f.bf)
			}
		}
	}
	// Retiring makes room again.
	_, ok := q.Complete(0)
	require.True(t, ok)
	require.NoError(t, q.Begin(0, 0).Nop().Finish())
}

// TestQueueFullExactly: the ring is exactly full (pi - ci == WQECnt) and a
// failed Begin must not touch the oldest WQE's bookkeeping.
func TestQueueFullExactly(t *testing.T) {
	o := defaultOpts()
	o.wqeCnt = 8
	o.maxWQEBBs = 2
	f := newFixture(t, o)
	q := f.q
	for range 4 {
		require.NoError(t, q.Begin(77, 0).Send().SGE(1, 1, 1).SGE(2, 2, 2).SGE(3, 3, 3).SGE(4, 4, 4).Finish())
	}
	require.Zero(t, q.Free())
	err := q.Begin(88, wqebuilder.Signaled).Send().Finish()
	requirePostError(t, err, wqebuilder.ErrQueueFull, prm.OpSend)
	wrid, ok := q.Complete(0)
	require.True(t, ok)
	require.Equal(t, uint64(77), wrid)
}

func TestInlineTooLong(t *testing.T) {
	f := newFixture(t, defaultOpts()) // max inline 220
	q := f.q
	for _, pieces := range [][]int{{221}, {100, 100, 21}, {220, 1}} {
		before := f.snapshot()
		pi := q.ProducerIndex()
		in := q.Begin(1, 0).Send().Inline(make([]byte, pieces[0]))
		for _, n := range pieces[1:] {
			in = in.Inline(bytes.Repeat([]byte{0x5a}, n))
		}
		requirePostError(t, in.Finish(), wqebuilder.ErrInlineTooLong, prm.OpSend)
		require.Equal(t, pi, q.ProducerIndex())
		unchangedOutside(t, f, before, pi, f.cfg.MaxWQEBBs)
	}
	// Exactly the maximum works, in pieces too.
	require.NoError(t, q.Begin(1, 0).SendImm(5).Inline(make([]byte, 200)).Inline(make([]byte, 20)).Finish())
	// With a remote address, the same limit applies.
	err := q.Begin(1, 0).RdmaWrite(1, 2).Inline(make([]byte, 300)).FinishBlueFlame()
	requirePostError(t, err, wqebuilder.ErrInlineTooLong, prm.OpRdmaWrite)
	require.Equal(t, make([]byte, 8), f.dbrec, "a failed FinishBlueFlame must not ring")
}

func TestTooManySGE(t *testing.T) {
	f := newFixture(t, defaultOpts()) // max SGE 4
	q := f.q
	before := f.snapshot()
	pi := q.ProducerIndex()
	d := q.Begin(1, 0).RdmaWriteImm(1, 2, 3)
	for i := range 5 {
		d = d.SGE(uint64(i), 8, 9)
	}
	requirePostError(t, d.Finish(), wqebuilder.ErrTooManySGE, prm.OpRdmaWriteImm)
	require.Equal(t, pi, q.ProducerIndex())
	unchangedOutside(t, f, before, pi, f.cfg.MaxWQEBBs)

	// Zero-length entries do not count.
	d = q.Begin(1, 0).Send()
	for i := range 8 {
		d = d.SGE(uint64(i), uint32(i%2*8), 9)
	}
	require.NoError(t, d.Finish())

	// The error is sticky: inline data after it writes nothing and the
	// error stays.
	pi = q.ProducerIndex()
	before = f.snapshot()
	s := q.Begin(1, 0).Send().SGE(1, 1, 1).SGE(1, 1, 1).SGE(1, 1, 1).SGE(1, 1, 1)
	mid := f.snapshot()
	err := s.SGE(1, 1, 1).Inline([]byte("after the error")).Finish()
	requirePostError(t, err, wqebuilder.ErrTooManySGE, prm.OpSend)
	require.True(t, bytes.Equal(mid, f.ring), "nothing may be written after the error")
	unchangedOutside(t, f, before, pi, f.cfg.MaxWQEBBs)

	// Reads have the same limit.
	r := q.Begin(1, 0).RdmaRead(1, 2)
	for range 5 {
		r = r.SGE(1, 1, 1)
	}
	requirePostError(t, r.Finish(), wqebuilder.ErrTooManySGE, prm.OpRdmaRead)
}

func TestWQETooLarge(t *testing.T) {
	o := defaultOpts()
	o.maxSGE = 30
	o.maxInline = 500
	o.maxWQEBBs = 2 // 8 segments
	f := newFixture(t, o)
	q := f.q
	av := addrvec.Address{DLID: 5}.AV()

	// RC write: ctrl + raddr + 6 SGEs = 8 segments fit, a 7th does not.
	d := q.Begin(1, 0).RdmaWrite(1, 2)
	for range 6 {
		d = d.SGE(1, 1, 1)
	}
	require.NoError(t, d.Finish())
	before := f.snapshot()
	pi := q.ProducerIndex()
	d = q.Begin(1, 0).RdmaWrite(1, 2)
	for range 7 {
		d = d.SGE(1, 1, 1)
	}
	requirePostError(t, d.Finish(), wqebuilder.ErrWQETooLarge, prm.OpRdmaWrite)
	require.Equal(t, pi, q.ProducerIndex())
	unchangedOutside(t, f, before, pi, 2)

	// DC send: ctrl + AV + 4 SGEs fit, the 5th does not.
	s := q.Begin(1, 0).DC(&av, 3, 4).Send()
	for range 5 {
		s = s.SGE(1, 1, 1)
	}
	requirePostError(t, s.Finish(), wqebuilder.ErrWQETooLarge, prm.OpSend)

	// Inline: 8 - 2 = 6 segments hold 92 bytes, not 93.
	require.NoError(t, q.Begin(1, 0).RdmaWrite(1, 2).Inline(make([]byte, 92)).Finish())
	requirePostError(t, q.Begin(1, 0).RdmaWrite(1, 2).Inline(make([]byte, 90)).Inline(make([]byte, 3)).Finish(),
		wqebuilder.ErrWQETooLarge, prm.OpRdmaWrite)
	requirePostError(t, q.Begin(1, 0).UD(&av, 1, 2).Send().SGE(1, 1, 1).Inline(make([]byte, 60)).Finish(),
		wqebuilder.ErrWQETooLarge, prm.OpSend)

	// Every fixed-size WQE fits 2 WQEBBs, the largest being a DC masked
	// compare-and-swap: ctrl + AV + raddr + 2 + data = 8 segments.
	pi = q.ProducerIndex()
	require.NoError(t, q.Begin(1, 0).DC(&av, 3, 4).MaskedCS64(1, 2, 3, 4, 5, 6).Result(7, 8).Finish())
	require.Equal(t, pi+2, q.ProducerIndex())
}

func TestErrorKeepsQueueUsable(t *testing.T) {
	f := newFixture(t, defaultOpts())
	q := f.q
	model := f.snapshot()
	r := rand.New(rand.NewPCG(3, 3))
	for i := range 200 {
		if q.Free() < f.cfg.MaxWQEBBs {
			retireAll(t, q)
		}
		if i%3 == 0 {
			// A failing WQE: its bytes stay in its own WQEBBs, which the
			// next WQE takes over; the model is rebuilt from the ring
			// there.
			pi := q.ProducerIndex()
			err := q.Begin(1, 0).Send().SGE(1, 1, 1).SGE(1, 1, 1).SGE(1, 1, 1).SGE(1, 1, 1).SGE(1, 1, 1).Finish()
			require.ErrorIs(t, err, wqebuilder.ErrTooManySGE)
			unchangedOutside(t, f, model, pi, f.cfg.MaxWQEBBs)
			model = f.snapshot()
			continue
		}
		req := randomRequest(r, rc, allOps[r.IntN(len(allOps))], 4, 220, int(f.cfg.MaxWQEBBs*4))
		f.postAndCheck(t, model, req, false)
	}
}

func TestNewRejects(t *testing.T) {
	f := newFixture(t, defaultOpts())
	good := f.cfg
	good.MaxWQEBBs = 0
	_, err := wqebuilder.New(good)
	require.NoError(t, err)
	for name, mod := range map[string]func(c *wqebuilder.Config){
		"nil ring":          func(c *wqebuilder.Config) { c.Buf = nil },
		"unaligned ring":    func(c *wqebuilder.Config) { c.Buf = unsafe.Add(c.Buf, 16) },
		"count not pow2":    func(c *wqebuilder.Config) { c.WQECnt = 48 },
		"count 1":           func(c *wqebuilder.Config) { c.WQECnt = 1 },
		"count too big":     func(c *wqebuilder.Config) { c.WQECnt = 1 << 17 },
		"qpn 25 bits":       func(c *wqebuilder.Config) { c.QPN = 1 << 24 },
		"nil dbrec":         func(c *wqebuilder.Config) { c.DBRec = nil },
		"unaligned dbrec":   func(c *wqebuilder.Config) { c.DBRec = unsafe.Add(c.DBRec, 2) },
		"nil register":      func(c *wqebuilder.Config) { c.BlueFlame = nil },
		"bf size 100":       func(c *wqebuilder.Config) { c.BlueFlameSize = 100 },
		"max sge 64":        func(c *wqebuilder.Config) { c.MaxSGE = 64 },
		"max inline 2000":   func(c *wqebuilder.Config) { c.MaxInline = 2000 },
		"max wqebbs 1":      func(c *wqebuilder.Config) { c.MaxWQEBBs = 1 },
		"max wqebbs 17":     func(c *wqebuilder.Config) { c.MaxWQEBBs = 17 },
		"wqebbs above ring": func(c *wqebuilder.Config) { c.WQECnt = 2; c.MaxWQEBBs = 4 },
		"default too big":   func(c *wqebuilder.Config) { c.WQECnt = 4; c.MaxSGE = 30 },
	} {
		c := good
		mod(&c)
		_, err := wqebuilder.New(c)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
		require.True(t, strings.HasPrefix(err.Error(), "wqebuilder: new send queue: "), err.Error())
	}
}

// TestNewRejectsRegisterWrapsCause checks that a register New refuses is
// reported with blueflame's sentinel as well as ErrInvalidArgument.
func TestNewRejectsRegisterWrapsCause(t *testing.T) {
	f := newFixture(t, defaultOpts())
	for name, mod := range map[string]func(c *wqebuilder.Config){
		"nil register": func(c *wqebuilder.Config) { c.BlueFlame = nil },
		"bf size 100":  func(c *wqebuilder.Config) { c.BlueFlameSize = 100 },
	} {
		c := f.cfg
		mod(&c)
		_, err := wqebuilder.New(c)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, name)
		require.ErrorIs(t, err, blueflame.ErrBadRegister, name)
	}
}

func TestDefaultMaxWQEBBs(t *testing.T) {
	for _, c := range []struct{ sge, inline, want uint32 }{
		{0, 0, 2},     // 5 + 3 = 8 segments
		{1, 0, 2},     // 5 + 3
		{3, 0, 2},     // 5 + 3
		{4, 0, 3},     // 9
		{1, 60, 3},    // inline 60: 4 segments → 9
		{16, 0, 6},    // 21
		{2, 220, 5},   // 5 + 14 = 19
		{64, 0, 16},   // capped at 63 segments
		{0, 1000, 16}, // capped
	} {
		require.Equal(t, c.want, wqebuilder.DefaultMaxWQEBBs(c.sge, c.inline), "%+v", c)
	}
}

// TestFinishTwiceIsRefused finishes a stage and a copy of it: the second
// Finish (and a stage begun before another WQE was finished) returns
// ErrStaleStage and neither the producer index nor the ring moves.
func TestFinishTwiceIsRefused(t *testing.T) {
	f := newFixture(t, defaultOpts())
	q := f.q
	st := q.Begin(1, wqebuilder.Signaled).RdmaWrite(0x1000, 7).SGE(0x2000, 8, 9)
	again := st
	require.NoError(t, st.Finish())
	pi := q.ProducerIndex()
	ring := f.snapshot()
	err := again.Finish()
	require.ErrorIs(t, err, wqebuilder.ErrStaleStage)
	require.Equal(t, pi, q.ProducerIndex())
	require.Equal(t, ring, f.snapshot())

	// Two stages begun on the same index: the first to finish wins.
	a := q.Begin(2, 0).Send().SGE(0x3000, 4, 9)
	b := q.Begin(3, 0).Send().SGE(0x4000, 4, 9)
	require.NoError(t, b.Finish())
	require.ErrorIs(t, a.Finish(), wqebuilder.ErrStaleStage)
	require.Equal(t, pi+1, q.ProducerIndex())
	_, ok := q.Complete(uint16(pi - 1))
	require.True(t, ok)
	wrid, ok := q.Complete(uint16(pi))
	require.True(t, ok)
	require.Equal(t, uint64(3), wrid, "the WQE finished records its own Begin's wrid")
}

// A queue's errors name its owner (Config.Transport) and QPN; a queue with a
// Refusal fails every WQE begun while it is full with Refusal's error
// instead of ErrQueueFull, and other errors are unchanged. A refusal met
// again allocates nothing.
func TestPostErrorNamesOwnerAndRefusal(t *testing.T) {
	f := newFixture(t, defaultOpts())
	cfg := f.cfg
	cfg.Transport = "rc"
	cfg.QPN = 0x11c
	q, err := wqebuilder.New(cfg)
	require.NoError(t, err)
	err = q.Begin(1, 0).Send().Inline(make([]byte, 300)).Finish()
	require.ErrorIs(t, err, wqebuilder.ErrInlineTooLong)
	require.EqualError(t, err, "rc: post SEND on QP 0x11c: inline data longer than max inline")
	st := q.Begin(2, 0).Nop()
	require.NoError(t, st.Finish())
	err = st.Finish()
	require.ErrorIs(t, err, wqebuilder.ErrStaleStage)
	require.EqualError(t, err, "rc: post NOP on QP 0x11c: stage finished twice or out of order")

	why := errors.New("queue pair not connected")
	cfg.Refusal = func() error { return why }
	q, err = wqebuilder.New(cfg)
	require.NoError(t, err)
	for q.Free() >= cfg.MaxWQEBBs {
		require.NoError(t, q.Begin(0, 0).Nop().Finish())
	}
	pi := q.ProducerIndex()
	require.Same(t, why, q.Begin(3, 0).RdmaWrite(1, 2).SGE(3, 4, 5).Finish())
	require.Same(t, why, q.Begin(3, 0).Send().Inline(make([]byte, 300)).FinishBlueFlame(), "the refusal comes first")
	require.Equal(t, pi, q.ProducerIndex())

	// Errors are made once per queue, error and opcode.
	f.q.Begin(1, 0).Send().Inline(make([]byte, 300)).Finish()
	require.Zero(t, testing.AllocsPerRun(100, func() {
		_ = f.q.Begin(1, 0).Send().Inline(make([]byte, 300)).Finish()
		_ = q.Begin(3, 0).Nop().Finish()
	}))
}

// A remote QPN or DCT number wider than the 24 bits of the address
// vector's destination word keeps its low 24 bits: the high ones never
// reach the word's flags byte, which holds only the extended-AV bit.
func TestWideRemoteNumberMasked(t *testing.T) {
	f := newFixture(t, defaultOpts())
	var av [48]byte
	require.NoError(t, f.q.Begin(1, 0).UD(&av, 0x7f000001, 0x11).Send().Finish())
	require.Equal(t, []byte{0x80, 0, 0, 1}, f.ring[24:28], "UD: the destination word")
	at := int(f.q.ProducerIndex()) * 64
	require.NoError(t, f.q.Begin(2, 0).DCStream(&av, 0xff123456, 7, 3).RdmaWrite(0x1000, 5).Finish())
	require.Equal(t, []byte{0x80, 0x12, 0x34, 0x56}, f.ring[at+24:at+28], "DC: the destination word")
}

// Begin writes only the fm_ce_se bits of its flag constants: the others
// of a Flags value (the CQE-on-error half of ce, bit 4, bit 0) are
// dropped, as its doc says.
func TestFlagsOutsideConstantsDropped(t *testing.T) {
	f := newFixture(t, defaultOpts())
	require.NoError(t, f.q.Begin(1, wqebuilder.Flags(0xff)).Nop().Finish())
	all := wqebuilder.Signaled | wqebuilder.Solicited | wqebuilder.Flags(prm.FlagFenceMask)
	require.Equal(t, byte(all), f.ring[11], "fm_ce_se")
	require.Equal(t, byte(0xea), f.ring[11])
}
