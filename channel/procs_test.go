package channel_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/sim"
)

// The two-process tests re-execute the test binary to run TestChannelChild
// in a role; the processes join one shared fabric of the software HCA.
const (
	envChannelRole = "MLX5KIT_CHANNEL_TEST_ROLE"
	envChannelAddr = "MLX5KIT_CHANNEL_TEST_ADDR"
	envChannelKey  = "MLX5KIT_CHANNEL_TEST_KEY"
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
	}
}

func channelChild(t *testing.T, env ...string) (*exec.Cmd, *bufio.Scanner) {
	cx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	cmd := exec.CommandContext(cx, os.Args[0], "-test.run=^TestChannelChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.StdoutPipe()
	require.NoError(t, err)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Wait()
		if stderr.Len() > 0 {
			t.Logf("child stderr: %s", stderr.String())
		}
	})
	return cmd, bufio.NewScanner(out)
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
	name := "channel-test-" + strconv.Itoa(os.Getpid())
	t.Cleanup(func() {
		files, _ := filepath.Glob("/dev/shm/mlx5kit-" + name + "-*")
		for _, f := range files {
			_ = os.Remove(f)
		}
	})
	key := hex.EncodeToString(bytes.Repeat([]byte{0x5a}, 32))
	common := []string{sim.EnvFabric + "=" + name, envChannelKey + "=" + key}
	_, sout := channelChild(t, append(common, envChannelRole+"=server")...)
	addr := find(t, sout, "ADDR ")
	_, cout := channelChild(t, append(common, envChannelRole+"=client", envChannelAddr+"="+addr)...)
	require.Equal(t, `got "PONG" back`, find(t, cout, "RESULT "))
	require.Equal(t, `got "ping", wrote the reply`, find(t, sout, "RESULT "))
}
