package channel_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/sim"
)

// The two-process tests re-execute the test binary to run TestChannelChild
// in a role; the processes join one shared fabric of the software HCA.
const (
	envChannelRole = "MLX5KIT_CHANNEL_TEST_ROLE"
	envChannelAddr = "MLX5KIT_CHANNEL_TEST_ADDR"
	envChannelKey  = "MLX5KIT_CHANNEL_TEST_KEY"
	envChannelRank = "MLX5KIT_CHANNEL_TEST_RANK"
	// envChannelRanks is the number of processes of a mesh test.
	envChannelRanks = "MLX5KIT_CHANNEL_TEST_RANKS"
)

// TestChannelChild plays the server or the client of the TCP example in a
// process of its own; it does nothing unless a parent test started it.
func TestChannelChild(t *testing.T) {
	role := os.Getenv(envChannelRole)
	if role == "" {
		t.Skip("the child of the two-process channel tests")
	}
	key, err := hex.DecodeString(os.Getenv(envChannelKey))
	require.NoError(t, err)
	sec := endpoint.Security{Key: key}
	switch role {
	case "server":
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		fmt.Printf("ADDR %s\n", ln.Addr())
		fmt.Printf("RESULT %s\n", server(ln, sec))
	case "client":
		fmt.Printf("RESULT %s\n", client(os.Getenv(envChannelAddr), sec))
	case "mesh":
		rank, err := strconv.Atoi(os.Getenv(envChannelRank))
		require.NoError(t, err)
		meshRank(rank, sec)
	case "meshwatch":
		rank, err := strconv.Atoi(os.Getenv(envChannelRank))
		require.NoError(t, err)
		fmt.Printf("RESULT %s\n", meshWatchRank(rank, sec))
	}
}

// meshRanks is the number of processes of the mesh a child joins.
func meshRanks() int {
	n, err := strconv.Atoi(os.Getenv(envChannelRanks))
	if err != nil {
		return 3
	}
	return n
}

// meshRank joins a mesh of meshRanks() processes as rank (rank 0 listens and
// prints its address), writes a message and 4 KiB into every other rank's
// memory, reads them back and prints the result; then it stays in the mesh until
// the parent closes stdin (every rank is done with every other).
func meshRank(rank int, sec endpoint.Security) {
	res := meshWork(rank, sec, func() { _, _ = io.Copy(io.Discard, os.Stdin) })
	if res != "" {
		fmt.Printf("RESULT %s\n", res)
	}
}

// meshWork does meshRank's work; it prints the result "ok" itself and
// calls stay before it closes the mesh, or returns what went wrong.
func meshWork(rank int, sec endpoint.Security, stay func()) string {
	dev, pd, buf, mr, err := setup("sim0")
	if err != nil {
		return err.Error()
	}
	defer buf.Close()
	defer dev.Close()
	meshRanks := meshRanks()
	p, err := channel.NewMulti(pd, meshRanks, channel.Options{WaitTimeout: 10 * time.Second})
	if err != nil {
		return err.Error()
	}
	if err := p.Share(mr); err != nil {
		return err.Error()
	}
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	mc, err := joinMesh(c, p, rank, meshRanks, endpoint.MeshOptions{Security: sec})
	if err != nil {
		return err.Error()
	}
	defer mc.Close()
	for j := range meshRanks {
		if j == rank {
			continue
		}
		region, err := mc.RemoteRegion(j, 0)
		if err != nil {
			return err.Error()
		}
		msg := fmt.Sprintf("rank %d was here", rank)
		copy(mr.Bytes()[j*64:], msg)
		at := uint64(8192 + rank*64)
		if err := mc.Write(context.Background(), channel.WriteRequest{Peer: j, Local: []channel.SGE{channel.Slice(mr, j*64, len(msg))}, Remote: channel.At(region, at)}); err != nil {
			return err.Error()
		}
		if err := mc.Read(context.Background(), channel.ReadRequest{Peer: j, Local: []channel.SGE{channel.Slice(mr, 16384+j*64, len(msg))}, Remote: channel.At(region, at)}); err != nil {
			return err.Error()
		}
		if got := string(mr.Bytes()[16384+j*64 : 16384+j*64+len(msg)]); got != msg {
			return fmt.Sprintf("read %q back from rank %d", got, j)
		}
		// Then 4 KiB in four writes, read back whole.
		src := mr.Bytes()[20480 : 20480+4096]
		for i := range src {
			src[i] = byte(i*7 + rank*31 + j)
		}
		base := uint64(32768 + rank*4096)
		for k := 0; k < 4; k++ {
			if err := mc.Write(context.Background(), channel.WriteRequest{Peer: j, Local: []channel.SGE{channel.Slice(mr, 20480+k*1024, 1024)}, Remote: channel.At(region, base+uint64(k*1024))}); err != nil {
				return err.Error()
			}
		}
		back := 49152 + j*4096
		if err := mc.Read(context.Background(), channel.ReadRequest{Peer: j, Local: []channel.SGE{channel.Slice(mr, back, 4096)}, Remote: channel.At(region, base)}); err != nil {
			return err.Error()
		}
		if !bytes.Equal(mr.Bytes()[back:back+4096], src) {
			return fmt.Sprintf("4 KiB read back from rank %d differ", j)
		}
	}
	fmt.Printf("RESULT ok\n")
	stay()
	return ""
}

