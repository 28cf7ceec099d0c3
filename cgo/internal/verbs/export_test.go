//go:build cgo && linux

package verbs

import "github.com/mlx5kit/mlx5kit/ctx"

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

// ModifyStateUnchecked moves qp to s with ibv_modify_qp and the mask
// IBV_QP_STATE, without the transition table.
func ModifyStateUnchecked(qp *QueuePair, s ctx.QPState) error { return qp.modifyStateUnchecked(s) }

// ShutUpBF reports whether d was opened with MLX5_SHUT_UP_BF in effect:
// its QPs are doorbell only, without a thread domain.
func ShutUpBF(d *Device) bool { return d.shutUpBF }
