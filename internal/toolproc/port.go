package toolproc

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// portTries is how many ports ServeOnPort tries before it fails the test.
const portTries = 5

// pickPort returns a TCP port that nothing listens on now, for
// ServeOnPort's server: the port of a loopback listener on port 0, closed
// again. Another process may take it before the server listens on it.
// Tests replace it to hand the server a port that is taken.
var pickPort = func() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	port := ln.Addr().(*net.TCPAddr).Port
	return port, ln.Close()
}

// ServeOnPort starts a server that listens on a TCP port it is given and
// does not say which port it bound (Debian's perftest and ibverbs-utils
// programs, -p PORT), and returns it once it listens, with its port. start
// returns the server's command for a port, not started: ServeOnPort sends
// its output and errors to a buffer of its own (the returned Server's
// Output), gives it a WaitDelay of a second where it has none, starts it
// and watches it (Watch).
//
// The port is one found free a moment before, which another process may
// take before the server binds it: the server then exits at once, or it
// listens beside the other process's listener (another address, or
// SO_REUSEPORT), where a client may reach the other process. So the server
// counts as listening only once a socket of its own listens on the port:
// the inode of a listening socket on the port in /proc/net/tcp or
// /proc/net/tcp6 is the inode of a socket open in the process or one of
// its descendants (a launcher may exec the program, or start it as a
// child). A server that exits before it listens, or beside which another
// process listens on the port, is killed and started again on another
// port, up to portTries ports; then t fails with each try's report. t
// fails at once where the server neither listens nor exits within timeout
// on one port.
func ServeOnPort(t testing.TB, timeout time.Duration, start func(port int) *exec.Cmd) (*Server, int) {
	t.Helper()
	var tries []string
	for range portTries {
		port, err := pickPort()
		if err != nil {
			t.Fatalf("pick a port for the server: %v", err)
			return nil, 0
		}
		cmd := start(port)
		out := new(Buffer)
		cmd.Stdout, cmd.Stderr = out, out
		if cmd.WaitDelay == 0 {
			// A process the server started that outlives it keeps
			// its output open: the server has exited a second
			// after it did.
			cmd.WaitDelay = time.Second
		}
		if err := cmd.Start(); err != nil {
			t.Fatalf("start the server on port %d: %v", port, err)
			return nil, 0
		}
		s := Watch(cmd, out)
		why, err := s.awaitListen(cmd.Process.Pid, port, timeout)
		switch {
		case err != nil:
			s.kill(cmd)
			t.Fatalf("port %d: %v\n%s", port, err, s.Report())
			return nil, 0
		case why == "":
			return s, port
		}
		s.kill(cmd)
		tries = append(tries, fmt.Sprintf("port %d: %s; %s", port, why, s.Report()))
	}
	t.Fatalf("the server did not listen on any of %d ports:\n%s", portTries, strings.Join(tries, "\n"))
	return nil, 0
}

// awaitListen waits until a socket of the server, whose process is pid,
// listens on port, and returns "". It returns why the server is to be
// tried on another port where it exits before it listens or another
// process listens on the port, and an error where timeout passes first or
// /proc cannot be read.
func (s *Server) awaitListen(pid, port int, timeout time.Duration) (why string, err error) {
	listened := s.await(timeout, 10*time.Millisecond, func(exited bool) bool {
		// The listening sockets before the server's: a socket listens
		// only once it is open, so one of the server's that listens is
		// among its open sockets read afterwards.
		listeners, lerr := listeningInodes(port)
		if lerr != nil {
			err = lerr
			return true
		}
		if len(listeners) > 0 {
			own := socketInodes(processTree(pid))
			var others int
			for _, ino := range listeners {
				if !own[ino] {
					others++
				}
			}
			switch {
			case others > 0:
				why = fmt.Sprintf("another process listens on it (%d of its %d listening sockets are not the server's)", others, len(listeners))
				return true
			case !exited:
				return true
			}
		}
		if exited {
			why = "the server exited before it listened"
		}
		return exited
	})
	if !listened {
		return "", fmt.Errorf("the server did not listen within %v", timeout)
	}
	return why, err
}

// kill kills the server, cmd, and the processes it started, and waits
// for it to exit; a server that has exited is left as it is.
func (s *Server) kill(cmd *exec.Cmd) {
	if !s.Exited() {
		tree := processTree(cmd.Process.Pid)
		for _, pid := range tree[1:] {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
		}
		_ = cmd.Process.Kill()
	}
	_ = s.Wait()
}

// listeningInodes returns the inodes of the sockets that listen on TCP
// port, on any address, IPv4 or IPv6, from /proc/net/tcp and
// /proc/net/tcp6; a system without IPv6 has no tcp6, but one without tcp
// is an error.
func listeningInodes(port int) ([]string, error) {
	var inodes []string
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		file, err := os.Open(f)
		if err != nil {
			if f == "/proc/net/tcp6" && os.IsNotExist(err) {
				continue
			}
			return nil, err
		}
		sc := bufio.NewScanner(file)
		sc.Scan() // the header
		for sc.Scan() {
			// sl local_address rem_address st tx:rx tr:when retrnsmt
			// uid timeout inode ...; the address is HEXADDR:HEXPORT,
			// state 0A is TCP_LISTEN.
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || fields[3] != "0A" || fields[9] == "0" {
				continue
			}
			i := strings.LastIndexByte(fields[1], ':')
			if p, err := strconv.ParseUint(fields[1][i+1:], 16, 16); err == nil && int(p) == port {
				inodes = append(inodes, fields[9])
			}
		}
		err = sc.Err()
		_ = file.Close()
		if err != nil {
			return nil, fmt.Errorf("read %s: %w", f, err)
		}
	}
	return inodes, nil
}

// processTree returns pid and its descendants, pid first, from the parent
// process IDs of /proc/<pid>/stat; a process that exits meanwhile is left
// out.
func processTree(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces and
		// parentheses, so the fields count from its last ')'.
		i := strings.LastIndexByte(string(stat), ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(fields[1]); err == nil {
			children[ppid] = append(children[ppid], child)
		}
	}
	tree := []int{pid}
	for i := 0; i < len(tree); i++ {
		tree = append(tree, children[tree[i]]...)
	}
	return tree
}

// socketInodes returns the inodes of the sockets open in the processes,
// read from the links /proc/<pid>/fd/* ("socket:[INODE]").
func socketInodes(pids []int) map[string]bool {
	inodes := map[string]bool{}
	for _, pid := range pids {
		dir := filepath.Join("/proc", strconv.Itoa(pid), "fd")
		fds, _ := os.ReadDir(dir)
		for _, fd := range fds {
			link, err := os.Readlink(filepath.Join(dir, fd.Name()))
			if err != nil {
				continue
			}
			if ino, ok := strings.CutPrefix(link, "socket:["); ok {
				inodes[strings.TrimSuffix(ino, "]")] = true
			}
		}
	}
	return inodes
}
