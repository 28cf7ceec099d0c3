package perftool

import (
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// leaveWait bounds how long a tool stopped by a signal waits to leave the
// shared software fabric (LeaveSoftwareFabric) before it exits anyway: the
// registry's lock is waited for at most 10 s.
const leaveWait = 15 * time.Second

// Main runs a tool's main body, run, and exits with its status, leaving
// the shared software fabric first (LeaveSoftwareFabric). SIGINT and
// SIGTERM, which would end the process and leave its ring file and its
// slot in the fabric's registry behind in /dev/shm, instead leave the
// fabric and exit with the shell's status for the signal, 128 plus its
// number (130, 143). A second signal, or leaveWait passing, exits without
// waiting for the fabric. Main does not return.
func Main(run func() int) {
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
	// The first to call end leaves the fabric and exits: a signal that
	// comes while run's return is being handled waits for that exit.
	var once sync.Once
	end := func(code int) {
		once.Do(func() {
			LeaveSoftwareFabric()
			os.Exit(code)
		})
	}
	go func() {
		s := <-sigs
		code := 128 + int(s.(syscall.Signal))
		go func() {
			select {
			case <-sigs:
			case <-time.After(leaveWait):
			}
			os.Exit(code)
		}()
		end(code)
	}()
	end(run())
}
