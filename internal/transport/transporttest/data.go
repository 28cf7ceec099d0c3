package transporttest

import (
	"bytes"
	"encoding/binary"
	"math/bits"
	"math/rand/v2"

	"github.com/stretchr/testify/require"
)

// Fill writes n pseudo-random bytes (from seed) at off of buffer i and
// returns a copy of them.
func (e *Env) Fill(i, off, n int, seed uint64) []byte {
	b := e.Mem(i, off, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for k := range b {
		b[k] = byte(r.Uint32())
	}
	return append([]byte(nil), b...)
}

// Guard is the number of bytes around a destination that Expect checks
// are left alone.
const Guard = 64

// Poison fills the destination [off-Guard, off+n+Guard) of buffer i with a
// pattern no payload uses, so that Expect can see what was written.
func (e *Env) Poison(i, off, n int) {
	lo := max(off-Guard, 0)
	b := e.Mem(i, lo, off+n+Guard-lo)
	for k := range b {
		b[k] = 0xa5
	}
}

// Expect requires that buffer i holds want at off and that the Guard bytes
// on each side still hold the Poison pattern.
func (e *Env) Expect(i, off int, want []byte, what string) {
	e.T.Helper()
	e.expect(i, off, want, what, true)
}

// expect is Expect with the guard before the destination checked only
// when before is set.
func (e *Env) expect(i, off int, want []byte, what string, before bool) {
	e.T.Helper()
	got := e.Mem(i, off, len(want))
	if !bytes.Equal(got, want) {
		k := 0
		for k < len(want) && got[k] == want[k] {
			k++
		}
		require.Failf(e.T, "payload differs", "%s: %d bytes, first difference at byte %d", what, len(want), k)
	}
	lo := max(off-Guard, 0)
	if !before {
		lo = off
	}
	for k, b := range e.Mem(i, lo, off-lo) {
		if b != 0xa5 {
			require.Failf(e.T, "write before the destination", "%s: byte %d before the destination changed", what, off-lo-k)
		}
	}
	for k, b := range e.Mem(i, off+len(want), Guard) {
		if b != 0xa5 {
			require.Failf(e.T, "write after the destination", "%s: byte %d after the destination changed", what, k)
		}
	}
}

// Atomic is a reference model of the four atomics, written from the PRM's
// description, independent of the software HCA. It works on values; the
// byte order of the word in memory is LoadWord's and StoreWord's.
type Atomic struct {
	Masked  bool
	Size    int // 8, or 4 for a masked atomic on 32 bits
	CS      bool
	Compare uint64
	Swap    uint64 // swap value, or the addend of a fetch-and-add
	CmpMask uint64 // masked compare-and-swap
	SwpMask uint64 // masked compare-and-swap: bits swapped; masked fetch-and-add: field boundaries
}

// Apply returns the new value of the target and the value the requester
// receives (the old one).
func (a Atomic) Apply(old uint64) (next, result uint64) {
	width := uint(a.Size * 8)
	mask := ^uint64(0) >> (64 - width)
	old &= mask
	switch {
	case a.CS && !a.Masked:
		next = old
		if old == a.Compare {
			next = a.Swap
		}
	case !a.CS && !a.Masked:
		next = old + a.Swap
	case a.CS:
		next = old
		if old&a.CmpMask == a.Compare&a.CmpMask {
			next = old&^a.SwpMask | a.Swap&a.SwpMask
		}
	default:
		// Field-wise addition: a carry does not leave a field whose last
		// bit is set in the boundary mask.
		next = 0
		carry := uint64(0)
		for b := uint(0); b < width; b++ {
			s := old>>b&1 + a.Swap>>b&1 + carry
			next |= s & 1 << b
			carry = s >> 1
			if a.SwpMask>>b&1 == 1 {
				carry = 0
			}
		}
	}
	return next & mask, old
}

// LoadWord reads the word an atomic of size bytes works on from b: 8 bytes
// (the standard atomics, the masked ones on 8 bytes) in host byte order, as
// a ConnectX keeps them in the mode mlx5_core sets (the mode in which
// mlx5_ib reports IBV_ATOMIC_HCA), or 4 bytes (a masked atomic on 32 bits)
// big-endian. The old value an atomic returns is in the same order.
func LoadWord(b []byte, size int) uint64 {
	if size == 4 {
		return uint64(binary.BigEndian.Uint32(b))
	}
	return binary.NativeEndian.Uint64(b[:8])
}

// StoreWord writes v to b as LoadWord reads it.
func StoreWord(b []byte, size int, v uint64) {
	if size == 4 {
		binary.BigEndian.PutUint32(b, uint32(v))
		return
	}
	binary.NativeEndian.PutUint64(b[:8], v)
}

// Load reads the atomic word of size bytes at off of buffer i (LoadWord).
func (e *Env) Load(i, off, size int) uint64 { return LoadWord(e.Mem(i, off, size), size) }

// Store writes the atomic word of size bytes at off of buffer i
// (StoreWord).
func (e *Env) Store(i, off, size int, v uint64) { StoreWord(e.Mem(i, off, size), size, v) }

// Split cuts n bytes into up to k pieces of random sizes (none empty when
// n >= k) for scatter/gather lists.
func Split(n, k int, r *rand.Rand) []int {
	if n == 0 || k <= 1 {
		return []int{n}
	}
	k = min(k, n)
	cuts := make([]int, 0, k)
	left := n
	for p := k; p > 1; p-- {
		c := 1 + r.IntN(left-p+1)
		cuts = append(cuts, c)
		left -= c
	}
	return append(cuts, left)
}

// Laps returns how many times a free-running index went round a ring of
// cnt entries.
func Laps(index, cnt uint32) uint32 { return index >> bits.TrailingZeros32(cnt) }
