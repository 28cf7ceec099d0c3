package blueflame

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

const pageSize = 4096

// mapPage returns n bytes of zeroed anonymous memory outside the Go heap.
func mapPage(t testing.TB, n int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, unix.Munmap(b)) })
	return b
}

// withMode runs f with each available mode selected and restores the mode.
func withMode(t *testing.T, f func(t *testing.T, m copyMode)) {
	saved := currentMode()
	t.Cleanup(func() { require.NoError(t, setMode(saved)) })
	for _, m := range availableModesCopy() {
		t.Run(m.String(), func(t *testing.T) {
			require.NoError(t, setMode(m))
			f(t, m)
		})
	}
}

type fixture struct {
	ring  []byte // send ring of ringBBs WQEBBs
	dbrec []byte // 8 bytes
	page  []byte // BlueFlame page, 2 × bfSize used
	reg   Register
}

const (
	ringBBs = 8
	bfSize  = 256
)

func newFixture(t *testing.T, seed uint64) *fixture {
	f := &fixture{
		ring:  mapPage(t, pageSize)[:ringBBs*ChunkSize],
		dbrec: mapPage(t, pageSize)[:8],
		page:  mapPage(t, pageSize),
	}
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range f.ring {
		f.ring[i] = byte(r.Uint32())
	}
	for i := range f.page {
		f.page[i] = 0xa5
	}
	copy(f.dbrec, []byte{0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88})
	var err error
	f.reg, err = NewRegister(unsafe.Pointer(&f.page[0]), bfSize)
	require.NoError(t, err)
	return f
}

func (f *fixture) post(slot uint32, pi uint32, n int) {
	base := unsafe.Pointer(&f.ring[0])
	f.reg.postOnce(unsafe.Pointer(&f.dbrec[0]), pi, unsafe.Add(base, slot*ChunkSize), n,
		base, unsafe.Add(base, len(f.ring)))
}

// expectChunks returns what a BlueFlame copy of chunks WQEBBs from slot must
// put on the register: the ring's basic blocks in order, wrapping.
func (f *fixture) expectChunks(slot, chunks uint32) []byte {
	var out []byte
	for i := range chunks {
		s := (slot + i) % ringBBs
		out = append(out, f.ring[s*ChunkSize:(s+1)*ChunkSize]...)
	}
	return out
}

func untouched(n int) []byte { return bytes.Repeat([]byte{0xa5}, n) }

func TestPostCopiesWholeWQEAndToggles(t *testing.T) {
	withMode(t, func(t *testing.T, m copyMode) {
		f := newFixture(t, 7)

		// 3 chunks from slot 6 wrap to slot 0 after slot 7.
		f.post(6, 0x12345, 3*ChunkSize-16)
		require.Equal(t, []byte{0x11, 0x22, 0x33, 0x44}, f.dbrec[:4], "dbrec[0] must not change")
		require.Equal(t, uint32(0x2345), binary.BigEndian.Uint32(f.dbrec[4:]))
		require.Equal(t, f.expectChunks(6, 3), f.page[:3*ChunkSize])
		require.Equal(t, untouched(pageSize-3*ChunkSize), f.page[3*ChunkSize:])
		require.Equal(t, uint32(bfSize), f.reg.Offset())

		// The second post goes to the other buffer, then the offset returns.
		f.post(1, 0x1ffff, bfSize)
		require.Equal(t, uint32(0xffff), binary.BigEndian.Uint32(f.dbrec[4:]))
		require.Equal(t, f.expectChunks(6, 3), f.page[:3*ChunkSize])
		require.Equal(t, untouched(ChunkSize), f.page[3*ChunkSize:bfSize])
		require.Equal(t, f.expectChunks(1, 4), f.page[bfSize:2*bfSize])
		require.Equal(t, untouched(pageSize-2*bfSize), f.page[2*bfSize:])
		require.Equal(t, uint32(0), f.reg.Offset())

		// A whole-ring wrap: 4 chunks starting at the last slot.
		f.post(7, 3, bfSize)
		require.Equal(t, f.expectChunks(7, 4), f.page[:bfSize])
	})
}

