package sim

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// envPidnsFabric names the fabric the child of
// TestSharedLivenessAcrossPIDNamespaces joins.
const envPidnsFabric = "MLX5KIT_SIM_TEST_PIDNS_FABRIC"

// TestSharedLivenessAcrossPIDNamespaces: a process of the fabric in a pid
// namespace of its own, with its own /proc (a container that shares
// /dev/shm but not its pids, as the containers of a Kubernetes pod do),
// is alive to a process of another: one that joins after it takes another
// slot, leaves its ring file in place, and reaches its QPs. Its pid, read
// in this namespace, names no process or another one; the slot was
// taken as a dead process's, its ring file removed.
func TestSharedLivenessAcrossPIDNamespaces(t *testing.T) {
	if os.Getenv(envPidnsFabric) != "" {
		t.Skip("the child's own test runs instead")
	}
	if testing.Short() {
		t.Skip("starts a second process")
	}
	skipOnEmulatedCPU(t)
	name := testFabricName(t)
	cmd := exec.Command(os.Args[0], "-test.run", "^TestPidnsChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), envPidnsFabric+"="+name)
	cmd.SysProcAttr = namespaced(syscall.CLONE_NEWPID)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	if err := cmd.Start(); err != nil {
		t.Skipf("no pid namespace: %v", err)
	}
	t.Cleanup(func() {
		_ = stdin.Close()
		_ = cmd.Wait()
	})
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if l := sc.Text(); strings.HasPrefix(l, "SLOT ") || strings.HasPrefix(l, "no proc:") {
				lines <- l
			}
		}
		close(lines)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
		_ = cmd.Process.Kill()
		t.Fatal("the child did not join within 30 s")
	}
	if strings.HasPrefix(line, "no proc:") {
		t.Skipf("the child could not mount its /proc: %s", line)
	}
	var childSlot int
	var childQPN uint32
	_, err = fmt.Sscanf(line, "SLOT %d %d", &childSlot, &childQPN)
	require.NoError(t, err, "the child said %q", line)

	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	_, slot := e.f.SharedFabric()
	require.NotEqual(t, childSlot, slot, "the live child's slot was taken")
	require.FileExists(t, ringPath(name, childSlot))
	require.True(t, e.f.Reaches(childQPN), "the child's QP is reached")
}

// TestPidnsChild is the child of TestSharedLivenessAcrossPIDNamespaces:
// pid 1 of its namespace, it mounts its own /proc, joins the fabric,
// says its slot and a QPN of its own, and stays until its input closes.
func TestPidnsChild(t *testing.T) {
	name := os.Getenv(envPidnsFabric)
	if name == "" {
		t.Skip("run by TestSharedLivenessAcrossPIDNamespaces")
	}
	if err := unix.Mount("proc", "/proc", "proc", 0, ""); err != nil {
		fmt.Println("no proc:", err)
		return
	}
	require.Equal(t, 1, os.Getpid())
	e := newEnv(t, Options{Mode: Engine, Fabric: name})
	q := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	_, slot := e.f.SharedFabric()
	fmt.Printf("SLOT %d %d\n", slot, q.qp.QPN())
	_, _ = io.Copy(io.Discard, os.Stdin)
}
