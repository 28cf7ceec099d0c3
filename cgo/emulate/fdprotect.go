//go:build cgo && linux

package emulate

/*
#include "shim.h"
*/
import "C"

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// protectRuntimeFDs tells the interposed closefrom, close_range and close
// which descriptors of this process belong to the Go runtime that runs the
// emulation: its poller's epoll and eventfd, and the cgroup files it
// reads for GOMAXPROCS. A C program that calls closefrom(3), or close of
// every number above 2, would otherwise close them under the runtime,
// which then stops the process ("netpoll failed") at its next wait; the
// program never opened them, so leaving them open (a close of one is
// EBADF, as for a number not open) changes nothing it knows of. The poller is started
// first (a timer does), so that its descriptors exist when they are
// looked for.
func protectRuntimeFDs() {
	time.AfterFunc(time.Hour, func() {}).Stop()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return
	}
	for _, e := range entries {
		fd, err := strconv.Atoi(e.Name())
		if err != nil || fd < 3 {
			continue
		}
		link, err := os.Readlink("/proc/self/fd/" + e.Name())
		if err != nil {
			continue
		}
		if link == "anon_inode:[eventpoll]" || link == "anon_inode:[eventfd]" || strings.HasPrefix(link, "/sys/fs/cgroup/") {
			C.mk_emu_protect_fd(C.int(fd))
		}
	}
}