func TestPostTooLargeFallsBackToDoorbell(t *testing.T) {
	withMode(t, func(t *testing.T, m copyMode) {
		f := newFixture(t, 9)
		f.post(2, 77, bfSize+16)
		require.Equal(t, uint32(77), binary.BigEndian.Uint32(f.dbrec[4:]))
		require.Equal(t, f.ring[2*ChunkSize:2*ChunkSize+8], f.page[:8])
		require.Equal(t, untouched(pageSize-8), f.page[8:])
		require.Equal(t, uint32(bfSize), f.reg.Offset())

		// n == 0 is a doorbell too (into the second buffer now).
		f.post(3, 78, 0)
		require.Equal(t, f.ring[3*ChunkSize:3*ChunkSize+8], f.page[bfSize:bfSize+8])
		require.Equal(t, untouched(bfSize-8), f.page[bfSize+8:2*bfSize])
		require.Equal(t, uint32(0), f.reg.Offset())
	})
}

func TestDoorbellOnlyRegister(t *testing.T) {
	withMode(t, func(t *testing.T, m copyMode) {
		f := newFixture(t, 3)
		reg, err := NewRegister(unsafe.Pointer(&f.page[0]), 0)
		require.NoError(t, err)
		f.reg = reg
		for i := range uint32(3) {
			f.post(i, 0x10000+i, ChunkSize)
			require.Equal(t, i, binary.BigEndian.Uint32(f.dbrec[4:]))
			require.Equal(t, f.ring[i*ChunkSize:i*ChunkSize+8], f.page[:8])
			require.Equal(t, untouched(pageSize-8), f.page[8:])
			require.Equal(t, uint32(0), f.reg.Offset())
		}
		base := unsafe.Pointer(&f.ring[0])
		f.reg.ringOnce(unsafe.Pointer(&f.dbrec[0]), 9, unsafe.Add(base, 5*ChunkSize))
		require.Equal(t, uint32(9), binary.BigEndian.Uint32(f.dbrec[4:]))
		require.Equal(t, f.ring[5*ChunkSize:5*ChunkSize+8], f.page[:8])
	})
}

// TestModesAgree runs the same random sequence of posts and doorbells in
// every mode and requires identical register pages and doorbell records.
func TestModesAgree(t *testing.T) {
	saved := currentMode()
	t.Cleanup(func() { require.NoError(t, setMode(saved)) })
	var first []byte
	var firstMode copyMode
	for _, m := range availableModesCopy() {
		require.NoError(t, setMode(m))
		f := newFixture(t, 42)
		r := rand.New(rand.NewPCG(5, 6))
		snapshot := []byte{}
		for range 200 {
			slot := r.Uint32N(ringBBs)
			pi := r.Uint32()
			if r.IntN(4) == 0 {
				f.reg.ringOnce(unsafe.Pointer(&f.dbrec[0]), pi, unsafe.Pointer(&f.ring[slot*ChunkSize]))
			} else {
				f.post(slot, pi, 1+r.IntN(bfSize+64))
			}
			snapshot = append(snapshot, f.dbrec...)
			snapshot = append(snapshot, f.page[:2*bfSize]...)
			// Change the ring so that stale data would show.
			f.ring[r.IntN(len(f.ring))]++
		}
		if first == nil {
			first, firstMode = snapshot, m
			continue
		}
		require.True(t, bytes.Equal(first, snapshot), "mode %s differs from %s", m, firstMode)
	}
}

func TestNewRegisterRejects(t *testing.T) {
	page := mapPage(t, pageSize)
	_, err := NewRegister(nil, 256)
	require.ErrorIs(t, err, ErrBadRegister)
	_, err = NewRegister(unsafe.Pointer(&page[0]), 100)
	require.ErrorIs(t, err, ErrBadRegister)
	_, err = NewRegister(unsafe.Pointer(&page[4]), 256)
	require.ErrorIs(t, err, ErrBadRegister)
	r, err := NewRegister(unsafe.Pointer(&page[0]), 512)
	require.NoError(t, err)
	require.Equal(t, uint32(512), r.Size())
	require.Equal(t, unsafe.Pointer(&page[0]), r.reg)
}

