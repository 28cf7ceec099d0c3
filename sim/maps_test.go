package sim

import (
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// mappings returns the number of this process's memory mappings.
func mappings(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	return bytes.Count(b, []byte{'\n'})
}

// TestQueueChurnKeepsMappingsBounded: a program that creates and closes
// completion queues in a loop does not pile up the mappings of the closed
// ones. A closed queue's rings stay mapped until a collection finds them
// unreachable (queueMemory), and the Go heap does not count them, so
// before, 6,000 queues made and closed left some 36,000 mappings waiting
// for a collection that a small heap does not call for, and the process
// ran into vm.max_map_count (65,530 by default: mmap fails with ENOMEM).
func TestQueueChurnKeepsMappingsBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 10,000 queues")
	}
	// No collection but the ones the model asks for: a program whose
	// heap is large, or grows slowly, collects as seldom.
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware})
	require.NoError(t, err)
	defer c.Close()
	base := mappings(t)
	most := 0
	for i := range 10000 {
		cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
		require.NoError(t, err, "queue %d", i)
		require.NoError(t, cq.Close())
		if i%500 == 0 {
			most = max(most, mappings(t)-base)
		}
	}
	most = max(most, mappings(t)-base)
	t.Logf("at most %d mappings more than at the start", most)
	require.Less(t, most, 15000, "mappings held by closed queues")
}

// TestOpenQueuesCollectNothing: a program that makes many queues and keeps
// them open never has the model ask for a collection (only closed queues
// wait for one), so a large heap does not pay a full collection for each
// thousand queues it makes.
func TestOpenQueuesCollectNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("creates 3,000 queues")
	}
	defer debug.SetGCPercent(debug.SetGCPercent(-1))
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderSoftware})
	require.NoError(t, err)
	defer c.Close()
	var before runtime.MemStats
	runtime.ReadMemStats(&before)
	cqs := make([]*ctx.CompletionQueue, 0, 3000)
	for i := range 3000 {
		cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 64})
		require.NoError(t, err, "queue %d", i)
		cqs = append(cqs, cq)
	}
	var after runtime.MemStats
	runtime.ReadMemStats(&after)
	require.Equal(t, before.NumForcedGC, after.NumForcedGC, "collections asked for while every queue is open")
	for _, cq := range cqs {
		require.NoError(t, cq.Close())
	}
}
