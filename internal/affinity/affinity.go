// Package affinity pins the calling goroutine to one CPU for measurements:
// runtime.LockOSThread keeps the goroutine on its OS thread, and
// sched_setaffinity (golang.org/x/sys/unix) keeps that thread on the CPU.
//
// The CPUs come from the environment variable MLX5KIT_CPUS, a list such as
// "2,4" or "0-3,8" (the syntax of taskset -c), or, when it is not set, from
// the set the process may run on. The first CPU of the list is the one a
// measuring loop should use, the second the one its peer (a server loop or
// the software HCA's engine) should use.
package affinity

import (
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
)

// EnvCPUs is the environment variable that names the CPUs to run on.
const EnvCPUs = "MLX5KIT_CPUS"

// ErrNotSupported is returned where the operating system offers no way to
// bind a thread to a CPU.
var ErrNotSupported = errors.New("affinity: not supported on this system")

// maxCPUs bounds the CPU numbers of a list: no kernel has more CPUs
// (CONFIG_NR_CPUS is at most 8192).
const maxCPUs = 8192

// ParseList parses a CPU list in taskset -c syntax: comma-separated CPU
// numbers and inclusive ranges "a-b", each CPU below 8192. The result keeps
// the order of the list (so "4,2" puts CPU 4 first) and drops repeats.
func ParseList(s string) ([]int, error) {
	var cpus []int
	for _, field := range strings.Split(s, ",") {
		field = strings.TrimSpace(field)
		if field == "" {
			return nil, fmt.Errorf("affinity: parse CPU list %q: empty entry", s)
		}
		first, last, isRange := strings.Cut(field, "-")
		lo, err := strconv.Atoi(first)
		if err != nil || lo < 0 {
			return nil, fmt.Errorf("affinity: parse CPU list %q: bad CPU %q", s, first)
		}
		hi := lo
		if isRange {
			hi, err = strconv.Atoi(last)
			if err != nil || hi < lo {
				return nil, fmt.Errorf("affinity: parse CPU list %q: bad range %q", s, field)
			}
		}
		if hi >= maxCPUs {
			return nil, fmt.Errorf("affinity: parse CPU list %q: CPU %d beyond the largest a kernel has (%d)", s, hi, maxCPUs-1)
		}
		for c := lo; c <= hi; c++ {
			if !slices.Contains(cpus, c) {
				cpus = append(cpus, c)
			}
		}
	}
	return cpus, nil
}

// CPUs returns the CPUs to run on: the list in MLX5KIT_CPUS when it is set,
// otherwise the CPUs the calling thread may run on, ascending. Every CPU
// named in MLX5KIT_CPUS must be one the process may run on.
func CPUs() ([]int, error) {
	allowed, err := Allowed()
	if err != nil {
		return nil, err
	}
	s, ok := os.LookupEnv(EnvCPUs)
	if !ok || strings.TrimSpace(s) == "" {
		return allowed, nil
	}
	cpus, err := ParseList(s)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", EnvCPUs, err)
	}
	if allowed != nil {
		for _, c := range cpus {
			if !slices.Contains(allowed, c) {
				return nil, fmt.Errorf("affinity: %s=%q names CPU %d, outside the allowed set %v", EnvCPUs, s, c, allowed)
			}
		}
	}
	return cpus, nil
}
