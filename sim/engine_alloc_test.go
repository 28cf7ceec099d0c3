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
	time.Sleep(200 * time.Millisecond)
	s1 := f.Stats()
	runtime.ReadMemStats(&m1)
	sleeps := s1.EngineSleeps - s0.EngineSleeps
	allocs := m1.Mallocs - m0.Mallocs
	require.GreaterOrEqual(t, sleeps, uint64(40), "the idle engine sleeps")
	t.Logf("%d allocations over %d engine sleeps", allocs, sleeps)
	require.Less(t, allocs, sleeps/4, "%d allocations over %d engine sleeps", allocs, sleeps)
}
