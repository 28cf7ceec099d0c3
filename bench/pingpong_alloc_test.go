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

// No ping-pong round trip allocates, and each delivers its payload. The
// model runs in manual mode whenever a poll finds nothing; its own
// allocations are counted apart and taken off. The count is of the whole
// process, so a runtime background allocation can land in one round trip;
// an allocation of the data path would show in every round trip, so at
// most two of fifty may show one.
func TestPingpongDoesNotAllocate(t *testing.T) {
	e, f := manualEnv(t)
	for i := range e.s {
		src := e.s[i].buf.Bytes()[srcOff : srcOff+4096]
		for k := range src {
			src[k] = byte(k*7 + i*3 + 1)
		}
	}
	for _, c := range pingCases {
		for _, size := range []int{8, 1024} {
			t.Run(c.name+"/"+sizeName(size), func(t *testing.T) {
				mem := func(i, off int) []byte { return e.s[i].buf.Bytes()[off : off+size] }
				for i := range e.s {
					clear(e.s[i].buf.Bytes()[pingOff : pongOff+pingOff])
				}
				rt, skip := c.setup(t, e, size)
				if skip != "" {
					t.Skip(skip)
				}
				st := newRTStats()
				var model uint64
				st.step = func() {
					model += mallocs(func() { require.NoError(t, f.RunUntilIdle()) })
				}
				require.True(t, rt(0, st))
				allocating := 0
				for i := uint64(1); i <= 50; i++ {
					var ok bool
					before := model
					if mallocs(func() { ok = rt(i, st) })-(model-before) != 0 {
						allocating++
					}
					require.True(t, ok, "round trip %d", i)
				}
				require.LessOrEqual(t, allocating, 2, "round trips that allocated, of 50")
				require.Equal(t, uint64(51), st.hist.Count())
				if c.oneSided {
					require.Equal(t, mem(1, srcOff), mem(0, pongOff), "read data")
					return
				}
				require.Equal(t, mem(0, srcOff), mem(1, pingOff+c.grh), "ping data")
				require.Equal(t, mem(1, srcOff), mem(0, pongOff+c.grh), "pong data")
			})
		}
	}
}

// The throughput stream delivers its data and allocates nothing beyond the
// model's own allocations.
func TestThroughputStream(t *testing.T) {
	e, f := manualEnv(t)
	for _, size := range []int{64, 4096} {
		src := e.s[0].buf.Bytes()[srcOff : srcOff+size]
		for k := range src {
			src[k] = byte(k*5 + size)
		}
		clear(e.s[1].buf.Bytes()[pingOff : pingOff+size])
		qp, p := newStreamPair(t, e)
		st := newRTStats()
		var model uint64
		st.step = func() {
			model += mallocs(func() { require.NoError(t, f.RunUntilIdle()) })
		}
		inline := size <= int(qp.Limits().MaxInline)
		require.True(t, streamWrites(qp, p, e, size, 100, inline, st))
		// The counter is process-wide: take the best of three windows, so
		// that an allocation by the runtime or another goroutine does not
		// count, while one per write (1000 in every window) still fails.
		best := ^uint64(0)
		for attempt := 0; attempt < 3 && best > 2; attempt++ {
			var ok bool
			before := model
			n := mallocs(func() { ok = streamWrites(qp, p, e, size, 1000, inline, st) })
			require.True(t, ok)
			best = min(best, n-(model-before))
		}
		require.LessOrEqual(t, best, uint64(2), "allocations in 1000 streamed writes")
		require.Equal(t, src, e.s[1].buf.Bytes()[pingOff:pingOff+size])
		require.Equal(t, uint32(0), qp.SendQueue().Outstanding(), "every WQE retired")
	}
}
