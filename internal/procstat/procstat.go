// Package procstat reads what the shared fabric needs to know of a process
// from /proc/<pid>/stat: whether it still runs, and its start time, which
// with the pid names one process whatever pids are reused later.
package procstat

import (
	"bytes"
	"fmt"
	"os"
	"strconv"
)

// Read returns the state (field 3 of /proc/<pid>/stat: R, S, Z, ...) and
// the start time (field 22, in clock ticks since boot) of the process pid.
// Its error matches os.ErrNotExist when no process has that pid.
func Read(pid int) (state byte, start uint64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	// The command, field 2, is in parentheses and may hold any byte.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: no command field", pid)
	}
	fields := bytes.Fields(b[i+1:])
	if len(fields) < 20 || len(fields[0]) != 1 {
		return 0, 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(fields)+2)
	}
	start, err = strconv.ParseUint(string(fields[19]), 10, 64)
	if err != nil {
		return 0, 0, fmt.Errorf("/proc/%d/stat: start time: %w", pid, err)
	}
	return fields[0][0], start, nil
}

// Ended reports whether a process in state has ended: a zombie (ended, not
// yet waited for by its parent) or dead.
func Ended(state byte) bool { return state == 'Z' || state == 'X' }
