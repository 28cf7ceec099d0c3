package wqebuilder_test

import (
	"bytes"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// overlong are byte counts with bit 31 set: the inline flag of a data
// segment's byte count.
var overlong = []uint32{1 << 31, 1<<31 + 1, 1<<31 + 4096, 0xffffffff}

// TestSGETooLongIsRefused: an SGE of 2^31 bytes or more would set bit 31 of
// the data segment's byte count, which the device reads as an inline
// segment. Every data-segment stage refuses it with ErrSGETooLong: nothing
// of it, nor of anything added after it, reaches the ring, the producer
// index stays and FinishBlueFlame rings nothing.
func TestSGETooLongIsRefused(t *testing.T) {
	f := newFixture(t, defaultOpts())
	q := f.q
	av := addrvec.Address{DLID: 5}.AV()
	type stage interface{ FinishBlueFlame() error }
	cases := []struct {
		name string
		op   prm.Opcode
		// build begins a WQE with one good SGE, adds the bad one and
		// then more; mid is called right after the good one.
		build func(n uint32, mid func()) stage
	}{
		{"SEND", prm.OpSend, func(n uint32, mid func()) stage {
			d := q.Begin(1, wqebuilder.Signaled).Send().SGE(0x1000, 8, 7)
			mid()
			return d.SGE(0x2000, n, 7).SGE(0x3000, 8, 7)
		}},
		{"RDMA_WRITE", prm.OpRdmaWrite, func(n uint32, mid func()) stage {
			d := q.Begin(1, 0).RdmaWrite(0x9000, 3).SGE(0x1000, 8, 7)
			mid()
			return d.SGE(0x2000, n, 7).Inline([]byte("after the error"))
		}},
		{"RDMA_WRITE_IMM", prm.OpRdmaWriteImm, func(n uint32, mid func()) stage {
			d := q.Begin(1, 0).RdmaWriteImm(0x9000, 3, 4)
			mid()
			return d.SGE(0x2000, n, 7)
		}},
		{"RDMA_READ", prm.OpRdmaRead, func(n uint32, mid func()) stage {
			r := q.Begin(1, 0).RdmaRead(0x9000, 3).SGE(0x1000, 8, 7)
			mid()
			return r.SGE(0x2000, n, 7).SGE(0x3000, 8, 7)
		}},
		{"DC_SEND", prm.OpSend, func(n uint32, mid func()) stage {
			d := q.Begin(1, 0).DC(&av, 0x99, 0xdc).Send().SGE(0x1000, 8, 7)
			mid()
			return d.SGE(0x2000, n, 7)
		}},
		{"UD_SEND_IMM", prm.OpSendImm, func(n uint32, mid func()) stage {
			d := q.Begin(1, 0).UD(&av, 0x77, 0x1111).SendImm(9)
			mid()
			return d.SGE(0x2000, n, 7).SGE(0x3000, 8, 7)
		}},
	}
	for _, c := range cases {
		for _, n := range overlong {
			pi := q.ProducerIndex()
			dbrec := append([]byte(nil), f.dbrec...)
			bf := append([]byte(nil), f.bf...)
			var mid []byte
			err := c.build(n, func() { mid = f.snapshot() }).FinishBlueFlame()
			requirePostError(t, err, wqebuilder.ErrSGETooLong, c.op)
			require.True(t, bytes.Equal(mid, f.ring), "%s %#x: written after the refused SGE", c.name, n)
			require.Equal(t, pi, q.ProducerIndex(), c.name)
			require.Equal(t, dbrec, f.dbrec, "%s: a refused WQE must not ring", c.name)
			require.Equal(t, bf, f.bf, c.name)
			require.False(t, q.Pending(), c.name)
		}
	}

	// The longest SGE is accepted and written as it is; zero still adds
	// nothing (to the device a zero byte count would mean 2 GiB).
	pi := q.ProducerIndex()
	require.NoError(t, q.Begin(1, 0).RdmaWrite(0x9000, 3).SGE(0x1000, 0, 7).SGE(0x2000, wqebuilder.MaxSGELength, 7).SGE(0x3000, 0, 7).Finish())
	wqe := f.ring[pi%64*prm.WQEBBSize:]
	require.Equal(t, uint32(3), binary.BigEndian.Uint32(wqe[prm.CtrlQPNDS:])&prm.CtrlDSMask, "ctrl, raddr, one data segment")
	seg := wqe[2*prm.SegmentSize:]
	require.Equal(t, uint32(wqebuilder.MaxSGELength), binary.BigEndian.Uint32(seg[prm.DataByteCount:]))
	require.Equal(t, uint64(0x2000), binary.BigEndian.Uint64(seg[prm.DataAddr:]))
	require.Equal(t, wqebuilder.MaxSGELength, 1<<31-1)
}

// TestSGETooLongPrecedence: a full queue is reported before an overlong
// SGE; an overlong SGE is reported in place of a data-segment limit met in
// the same WQE, before or after it; the error is made once per reason and
// opcode (a refused post allocates nothing after the first).
func TestSGETooLongPrecedence(t *testing.T) {
	f := newFixture(t, defaultOpts()) // max SGE 4
	q := f.q
	d := q.Begin(1, 0).Send().SGE(1, 1, 1).SGE(1, 1, 1).SGE(1, 1, 1).SGE(1, 1, 1).SGE(1, 1, 1)
	requirePostError(t, d.SGE(1, 1<<31, 1).Finish(), wqebuilder.ErrSGETooLong, prm.OpSend)
	d = q.Begin(1, 0).Send().SGE(1, 1<<31, 1)
	for range 8 {
		d = d.SGE(1, 1, 1)
	}
	requirePostError(t, d.Finish(), wqebuilder.ErrSGETooLong, prm.OpSend)
	// The limits still report their own errors.
	d = q.Begin(1, 0).Send().SGE(1, 1, 1).SGE(1, 1, 1).SGE(1, 1, 1).SGE(1, 1, 1).SGE(1, 1, 1)
	requirePostError(t, d.Finish(), wqebuilder.ErrTooManySGE, prm.OpSend)
	requirePostError(t, d.Inline([]byte{1}).Finish(), wqebuilder.ErrTooManySGE, prm.OpSend)

	require.Zero(t, testing.AllocsPerRun(100, func() {
		_ = q.Begin(1, 0).RdmaRead(2, 3).SGE(4, 1<<31, 5).Finish()
		_ = q.Begin(1, 0).Send().SGE(4, 0xffffffff, 5).FinishBlueFlame()
	}))

	for q.Free() >= f.cfg.MaxWQEBBs {
		require.NoError(t, q.Begin(0, 0).Nop().Finish())
	}
	requirePostError(t, q.Begin(1, 0).Send().SGE(1, 1<<31, 1).Finish(), wqebuilder.ErrQueueFull, prm.OpSend)
}
