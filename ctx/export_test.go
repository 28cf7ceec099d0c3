package ctx

import "slices"

// BufferMapped reports whether b's memory is still mapped (it is until
// Close and the close of the last region on it have both run).
func BufferMapped(b *Buffer) bool {
	liveBuffers.mu.Lock()
	defer liveBuffers.mu.Unlock()
	return slices.Contains(liveBuffers.byAt, b)
}
