package sim

import (
	"runtime"

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
