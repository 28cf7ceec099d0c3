package wqebuilder

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestCompleteRefusesMiddleSlotAcross32Bits runs WQEs of two WQEBBs, whose
// second slots are never a WQE's first and so keep whatever they held, over
// the point where a 32-bit producer index would wrap: a counter naming such
// a slot is refused on every lap, and the real counters retire the WQEs.
func TestCompleteRefusesMiddleSlotAcross32Bits(t *testing.T) {
	mem, err := unix.Mmap(-1, 0, 3*4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	const cnt = 16
	q, err := New(Config{
		Buf: unsafe.Pointer(&mem[0]), WQECnt: cnt, QPN: 1,
		DBRec: unsafe.Pointer(&mem[4096]), BlueFlame: unsafe.Pointer(&mem[8192]), BlueFlameSize: 256,
		MaxSGE: 4,
	})
	require.NoError(t, err)
	for _, start := range []uint64{0, 1<<32 - 5*cnt} {
		q.pi, q.ci, q.rung = start, start, start
		for lap := 0; lap < 12; lap++ {
			var firsts []uint64
			for q.Free() >= 2*q.Config().MaxWQEBBs {
				firsts = append(firsts, q.pi)
				require.NoError(t, q.Begin(q.pi, Signaled).Send().SGE(1, 1, 1).SGE(2, 2, 2).SGE(3, 3, 3).SGE(4, 4, 4).Finish())
				require.Equal(t, firsts[len(firsts)-1]+2, q.pi, "two WQEBBs per WQE")
			}
			for _, f := range firsts {
				ci := q.ci
				for _, middle := range []uint64{f + 1, q.pi - 1} {
					_, ok := q.Complete(uint16(middle))
					require.False(t, ok, "counter %d (start %d, lap %d) is inside a WQE", middle, start, lap)
					require.Equal(t, ci, q.ci)
				}
				wrid, ok := q.Complete(uint16(f))
				require.True(t, ok)
				require.Equal(t, f, wrid)
				require.Equal(t, f+2, q.ci)
			}
		}
	}
}
