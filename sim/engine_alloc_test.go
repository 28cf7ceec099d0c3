package sim

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestEngineIdleLoopDoesNotAllocate lets an engine with no work back off
// and sleep many times and counts the heap allocations of the whole
// process meanwhile: the sleeps reuse one timer, so the count stays near
// zero instead of growing with the number of sleeps.
func TestEngineIdleLoopDoesNotAllocate(t *testing.T) {
	f := New(Options{Mode: Engine, IdleSleep: 20 * time.Microsecond})
	c, err := f.Open("")
	require.NoError(t, err)
	defer func() {
		require.NoError(t, c.Close())
		require.NoError(t, f.Close())
	}()
	// Let the back-off reach IdleSleep and this goroutine's sleep timer
	// exist.
	time.Sleep(20 * time.Millisecond)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	s0 := f.Stats()
	// At least 200 ms and 100 sleeps: an idle sleep takes about 1 ms
	// here, and on a loaded machine, whose scheduler wakes the engine
	// late, about 5 ms, which left 40 sleeps in 200 ms.
	start := time.Now()
	var sleeps uint64
	for time.Since(start) < 200*time.Millisecond || sleeps < 100 && time.Since(start) < 10*time.Second {
		time.Sleep(10 * time.Millisecond)
		sleeps = f.Stats().EngineSleeps - s0.EngineSleeps
	}
	runtime.ReadMemStats(&m1)
	allocs := m1.Mallocs - m0.Mallocs
	require.GreaterOrEqual(t, sleeps, uint64(100), "the idle engine sleeps")
	t.Logf("%d allocations over %d engine sleeps", allocs, sleeps)
	require.Less(t, allocs, sleeps/4, "%d allocations over %d engine sleeps", allocs, sleeps)
}
