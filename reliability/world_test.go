package reliability

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"
)

// allAccess is every access flag a region can have.
const allAccess = ctx.AccessLocalWrite | ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic

// Memory layout. Each HCA's memory is one buffer from ctx.AllocBuffer with
// PROT_NONE guard pages at both ends, carved into regions that are each
// registered as their own memory region. Between the regions, and after the
// last one, lie canary bytes that no memory region covers: no operation may
// ever change them.
const (
	canarySize = 256
	canaryByte = 0xc5
	// slotPattern fills a receive slot before it is posted; bytes a
	// completion does not account for must still hold it.
	slotPattern = 0xee
)

// arena is the memory of one HCA.
type arena struct {
	buf     *ctx.Buffer
	mem     []byte
	next    int
	pd      *ctx.ProtectionDomain
	regions []*region
}

// region is one registered range with the model's expectation of its
// content.
type region struct {
	name   string
	mr     *ctx.MemoryRegion
	mem    []byte // the registered memory
	shadow []byte // what the reference model says it holds
	off    int    // offset in the arena
}

func newArena(t testing.TB, pd *ctx.ProtectionDomain, size int) *arena {
	t.Helper()
	buf, err := ctx.AllocBuffer(size, ctx.BufferOptions{Guard: true})
	require.NoError(t, err)
	a := &arena{buf: buf, mem: buf.Bytes(), pd: pd}
	for i := range a.mem {
		a.mem[i] = canaryByte
	}
	return a
}

// region carves n bytes after a canary gap, registers them with access,
// and fills them (and the shadow) with pseudo-random bytes from seed.
func (a *arena) region(t testing.TB, name string, n int, access ctx.Access, seed uint64) *region {
	t.Helper()
	start := a.next + canarySize
	end := start + n
	require.LessOrEqual(t, end+canarySize, len(a.mem), "arena too small for %s", name)
	r := &region{name: name, mem: a.mem[start:end:end], off: start}
	genBytes(r.mem, seed)
	r.shadow = bytes.Clone(r.mem)
	mr, err := a.pd.RegisterMemory(r.mem, access)
	require.NoError(t, err)
	r.mr = mr
	a.next = end
	a.regions = append(a.regions, r)
	return r
}

// checkCanaries returns an error naming the first canary byte that changed:
// the gaps before and between the regions and the gap after the last one
// (or, with all set, every byte of the arena outside a region).
func (a *arena) checkCanaries(all bool) error {
	prev := 0
	check := func(lo, hi int) error {
		for i := lo; i < hi; i++ {
			if a.mem[i] != canaryByte {
				return fmt.Errorf("byte %d of the arena (outside every region) changed to %#02x", i, a.mem[i])
			}
		}
		return nil
	}
	for _, r := range a.regions {
		if err := check(prev, r.off); err != nil {
			return err
		}
		prev = r.off + len(r.mem)
	}
	hi := min(prev+canarySize, len(a.mem))
	if all {
		hi = len(a.mem)
	}
	return check(prev, hi)
}

// check compares the region with its shadow.
func (r *region) check() error {
	if bytes.Equal(r.mem, r.shadow) {
		return nil
	}
	i := 0
	for r.mem[i] == r.shadow[i] {
		i++
	}
	return fmt.Errorf("region %s: byte %d is %#02x, the model says %#02x", r.name, i, r.mem[i], r.shadow[i])
}

func (r *region) addr(off int) uint64 { return uint64(r.mr.Addr()) + uint64(off) }
func (r *region) lkey() uint32        { return r.mr.LKey() }
func (r *region) rkey() uint32        { return r.mr.RKey() }

// splitmix is a small deterministic generator for payload bytes.
type splitmix uint64

func (s *splitmix) next() uint64 {
	*s += 0x9e3779b97f4a7c15
	z := uint64(*s)
	z = (z ^ z>>30) * 0xbf58476d1ce4e5b9
	z = (z ^ z>>27) * 0x94d049bb133111eb
	return z ^ z>>31
}

// genBytes fills b with bytes that depend only on seed.
func genBytes(b []byte, seed uint64) {
	s := splitmix(seed)
	i := 0
	for ; i+8 <= len(b); i += 8 {
		binary.LittleEndian.PutUint64(b[i:], s.next())
	}
	if i < len(b) {
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], s.next())
		copy(b[i:], w[:])
	}
}

// genMessage fills b (at least 8 bytes) with the message of sequence
// number seq: seq big-endian, then bytes that depend only on seq.
func genMessage(b []byte, seq uint64) {
	binary.BigEndian.PutUint64(b, seq)
	genBytes(b[8:], seq*0x2545f4914f6cdd1d+1)
}

// checkMessage reports whether b is the message of its own sequence number.
func checkMessage(b []byte) (uint64, bool) {
	if len(b) < 8 {
		return 0, false
	}
	seq := binary.BigEndian.Uint64(b)
	var tmp [4096]byte
	want := tmp[:len(b)]
	if len(b) > len(tmp) {
		want = make([]byte, len(b))
	}
	genMessage(want, seq)
	return seq, bytes.Equal(want, b)
}

// fabric opens two HCAs of a manual-mode, strict software HCA with a PD
// each.
type fabric struct {
	f  *sim.Fabric
	c  [2]*ctx.Context
	pd [2]*ctx.ProtectionDomain
}

func newFabric(t testing.TB, opts sim.Options) *fabric {
	t.Helper()
	opts.Strict = true
	x := &fabric{f: sim.New(opts)}
	for i := range 2 {
		var err error
		x.c[i], err = x.f.Open(fmt.Sprintf("sim%d", i))
		require.NoError(t, err)
		x.pd[i], err = x.c[i].AllocProtectionDomain()
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		require.Empty(t, x.f.Violations(), "strict-mode violations")
		for i := range 2 {
			require.NoError(t, x.c[i].Close())
		}
		require.NoError(t, x.f.Close())
	})
	return x
}
