package affinity

import (
	"fmt"
	"runtime"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Allowed returns the CPUs the calling thread may run on, ascending.
func Allowed() ([]int, error) {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		return nil, fmt.Errorf("affinity: sched_getaffinity: %w", err)
	}
	var cpus []int
	for c := 0; c < len(set)*64; c++ {
		if set.IsSet(c) {
			cpus = append(cpus, c)
		}
	}
	return cpus, nil
}

// Pinned is a goroutine bound to one CPU by Pin.
type Pinned struct {
	cpu  int
	prev unix.CPUSet
}

// Pin locks the calling goroutine to its OS thread and binds that thread to
// cpu. Call Release on the same goroutine when done. On error the goroutine
// is left as it was; a negative cpu is refused with an error that matches
// unix.EINVAL, as the kernel refuses a CPU it does not have.
func Pin(cpu int) (*Pinned, error) {
	if cpu < 0 {
		return nil, fmt.Errorf("affinity: pin to CPU %d: %w", cpu, unix.EINVAL)
	}
	runtime.LockOSThread()
	p := &Pinned{cpu: cpu}
	if err := unix.SchedGetaffinity(0, &p.prev); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("affinity: pin to CPU %d: sched_getaffinity: %w", cpu, err)
	}
	var set unix.CPUSet
	set.Set(cpu)
	if err := unix.SchedSetaffinity(0, &set); err != nil {
		runtime.UnlockOSThread()
		return nil, fmt.Errorf("affinity: pin to CPU %d: sched_setaffinity: %w", cpu, err)
	}
	return p, nil
}

// CPU returns the CPU the goroutine is pinned to.
func (p *Pinned) CPU() int { return p.cpu }

// Release restores the thread's previous CPU set and unlocks the goroutine
// from the thread. It must run on the goroutine that called Pin.
func (p *Pinned) Release() error {
	err := unix.SchedSetaffinity(0, &p.prev)
	runtime.UnlockOSThread()
	if err != nil {
		return fmt.Errorf("affinity: release CPU %d: sched_setaffinity: %w", p.cpu, err)
	}
	return nil
}

// Current returns the CPU the calling thread is running on now.
func Current() (int, error) {
	var cpu, node uint32
	if _, _, errno := unix.RawSyscall(unix.SYS_GETCPU, uintptr(unsafe.Pointer(&cpu)), uintptr(unsafe.Pointer(&node)), 0); errno != 0 {
		return -1, fmt.Errorf("affinity: getcpu: %w", errno)
	}
	return int(cpu), nil
}
