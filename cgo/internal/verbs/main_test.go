//go:build cgo && linux

package verbs_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
)

// openFDs lists the process's open descriptors with what they point at.
func openFDs() map[string]string {
	out := map[string]string{}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return out
	}
	self, _ := filepath.EvalSymlinks("/proc/self/fd")
	for _, e := range entries {
		target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
		if err != nil || target == self {
			continue // gone since, or the directory being read
		}
		out[e.Name()] = target
	}
	return out
}

// TestMain fails the run when the tests leave descriptors open: a device,
// completion channel or async watcher that was not closed leaks one.
func TestMain(m *testing.M) {
	// The runtime's poller keeps an epoll and an eventfd descriptor once a
	// pollable file was opened (examples capture stdout through a pipe): set
	// it up before counting.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before := openFDs()
	code := m.Run()
	// A closed device's descriptor goes when the memory of its queues was
	// collected (the last cleanup closes it).
	for deadline := time.Now().Add(10 * time.Second); verbs.OpenContexts() > 0 && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	after := openFDs()
	for fd, target := range after {
		if before[fd] != target {
			fmt.Fprintf(os.Stderr, "leaked file descriptor %s → %s\n", fd, target)
			code = 1
		}
	}
	os.Exit(code)
}
