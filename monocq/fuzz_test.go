package monocq

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// The fuzz rings are exactly one page between two guard pages, so a read
// outside the ring faults.

func fuzzRing(t *testing.T, big bool) *ring {
	size := uint32(64)
	if big {
		size = 128
	}
	r := newRing(t, uint32(pageSize)/size, size)
	require.Equal(t, pageSize, len(r.buf))
	return r
}

// requireInRing fails unless b lies inside the ring.
func requireInRing(t *testing.T, r *ring, b []byte) {
	t.Helper()
	if len(b) == 0 {
		return
	}
	lo := uintptr(unsafe.Pointer(&r.buf[0]))
	p := uintptr(unsafe.Pointer(&b[0]))
	require.True(t, p >= lo && p+uintptr(len(b)) <= lo+uintptr(len(r.buf)), "slice outside the ring")
}

// FuzzCQEDecode puts arbitrary bytes in a slot and checks that every
// accessor of the CQE the poller hands out agrees with a plain big-endian
// reading of the same bytes.
func FuzzCQEDecode(f *testing.F) {
	seed := func(op uint8, big bool, mod func(b []byte)) {
		b := make([]byte, 128)
		for i := range b {
			b[i] = byte(i * 7)
		}
		mod(b)
		b[127] = op
		f.Add(b, big)
	}
	seed(0x00, false, func(b []byte) {})                                            // REQ
	seed(0x22, true, func(b []byte) {})                                             // RESP_SEND, solicited
	seed(0x24, false, func(b []byte) { binary.BigEndian.PutUint32(b[64+44:], 20) }) // scatter-32
	seed(0x28, true, func(b []byte) { binary.BigEndian.PutUint32(b[64+44:], 50) })  // scatter-64
	seed(0x28, false, func(b []byte) {})                                            // scatter-64, 64-byte ring
	seed(0xd0, false, func(b []byte) { b[64+55] = 0x99 })                           // REQ_ERR, unknown syndrome
	seed(0xe0, true, func(b []byte) { b[64+55] = 0x13 })                            // RESP_ERR
	seed(0x0c, false, func(b []byte) { binary.BigEndian.PutUint32(b[64+44:], 3) })  // compressed
	seed(0xf0, false, func(b []byte) {})                                            // INVALID
	f.Fuzz(func(t *testing.T, slot []byte, big bool) {
		r := fuzzRing(t, big)
		cq := r.newCQ(t)
		var b [128]byte
		copy(b[:], slot)
		copy(r.slotBytes(0), b[128-r.size:])
		r.cqe64(0)[prm.CQEOpOwn] &^= 1 // lap 0's owner bit

		be := binary.BigEndian
		want := r.cqe64(0)
		var n int
		cq.Poll(1000, func(c *CQE) {
			n++
			if unsafe.Pointer(c) != unsafe.Pointer(&want[0]) {
				return // a CQE expanded from a session that started in slot 0
			}
			requireInRing(t, r, c[:])
			op := want[63]
			require.Equal(t, prm.CQEOpcode(op>>4), c.Opcode())
			require.Equal(t, op&1, c.owner())
			require.Equal(t, op&2 != 0, c.Solicited())
			require.Equal(t, (op>>2)&3, c.Format())
			require.Equal(t, be.Uint32(want[56:])&0xffffff, c.QPN())
			require.Equal(t, prm.Opcode(want[56]), c.SendOpcode())
			require.Equal(t, be.Uint16(want[60:]), c.WQECounter())
			require.Equal(t, be.Uint32(want[44:]), c.ByteCount())
			require.Equal(t, be.Uint32(want[36:]), c.Immediate())
			require.Equal(t, be.Uint16(want[38:]), c.PKeyIndex())
			require.Equal(t, be.Uint32(want[24:])&0xffffff, c.SourceQP())
			require.Equal(t, want[24]&0xf, c.SL())
			require.Equal(t, want[24]&3, c.RoCEL3Type())
			require.Equal(t, (want[24]>>4)&3, c.grh())
			require.Equal(t, be.Uint16(want[22:]), c.SLID())
			require.Equal(t, want[17]&0x7f, c.PathBits())
			require.Equal(t, be.Uint32(want[32:])&0xffffff, c.SRQN())
			require.Equal(t, be.Uint64(want[48:]), c.Timestamp())
			require.Equal(t, be.Uint32(want[12:]), c.RxHash())
			require.Equal(t, prm.Syndrome(want[55]), c.Syndrome())
			require.Equal(t, want[54], c.VendorSyndrome())
			isErr := op>>4 == 13 || op>>4 == 14
			require.Equal(t, isErr, c.IsError())
			require.Equal(t, isErr, c.Err() != nil)
			data := c.ScatterData()
			requireInRing(t, r, data)
			switch (op >> 2) & 3 {
			case prm.CQEFormatScatter32:
				require.Equal(t, want[:min(be.Uint32(want[44:]), 32)], data)
			case prm.CQEFormatScatter64:
				require.True(t, big)
				require.Equal(t, r.firstHalf(0)[:min(be.Uint32(want[44:]), 64)], data)
			default:
				require.Nil(t, data)
			}
		})
		require.LessOrEqual(t, n, int(r.cnt))
	})
}