func TestModes(t *testing.T) {
	avail := availableModesCopy()
	require.NotEmpty(t, avail)
	require.Contains(t, avail, modeGeneric)
	require.Equal(t, modeGeneric, avail[len(avail)-1], "generic is the last resort")
	if os.Getenv(envMode) == "" {
		require.Equal(t, avail[0], currentMode())
	}
	for _, m := range []copyMode{modeGeneric, modeStore8, modeAVX512, modeSTP, modeNEON} {
		got, err := parseMode(m.String())
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	_, err := parseMode("sse")
	require.ErrorIs(t, err, errUnknownMode)
	require.ErrorIs(t, setMode(0), errUnknownMode)
	require.ErrorIs(t, setMode(99), errUnknownMode)
	require.Equal(t, "Mode(99)", copyMode(99).String())
	for _, m := range []copyMode{modeStore8, modeAVX512, modeSTP, modeNEON} {
		if !contains(avail, m) {
			require.ErrorIs(t, setMode(m), errModeUnavailable, m.String())
		}
	}
}

func contains(ms []copyMode, m copyMode) bool {
	for _, x := range ms {
		if x == m {
			return true
		}
	}
	return false
}

// TestModeFromEnv checks, in this process, the mode each value of
// MLX5KIT_BLUEFLAME selects at start.
func TestModeFromEnv(t *testing.T) {
	def, err := modeFromEnv("")
	require.NoError(t, err)
	require.Equal(t, availableModesCopy()[0], def, "unset selects the default")
	for _, m := range availableModesCopy() {
		got, err := modeFromEnv(m.String())
		require.NoError(t, err, "mode %s", m)
		require.Equal(t, m, got)
	}
	for m := modeGeneric; m <= modeNEON; m++ {
		if slices.Contains(availableModesCopy(), m) {
			continue
		}
		_, err := modeFromEnv(m.String())
		require.ErrorIs(t, err, errModeUnavailable, "mode %s", m)
	}
	_, err = modeFromEnv("bogus")
	require.ErrorIs(t, err, errUnknownMode)
	require.Contains(t, err.Error(), "bogus")
}

// reexec returns a command that runs this test binary again. Under
// emulation (MLX5KIT_EMULATED set, as make test-arm64 does) the binary is
// started through the same qemu-user emulator, named by MLX5KIT_QEMU or
// found on PATH, because the host kernel cannot run it directly without
// binfmt_misc.
func reexec(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	if os.Getenv("MLX5KIT_EMULATED") == "" {
		return exec.Command(os.Args[0], args...)
	}
	qemu := os.Getenv("MLX5KIT_QEMU")
	if qemu == "" {
		qemu = "qemu-" + map[string]string{"arm64": "aarch64", "amd64": "x86_64"}[runtime.GOARCH] + "-static"
	}
	path, err := exec.LookPath(qemu)
	require.NoError(t, err, "MLX5KIT_EMULATED is set: the emulator must be on PATH")
	return exec.Command(path, append([]string{os.Args[0]}, args...)...)
}

// TestEnvForcesMode starts the test binary again with MLX5KIT_BLUEFLAME set
// and checks the mode it reports, and that a bad name stops the program.
func TestEnvForcesMode(t *testing.T) {
	if name := os.Getenv("BLUEFLAME_TEST_REPORT"); name != "" {
		if currentMode().String() != name {
			os.Exit(3)
		}
		os.Exit(0)
	}
	for _, m := range availableModesCopy() {
		cmd := reexec(t, "-test.run=^TestEnvForcesMode$")
		cmd.Env = append(os.Environ(), envMode+"="+m.String(), "BLUEFLAME_TEST_REPORT="+m.String())
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "mode %s: %s", m, out)
	}
	cmd := reexec(t, "-test.run=^TestEnvForcesMode$")
	cmd.Env = append(os.Environ(), envMode+"=bogus", "BLUEFLAME_TEST_REPORT=x")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.True(t, errors.As(err, &exit), "bad mode name must fail: %v", err)
	require.Contains(t, string(out), "bogus")
}

func TestBarriersRun(t *testing.T) {
	// The barriers have no observable effect on one CPU; this checks they
	// are callable on this architecture and return.
	StoreBarrier()
	ReadBarrier()
	WCStart()
	FlushWrites()
}

func TestPostAllocatesNothing(t *testing.T) {
	withMode(t, func(t *testing.T, m copyMode) {
		f := newFixture(t, 1)
		allocs := testing.AllocsPerRun(100, func() {
			f.post(7, 1, 2*ChunkSize)
			f.reg.ringOnce(unsafe.Pointer(&f.dbrec[0]), 2, unsafe.Pointer(&f.ring[0]))
		})
		require.Zero(t, allocs)
	})
}

func BenchmarkPost(b *testing.B) {
	saved := currentMode()
	defer func() { _ = setMode(saved) }()
	for _, m := range availableModesCopy() {
		for _, chunks := range []int{1, 2, 4} {
			b.Run(m.String()+"/"+string(rune('0'+chunks))+"x64", func(b *testing.B) {
				if err := setMode(m); err != nil {
					b.Fatal(err)
				}
				ring := mapPage(b, pageSize)
				dbrec := mapPage(b, pageSize)
				page := mapPage(b, pageSize)
				reg, _ := NewRegister(unsafe.Pointer(&page[0]), bfSize)
				base := unsafe.Pointer(&ring[0])
				end := unsafe.Add(base, pageSize)
				db := unsafe.Pointer(&dbrec[0])
				for i := 0; b.Loop(); i++ {
					reg.postOnce(db, uint32(i), base, chunks*ChunkSize, base, end)
				}
			})
		}
	}
}

