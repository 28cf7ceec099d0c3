//go:build !linux

package affinity

import (
	"fmt"
	"runtime"
)

// Allowed returns nil: the system does not say which CPUs a thread may use.
func Allowed() ([]int, error) { return nil, nil }

// Pinned is a goroutine locked to its OS thread by Pin.
type Pinned struct{ cpu int }

// Pin locks the calling goroutine to its OS thread and returns
// ErrNotSupported (wrapped) with the goroutine left locked, since the
// thread cannot be bound to a CPU here. Release unlocks it.
func Pin(cpu int) (*Pinned, error) {
	runtime.LockOSThread()
	return &Pinned{cpu: cpu}, fmt.Errorf("affinity: pin to CPU %d: %w", cpu, ErrNotSupported)
}

// CPU returns the CPU that Pin was asked for.
func (p *Pinned) CPU() int { return p.cpu }

// Release unlocks the goroutine from its thread.
func (p *Pinned) Release() error {
	runtime.UnlockOSThread()
	return nil
}

// Current returns ErrNotSupported.
func Current() (int, error) { return -1, ErrNotSupported }