// joinMesh joins p to a mesh of n processes as rank: rank 0 listens and
// prints its address, the others dial the address in envChannelAddr.
func joinMesh(c context.Context, p *channel.PreparedMulti, rank, n int, opts endpoint.MeshOptions) (*channel.MultiChannel, error) {
	if rank != 0 {
		return p.DialMesh(c, os.Getenv(envChannelAddr), rank, opts)
	}
	l, err := endpoint.ListenMesh(c, "127.0.0.1:0", n, opts)
	if err != nil {
		return nil, err
	}
	fmt.Printf("ADDR %s\n", l.Addr())
	return p.AcceptMesh(c, l)
}

func channelChild(t *testing.T, env ...string) (io.WriteCloser, *bufio.Scanner) {
	in, out, _ := channelChildCmd(t, env...)
	return in, out
}

// channelChildCmd is channelChild that also returns the child's command.
func channelChildCmd(t *testing.T, env ...string) (io.WriteCloser, *bufio.Scanner, *exec.Cmd) {
	cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(cx, os.Args[0], "-test.run=^TestChannelChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	in, err := cmd.StdinPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
		if stderr.Len() > 0 {
			t.Logf("child stderr: %s", stderr.String())
		}
	})
	return in, bufio.NewScanner(out), cmd
}

// find reads lines until one starts with prefix and returns the rest.
func find(t *testing.T, sc *bufio.Scanner, prefix string) string {
	for sc.Scan() {
		if s, ok := strings.CutPrefix(sc.Text(), prefix); ok {
			return s
		}
	}
	t.Fatalf("no %q line from the child", prefix)
	return ""
}

// TestHandshakeConnTwoProcesses runs the TCP example's server and client in
// two processes: HandshakeConn swaps the endpoints, then a SEND, an RDMA
// WRITE and a SEND with immediate cross between the processes.
func TestHandshakeConnTwoProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes")
	}
	common := childEnv(t, "handshake")
	_, sout := channelChild(t, append(common, envChannelRole+"=server")...)
	addr := find(t, sout, "ADDR ")
	_, cout := channelChild(t, append(common, envChannelRole+"=client", envChannelAddr+"="+addr)...)
	require.Equal(t, `got "PONG" back`, find(t, cout, "RESULT "))
	require.Equal(t, `got "ping", wrote the reply`, find(t, sout, "RESULT "))
}

// childEnv returns the environment of the children of one test: a fabric
// of their own (removed at the end) and a key.
func childEnv(t *testing.T, test string) []string {
	name := "channel-" + test + "-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		files, _ := filepath.Glob("/dev/shm/mlx5kit-" + name + "-*")
		for _, f := range files {
			_ = os.Remove(f)
		}
	})
	key := hex.EncodeToString(bytes.Repeat([]byte{0x5a}, 32))
	return []string{sim.EnvFabric + "=" + name, envChannelKey + "=" + key}
}

// TestMeshThreeProcesses: AcceptMesh and DialMesh with three processes on
// the software HCA; every rank writes into every other's memory and reads
// it back.
func TestMeshThreeProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	meshProcesses(t, "mesh", 3)
}

// TestMeshFourProcesses: the same with four processes, each reaching
// three others through the shared fabric.
func TestMeshFourProcesses(t *testing.T) {
	if testing.Short() {
		t.Skip("starts four processes")
	}
	meshProcesses(t, "mesh4", 4)
}

