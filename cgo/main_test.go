//go:build cgo && linux

package cgo_test

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// openFDs lists the process's open descriptors with what they point at.
func openFDs() map[string]string {
	out := map[string]string{}
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return out
	}
	for _, e := range entries {
		target, _ := os.Readlink(filepath.Join("/proc/self/fd", e.Name()))
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
	after := openFDs()
	for fd, target := range after {
		if _, ok := before[fd]; ok {
			continue
		}
		// The descriptor of the directory being read is gone by now.
		if t, err := os.Readlink(filepath.Join("/proc/self/fd", fd)); err == nil && t == target {
			fmt.Fprintf(os.Stderr, "leaked file descriptor %s → %s\n", fd, target)
			code = 1
		}
	}
	os.Exit(code)
}
