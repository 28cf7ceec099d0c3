package sim

import (
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// envSmallShm names the child role of TestSharedFullFileSystem: the test
// to run on a small tmpfs of its own mount namespace.
const envSmallShm = "MLX5KIT_SIM_TEST_SMALL_SHM"

// smallShmSize is the size of that tmpfs: a fabric's registry and two
// processes' ring files fit, a ring of 32 MiB does not.
const smallShmSize = 4 << 20

// TestSharedFullFileSystem runs the tests below in a child process with
// a mount namespace of its own, where the fabric's files lie on a 4 MiB
// tmpfs (a container's /dev/shm is 64 MiB by default, a ring 32 MiB).
// A store into a page of a shared mapping that a full tmpfs cannot give
// kills the process with SIGBUS: the child's exit says whether any did.
func TestSharedFullFileSystem(t *testing.T) {
	if os.Getenv(envSmallShm) != "" {
		t.Skip("the child's own tests run instead")
	}
	skipOnEmulatedCPU(t)
	for _, name := range []string{"TestSmallShmStream", "TestSmallShmJoin"} {
		t.Run(name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^"+name+"$", "-test.count=1", "-test.v")
			cmd.Env = append(os.Environ(), envSmallShm+"=1")
			cmd.SysProcAttr = namespaced(0)
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Skipf("no mount namespace for a small tmpfs: %v", err)
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				_ = cmd.Process.Kill()
				err = <-done
				t.Errorf("the child ran for more than 60 s")
			}
			if bytes.Contains(out.Bytes(), []byte("no small tmpfs:")) {
				t.Skipf("the child could not mount a tmpfs:\n%s", out.String())
			}
			require.NoError(t, err, "the child:\n%s", out.String())
			require.Contains(t, out.String(), "--- PASS: "+name, "the child:\n%s", out.String())
		})
	}
}

// namespaced is the attributes of a child process with a mount namespace
// of its own, private (where it may mount), and the namespaces clone
// names; a user namespace of its own too where this process is not root.
func namespaced(clone uintptr) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Unshareflags: syscall.CLONE_NEWNS, Cloneflags: clone}
	if os.Getuid() != 0 {
		a.Cloneflags |= syscall.CLONE_NEWUSER
		a.UidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getuid(), Size: 1}}
		a.GidMappings = []syscall.SysProcIDMap{{ContainerID: 0, HostID: os.Getgid(), Size: 1}}
	}
	return a
}

// smallShm mounts a tmpfs of smallShmSize bytes, private to this child's
// mount namespace, and points the fabric's files at it.
func smallShm(t *testing.T) string {
	if os.Getenv(envSmallShm) == "" {
		t.Skip("run by TestSharedFullFileSystem in a mount namespace of its own")
	}
	dir := t.TempDir()
	if err := unix.Mount("tmpfs", dir, "tmpfs", 0, "size=4m"); err != nil {
		t.Skipf("no small tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = unix.Unmount(dir, 0) })
	old := shmDir
	shmDir = dir
	t.Cleanup(func() { shmDir = old })
	return dir
}

// TestSmallShmStream: a stream of RDMA WRITEs, 8 MiB in all, toward a
// process that takes none for a while, through a ring whose file system
// holds 4 MiB. The sender's ring walks into pages the file system cannot
// give; the messages it cannot place are counted (RingNoSpace) and sent
// again once the consumer has read the ring, which the producer then
// writes from its front. Every WRITE completes, in order, with its bytes.
func TestSmallShmStream(t *testing.T) {
	smallShm(t)
	e1, e2 := sharedPair(t)
	a := e1.newQP(e1.pd, qpOpts{typ: ctx.QPTypeRC, sendDepth: 64})
	b := e2.newQP(e2.pd, qpOpts{typ: ctx.QPTypeRC})
	connectRCRetry(t, e1, e2, a, b, 7)
	const size, n = 256 << 10, 32
	for i := 0; i < n/8; i++ {
		fill(e1.mem(i*size%(1<<20), size), int64(i+1))
	}
	// The consumer's engine held while the stream leaves.
	e2.f.mu.Lock()
	for i := 0; i < n; i++ {
		off := i * size % (1 << 20)
		a.write(a.build(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e2.addr(off), e2.mr.RKey()), dataSeg(size, e1.mr.LKey(), e1.addr(off))))
	}
	a.ring()
	end := time.Now().Add(10 * time.Second)
	for e1.f.Stats().RingNoSpace == 0 && time.Now().Before(end) {
		time.Sleep(time.Millisecond)
	}
	e2.f.mu.Unlock()
	require.NotZero(t, e1.f.Stats().RingNoSpace, "the ring never met the full file system")
	for i := 0; i < n; i++ {
		c := waitCQE(t, a.scq, 20*time.Second)
		require.Equal(t, prm.CQEReq, c.op, "WRITE %d: %+v", i, c)
	}
	require.Equal(t, e1.mem(0, 1<<20), e2.mem(0, 1<<20))
}

// TestSmallShmJoin: a process that joins a fabric whose file system is
// full is refused with ENOSPC, naming the file, rather than killed at its
// first store into the registry or its ring file.
func TestSmallShmJoin(t *testing.T) {
	dir := smallShm(t)
	// Fill the file system.
	big, err := os.Create(filepath.Join(dir, "filler"))
	require.NoError(t, err)
	chunk := make([]byte, 64<<10)
	for {
		if _, err := big.Write(chunk); err != nil {
			require.True(t, errors.Is(err, unix.ENOSPC), "%v", err)
			break
		}
	}
	require.NoError(t, big.Close())
	f := New(Options{Mode: Engine, Fabric: testFabricName(t)})
	defer f.Close()
	_, err = f.Open("sim0")
	require.ErrorIs(t, err, unix.ENOSPC)
	require.ErrorContains(t, err, "registry")

	// Room for the registry, not for a ring file's front pages.
	require.NoError(t, os.Truncate(filepath.Join(dir, "filler"), smallShmSize-2*regSize-4096))
	f2 := New(Options{Mode: Engine, Fabric: testFabricName(t)})
	defer f2.Close()
	_, err = f2.Open("sim0")
	require.ErrorIs(t, err, unix.ENOSPC)
	require.ErrorContains(t, err, "allocate "+ringPath(f2.opts.Fabric, 0))
}
