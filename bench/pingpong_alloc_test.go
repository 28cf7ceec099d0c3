package bench

import (
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/sim"
)

// mallocs counts the heap allocations fn makes (of the whole process: run
// it where nothing else allocates).
func mallocs(fn func()) uint64 {
	var a, b runtime.MemStats
	runtime.ReadMemStats(&a)
	fn()
	runtime.ReadMemStats(&b)
	return b.Mallocs - a.Mallocs
}

// manualEnv is a ping-pong environment over a software HCA in manual mode:
// nothing runs behind the test's back, so the allocations counted are the
// data path's own.
func manualEnv(t *testing.T) (*pingEnv, *sim.Fabric) {
	f := sim.New(sim.Options{Mode: sim.Manual, Devices: 2, Strict: true})
	e := &pingEnv{provider: "sim", fabric: f}
	for i := range e.s {
		c, err := f.Open(fmt.Sprintf("sim%d", i))
		require.NoError(t, err)
		e.s[i].c = c
	}
	require.NoError(t, e.setup())
	t.Cleanup(func() {
		require.Empty(t, f.Violations())
		require.NoError(t, e.close())
	})
	return e, f
}

// The post and poll halves of the RC ping-pong allocate nothing; the
// model's steps run between them, outside the count. The count is of the
// whole process, so a runtime background allocation can land in one; an
// allocation of the data path would show in every round trip, so at most
// two round trips out of fifty may show one.
func TestRCRoundTripDoesNotAllocate(t *testing.T) {
	e, f := manualEnv(t)
	for i := range e.s {
		src := e.s[i].buf.Bytes()[srcOff : srcOff+4096]
		for k := range src {
			src[k] = byte(k*7 + i*3 + 1)
		}
	}
	for _, size := range []int{8, 4096} {
		x := newRCPair(t, e, 16, size)
		for i := range 2 {
			require.NoError(t, x.qp[i].PostRecv(0, 0, 0, 0))
		}
		st := newRTStats()
		allocating := 0
		for i := uint64(0); i < 50; i++ {
			var n uint64
			var ok bool
			n += mallocs(func() { ok = x.writeImm(0, i, size, pingOff) == nil })
			require.True(t, ok)
			require.NoError(t, f.RunUntilIdle())
			n += mallocs(func() { ok = x.waitRecv(1, st) })
			require.True(t, ok)
			n += mallocs(func() { ok = x.qp[1].PostRecv(i, 0, 0, 0) == nil && x.writeImm(1, i, size, pongOff) == nil })
			require.True(t, ok)
			require.NoError(t, f.RunUntilIdle())
			n += mallocs(func() { ok = x.waitRecv(0, st) && x.qp[0].PostRecv(i, 0, 0, 0) == nil })
			require.True(t, ok)
			if n != 0 {
				allocating++
			}
		}
		require.LessOrEqual(t, allocating, 2, "round trips that allocated, of 50 (%d bytes)", size)
		require.Equal(t, e.s[0].buf.Bytes()[srcOff:srcOff+size], e.s[1].buf.Bytes()[pingOff:pingOff+size])
		require.Equal(t, e.s[1].buf.Bytes()[srcOff:srcOff+size], e.s[0].buf.Bytes()[pongOff:pongOff+size])
	}
}