// meshProcesses runs a mesh of n processes on the fabric of test.
func meshProcesses(t *testing.T, test string, n int) {
	common := append(childEnv(t, test), envChannelRanks+"="+strconv.Itoa(n))
	in0, out0 := channelChild(t, append(common, envChannelRole+"=mesh", envChannelRank+"=0")...)
	addr := find(t, out0, "ADDR ")
	ins := []io.WriteCloser{in0}
	outs := []*bufio.Scanner{out0}
	for r := 1; r < n; r++ {
		in, out := channelChild(t, append(common, envChannelRole+"=mesh", envChannelRank+"="+strconv.Itoa(r), envChannelAddr+"="+addr)...)
		ins, outs = append(ins, in), append(outs, out)
	}
	results := make([]string, len(outs))
	for r, out := range outs {
		results[r] = find(t, out, "RESULT ")
	}
	for r := range outs {
		require.Equal(t, "ok", results[r], "rank %d (all: %q)", r, results)
	}
	for _, in := range ins {
		require.NoError(t, in.Close())
	}
}

// meshWatchRank joins a mesh of three processes with an endpoint.MeshWatch
// and prints "JOINED"; ranks 0 and 1 then wait for a message from rank 2
// under the watch's context and return what the wait ended with, rank 2
// waits for stdin to close (the parent kills it first).
func meshWatchRank(rank int, sec endpoint.Security) string {
	dev, pd, buf, mr, err := setup("sim0")
	if err != nil {
		return err.Error()
	}
	defer buf.Close()
	defer dev.Close()
	p, err := channel.NewMulti(pd, 3, channel.Options{WaitTimeout: 10 * time.Second})
	if err != nil {
		return err.Error()
	}
	c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	w := &endpoint.MeshWatch{Interval: 20 * time.Millisecond}
	defer w.Close()
	mc, err := joinMesh(c, p, rank, 3, endpoint.MeshOptions{Security: sec, Watch: w})
	if err != nil {
		return err.Error()
	}
	defer mc.Close()
	fmt.Printf("JOINED\n")
	if rank == 2 {
		_, _ = io.Copy(io.Discard, os.Stdin)
		return "stayed"
	}
	watched, stop := w.Context(c)
	defer stop()
	_, err = mc.Receive(watched, channel.RecvRequest{Peer: 2, Local: []channel.SGE{channel.Slice(mr, 0, 64)}})
	switch {
	case err == nil:
		return "received, from a rank that was killed"
	case errors.Is(err, endpoint.ErrPeerGone) && errors.Is(err, channel.ErrFailed):
		return "gone: " + err.Error()
	}
	return "other: " + err.Error()
}

// TestMeshWatchKilledRank: in a mesh of three processes with a MeshWatch,
// rank 2 is killed while ranks 0 and 1 wait for a message from it; both
// waits end with endpoint.ErrPeerGone, rank 1's (which has no connection
// to rank 2) through rank 0's word.
func TestMeshWatchKilledRank(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three processes")
	}
	common := append(childEnv(t, "meshwatch"), envChannelRanks+"=3", envChannelRole+"=meshwatch")
	_, out0, _ := channelChildCmd(t, append(common, envChannelRank+"=0")...)
	addr := find(t, out0, "ADDR ")
	_, out1, _ := channelChildCmd(t, append(common, envChannelRank+"=1", envChannelAddr+"="+addr)...)
	_, out2, victim := channelChildCmd(t, append(common, envChannelRank+"=2", envChannelAddr+"="+addr)...)
	for r, out := range []*bufio.Scanner{out0, out1, out2} {
		require.Equal(t, "", find(t, out, "JOINED"), "rank %d", r)
	}
	start := time.Now()
	require.NoError(t, victim.Process.Signal(syscall.SIGKILL))
	r0, r1 := find(t, out0, "RESULT "), find(t, out1, "RESULT ")
	t.Logf("after the kill: %v\nrank 0: %s\nrank 1: %s", time.Since(start), r0, r1)
	require.True(t, strings.HasPrefix(r0, "gone: "), "rank 0: %s", r0)
	require.Contains(t, r0, "rank 2 closed its connection")
	require.True(t, strings.HasPrefix(r1, "gone: "), "rank 1: %s", r1)
	require.Contains(t, r1, `rank 0 says "rank 2 is gone"`)
}