// FuzzRing fills a whole ring with arbitrary bytes and polls it with
// arbitrary batch sizes from an arbitrary consumer index: the poller must not
// panic, read outside the ring, or hand out anything that is not a software
// owned ordinary CQE inside the device's window.
func FuzzRing(f *testing.F) {
	f.Add([]byte{0x00, 0x01, 0x0c}, false, uint32(0), []byte{4, 64, 1})
	f.Add([]byte{0x0c, 0x00, 0x00, 0x00, 0x05}, true, uint32(31), []byte{200})
	f.Add([]byte{0x28, 0x24, 0xd0}, false, uint32(1<<24-3), []byte{8, 8})
	f.Fuzz(func(t *testing.T, content []byte, big bool, start uint32, batches []byte) {
		if len(content) == 0 {
			return
		}
		r := fuzzRing(t, big)
		for i := range r.buf {
			r.buf[i] = content[i%len(content)] ^ byte(i/len(content))
		}
		cq := r.newCQ(t)
		cq.startAt(start)
		if len(batches) > 8 {
			batches = batches[:8]
		}
		for _, max := range batches {
			before := cq.ConsumerIndex()
			i := before
			n := cq.Poll(int(max), func(c *CQE) {
				defer func() { i++ }()
				requireInRing(t, r, c[:])
				require.Equal(t, unsafe.Pointer(&r.cqe64(i)[0]), unsafe.Pointer(c))
				require.NotEqual(t, prm.CQEInvalid, c.Opcode())
				require.Equal(t, uint8(i/r.cnt)&1, c.owner())
				require.NotEqual(t, uint8(prm.CQEFormatCompressed), c.Format())
				requireInRing(t, r, c.ScatterData())
				_ = c.Err()
			})
			require.LessOrEqual(t, n, int(max))
			require.LessOrEqual(t, n, int(r.cnt))
			require.Equal(t, before+uint32(n), cq.ConsumerIndex())
		}
	})
}

// FuzzCompressedSession builds a well-formed session from arbitrary title
// and mini-CQE bytes and checks the expansion byte for byte against the
// layout rules, written here independently of the poller.
func FuzzCompressedSession(f *testing.F) {
	f.Add(make([]byte, 64), make([]byte, 16), uint8(2), true, uint8(0), false)
	f.Add(make([]byte, 64), []byte{1, 2, 3, 4, 5, 6, 7, 8, 9}, uint8(17), false, uint8(60), true)
	f.Add([]byte{0xff}, []byte{0xaa, 0x55}, uint8(64), true, uint8(200), false)
	f.Fuzz(func(t *testing.T, titleBytes, miniBytes []byte, count uint8, requester bool, start uint8, big bool) {
		r := fuzzRing(t, big)
		n := 2 + uint32(count)%(r.cnt-1) // 2 .. cnt
		cq := r.newCQ(t)
		cq.startAt(uint32(start))
		r.pi = uint32(start)

		var title [64]byte
		copy(title[:], titleBytes)
		op := title[63] & 0x02 // keep the solicited bit from the input
		if requester {
			op |= uint8(prm.CQEReq) << 4
		} else {
			op |= uint8(prm.CQERespWrImm+prm.CQEOpcode(title[0]%4)) << 4
		}
		minis := make([]mini, n)
		for i := range minis {
			for j := range minis[i] {
				if len(miniBytes) > 0 {
					minis[i][j] = miniBytes[(int(i)*8+j)%len(miniBytes)] + byte(i)
				}
			}
		}
		// Write the session: arrays, then the title with op_own last.
		for k := uint32(0); 8*k < n; k++ {
			at := 8 * k
			if k == 0 {
				at = 1
			}
			for j := uint32(0); j < 8 && 8*k+j < n; j++ {
				copy(r.cqe64(r.pi + at)[8*j:], minis[8*k+j][:])
			}
		}
		binary.BigEndian.PutUint32(title[44:], n)
		title[63] = op | 3<<2 | uint8(r.pi/r.cnt)&1
		copy(r.cqe64(r.pi), title[:])

		var got uint32
		cq.Poll(int(r.cnt), func(c *CQE) {
			i := got
			m := minis[i]
			want := title
			copy(want[44:48], m[4:8])
			if requester {
				copy(want[60:62], m[0:2])
				want[56] = m[2]
			} else {
				binary.BigEndian.PutUint16(want[60:], binary.BigEndian.Uint16(title[60:])+uint16(i))
				copy(want[12:16], m[0:4])
			}
			want[63] = op | uint8((uint32(start)+i)/r.cnt)&1
			require.Equal(t, want[:], c[:], "CQE %d of %d", i, n)
			got++
		})
		require.Equal(t, n, got)
		if n < r.cnt {
			require.NoError(t, cq.Err())
		}
	})
}
