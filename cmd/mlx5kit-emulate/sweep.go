package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/procstat"
	"github.com/mlx5kit/mlx5kit/sim"
)

// A program under the launcher joins the shared fabric and never leaves
// it: its ring file and its slot in the fabric's registry stay in /dev/shm
// after it exits. So before it runs the program, the launcher starts a
// sweeper: a process of its own executable (-sweep-after PID) that waits
// for the program to end and then calls sim.SweepFabric, which removes
// what processes that are gone left of the fabric.
//
// The sweeper must not be the program's child: a program that waits for
// all its children would wait for it, which waits for the program. So the
// launcher starts a first stage, which starts the sweeper proper in a
// session of its own and exits; the sweeper is then adopted by init (or
// the nearest subreaper). It holds no terminal and none of the launcher's
// standard files, and the launcher goes on only once the sweeper watches
// the process (or after sweeperReady), through a pipe that the sweeper
// closes.

// envSweepReady names the descriptor of the readiness pipe in the
// sweeper's stages.
const envSweepReady = "MLX5KIT_EMULATE_SWEEP_READY"

// sweeperReady bounds the launcher's wait for its sweeper.
const sweeperReady = 5 * time.Second

// sweeperEnv returns the sweeper's environment: env without the preload
// and the link variable (its -fabric would meet a -tcp taken from that),
// and with the descriptor it signals readiness on.
func sweeperEnv(env []string) []string {
	return append(withoutVars(env, envPreload, envSweepReady, envTCP), envSweepReady+"=3")
}

// startSweeper starts the sweeper of the fabric for this process (the
// program after execve) and returns once it watches it.
func startSweeper(fabric string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	cmd := exec.Command(self, "-fabric", fabric, "-sweep-after", strconv.Itoa(os.Getpid()))
	cmd.Env = sweeperEnv(os.Environ())
	cmd.ExtraFiles = []*os.File{w}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	err = cmd.Start()
	w.Close()
	if err != nil {
		return err
	}
	// End of file once every stage has closed its end of the pipe.
	_ = r.SetReadDeadline(time.Now().Add(sweeperReady))
	_, rerr := io.Copy(io.Discard, r)
	if werr := cmd.Wait(); werr != nil {
		return fmt.Errorf("sweeper: %w", werr)
	}
	if rerr != nil {
		return fmt.Errorf("sweeper: not ready within %v: %w", sweeperReady, rerr)
	}
	return nil
}

// sweepAfter is the sweeper's stages (-sweep-after pid): the first,
// started by the launcher, starts the second and exits; the second waits
// for the process pid to end and sweeps the fabric.
func sweepAfter(fabric string, pid int, stderr io.Writer) int {
	var ready *os.File
	if fd, err := strconv.Atoi(os.Getenv(envSweepReady)); err == nil && fd > 2 {
		ready = os.NewFile(uintptr(fd), "sweeper ready")
	}
	if os.Getppid() == pid && ready != nil {
		self, err := os.Executable()
		if err != nil {
			fmt.Fprintf(stderr, "mlx5kit-emulate: sweeper: %v\n", err)
			return 1
		}
		cmd := exec.Command(self, os.Args[1:]...)
		cmd.ExtraFiles = []*os.File{ready}
		cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
		if err := cmd.Start(); err != nil {
			fmt.Fprintf(stderr, "mlx5kit-emulate: sweeper: %v\n", err)
			return 1
		}
		return 0
	}
	wait, err := watch(pid)
	if ready != nil {
		ready.Close()
	}
	if err != nil {
		fmt.Fprintf(stderr, "mlx5kit-emulate: sweeper: process %d: %v\n", pid, err)
		return 1
	}
	wait()
	if err := sim.SweepFabric(fabric); err != nil {
		fmt.Fprintf(stderr, "mlx5kit-emulate: sweeper: %v\n", err)
		return 1
	}
	return 0
}

// watch starts watching the process pid and returns a function that
// returns once it has ended: through a pidfd, else by looking at it every
// 200 ms (it is the same process while its start time is).
func watch(pid int) (wait func(), err error) {
	_, start, err := procstat.Read(pid)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return func() {}, nil
		}
		return nil, err
	}
	if fd, err := unix.PidfdOpen(pid, 0); err == nil {
		return func() {
			defer unix.Close(fd)
			fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
			for {
				if _, err := unix.Poll(fds, -1); err != unix.EINTR {
					return
				}
			}
		}, nil
	}
	return func() {
		for {
			state, s, err := procstat.Read(pid)
			if err != nil || s != start || procstat.Ended(state) {
				return
			}
			time.Sleep(200 * time.Millisecond)
		}
	}, nil
}

// withoutVars returns env without the variables named.
func withoutVars(env []string, names ...string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		k, _, _ := strings.Cut(kv, "=")
		drop := false
		for _, n := range names {
			drop = drop || k == n
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}
