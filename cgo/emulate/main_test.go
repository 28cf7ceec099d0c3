//go:build cgo && linux

package emulate_test

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
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

// TestMain switches the emulation on for the whole test binary (as
// MLX5KIT_EMULATE=1 does when the process starts) before any test lists
// devices, and fails the run when descriptors are left open: a device
// node, event descriptor or model device not closed leaks one.
func TestMain(m *testing.M) {
	if err := emulate.Enable(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	// The runtime's poller keeps an epoll and an eventfd descriptor once a
	// pollable file was opened: set it up before counting.
	if r, w, err := os.Pipe(); err == nil {
		r.Close()
		w.Close()
	}
	before := openFDs()
	code := m.Run()
	// A closed device's descriptors (the device node, the async event
	// pipe) go when the memory of its queues was collected: the last
	// cleanup runs ibv_close_device.
	for deadline := time.Now().Add(10 * time.Second); verbs.OpenContexts() > 0 && time.Now().Before(deadline); {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	for fd, target := range openFDs() {
		if before[fd] != target {
			fmt.Fprintf(os.Stderr, "leaked file descriptor %s → %s\n", fd, target)
			code = 1
		}
	}
	os.Exit(code)
}
