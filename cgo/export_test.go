//go:build cgo && linux

package cgo

// Access to internals for the external hardware tests (package cgo_test,
// which imports devicetest and so cannot be package cgo).

// CQClosed reports whether Close succeeded on cq.
func CQClosed(cq *CompletionQueue) bool {
	cq.d.mu.Lock()
	defer cq.d.mu.Unlock()
	return cq.closed
}

// WatcherDone is closed when the watcher's goroutine has ended.
func WatcherDone(w *AsyncWatcher) <-chan struct{} { return w.done }

// OpenContexts returns the device contexts not yet closed by
// ibv_close_device: a closed Device stays open while the memory of one of
// its queues is reachable (see closeGate).
func OpenContexts() int64 { return openContexts.Load() }