func BenchmarkDoorbell(b *testing.B) {
	saved := currentMode()
	defer func() { _ = setMode(saved) }()
	for _, m := range availableModesCopy() {
		b.Run(m.String(), func(b *testing.B) {
			if err := setMode(m); err != nil {
				b.Fatal(err)
			}
			ring := mapPage(b, pageSize)
			dbrec := mapPage(b, pageSize)
			page := mapPage(b, pageSize)
			reg, _ := NewRegister(unsafe.Pointer(&page[0]), bfSize)
			db := unsafe.Pointer(&dbrec[0])
			base := unsafe.Pointer(&ring[0])
			for i := 0; b.Loop(); i++ {
				reg.ringOnce(db, uint32(i), base)
			}
		})
	}
}

func BenchmarkBarrier(b *testing.B) {
	for _, c := range []struct {
		name string
		f    func()
	}{{"Store", StoreBarrier}, {"Read", ReadBarrier}, {"WCStart", WCStart}, {"Flush", FlushWrites}} {
		b.Run(c.name, func(b *testing.B) {
			for b.Loop() {
				c.f()
			}
		})
	}
}

// A SendDoorbell bound once posts exactly what the Register methods post
// when they are given the doorbell record and the ring each time: the same
// random sequence on two fixtures leaves identical doorbell records,
// register pages and buffer offsets after every step, in every mode.
func TestSendDoorbellMatchesRegister(t *testing.T) {
	withMode(t, func(t *testing.T, m copyMode) {
		a, b := newFixture(t, 9), newFixture(t, 9)
		base := unsafe.Pointer(&b.ring[0])
		d, err := NewSendDoorbell(b.reg, unsafe.Pointer(&b.dbrec[0]), base, unsafe.Add(base, len(b.ring)))
		require.NoError(t, err)
		r := rand.New(rand.NewPCG(7, 8))
		for step := range 300 {
			slot, pi := r.Uint32N(ringBBs), r.Uint32()
			wqe := unsafe.Add(base, slot*ChunkSize)
			if r.IntN(4) == 0 {
				a.reg.ringOnce(unsafe.Pointer(&a.dbrec[0]), pi, unsafe.Pointer(&a.ring[slot*ChunkSize]))
				d.Ring(pi, wqe)
			} else {
				n := r.IntN(bfSize + 64)
				a.post(slot, pi, n)
				d.Post(pi, wqe, n)
			}
			require.Equal(t, a.dbrec, b.dbrec, "step %d: doorbell record", step)
			require.Equal(t, a.page[:2*bfSize], b.page[:2*bfSize], "step %d: register page", step)
			require.Equal(t, a.reg.Offset(), d.Offset(), "step %d: buffer offset", step)
			i := r.IntN(len(a.ring))
			a.ring[i]++
			b.ring[i]++
		}
	})
}

func TestNewSendDoorbellRefusesBadQueues(t *testing.T) {
	f := newFixture(t, 1)
	base := unsafe.Pointer(&f.ring[0])
	end := unsafe.Add(base, len(f.ring))
	db := unsafe.Pointer(&f.dbrec[0])
	for _, c := range []struct {
		name          string
		reg           Register
		dbrec, lo, hi unsafe.Pointer
	}{
		{"zero register", Register{}, db, base, end},
		{"nil doorbell record", f.reg, nil, base, end},
		{"misaligned doorbell record", f.reg, unsafe.Add(db, 2), base, end},
		{"nil ring", f.reg, db, nil, end},
		{"misaligned ring", f.reg, db, unsafe.Add(base, 8), end},
		{"empty ring", f.reg, db, base, base},
		{"ring not whole basic blocks", f.reg, db, base, unsafe.Add(end, -16)},
	} {
		_, err := NewSendDoorbell(c.reg, c.dbrec, c.lo, c.hi)
		require.ErrorIs(t, err, ErrBadRegister, c.name)
		require.ErrorContains(t, err, "blueflame: new send doorbell", c.name)
	}
}

// availableModesCopy returns a copy of the modes this machine can run, the
// default first.
func availableModesCopy() []copyMode { return slices.Clone(availableModes) }
