package sim

import (
	"runtime"
	"sync/atomic"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// queueMemory owns the mappings of one queue (its rings, doorbell record
// page, BlueFlame or UAR page) for as long as the data plane can reach
// them. The descriptors hand it out as their Memory, which the send
// queues, pollers and receive rings built over them keep; Close makes the
// model forget the queue at once but leaves the mappings alone, and a
// cleanup unmaps them once the queueMemory is unreachable. So a stage
// begun before Close and written after it, or a poll of a closed CQ,
// touches memory that is still mapped and that the model no longer reads.
type queueMemory struct {
	bufs []*ctx.Buffer
}

// closedSinceCollect counts the queues closed since the model last asked
// for a collection. Only a collection unmaps a closed queue's mappings
// (once nothing reaches its queueMemory), and the Go heap does not count
// them: a program that makes and closes queues in a loop, with a heap
// large enough or growing slowly enough that no collection comes, would
// map up to vm.max_map_count (65,530 by default; mmap then fails with
// ENOMEM), some nine mappings a queue with their guard pages. So once
// collectStep queues were closed, the next region asks for one first. A
// program that keeps its queues open never pays for it.
var closedSinceCollect atomic.Int64

const collectStep = 1024

// collectIfMany runs a collection once collectStep queues were closed
// since the last, so that the cleanups of the unreachable ones unmap
// their mappings.
func collectIfMany() {
	if closedSinceCollect.Load() >= collectStep {
		closedSinceCollect.Store(0)
		runtime.GC()
	}
}

// closed counts m's queue as closed: its mappings wait for a collection.
func (m *queueMemory) closed() {
	if m != nil {
		closedSinceCollect.Add(1)
	}
}

// keepMemory makes the owner of the non-nil buffers of bufs: they are
// unmapped when it becomes unreachable.
func keepMemory(bufs []*ctx.Buffer) *queueMemory {
	var live []*ctx.Buffer
	for _, b := range bufs {
		if b != nil {
			live = append(live, b)
		}
	}
	m := &queueMemory{bufs: live}
	runtime.AddCleanup(m, func(bufs []*ctx.Buffer) { freeAll(bufs...) }, live)
	return m
}
