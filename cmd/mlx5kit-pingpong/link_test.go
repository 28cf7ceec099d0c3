package main

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/toolproc"
	"github.com/mlx5kit/mlx5kit/sim"
)

// freeAddr returns a loopback address with a port free a moment ago,
// which another process may take before the listener meant for it.
func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}

// TestServerClientOverTCPLink runs -server and -client in two processes
// whose software HCAs are linked over TCP (sim.EnvLink), as on two hosts
// without RDMA NICs: each names a shared fabric of its own, which the link
// replaces, so that only the link can join them.
func TestServerClientOverTCPLink(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two processes")
	}
	// The link's listener (sim.EnvLink) is the software HCA's, made when
	// the server opens its device, and prints no address: it keeps a
	// port free a moment ago, which another process may take first. The
	// server's own port is the one it chooses and prints.
	link := freeAddr(t)
	key := sim.EnvLinkKey + "=pingpong-link-key-0123456789"
	hostA, hostB := sim.EnvFabric+"=link-test-a", sim.EnvFabric+"=link-test-b"
	server := toolproc.Watch(toolProcess(t, []string{hostA, sim.EnvLink + "=listen:" + link, key}, "-provider", "sim", "-server", "127.0.0.1:0"))
	addr := server.ListenAddress(t, listenWait)
	out := server.RetryClient(t, 50, 50*time.Millisecond, toolproc.Refused, func() (string, error) {
		client, cout := toolProcess(t, []string{hostB, sim.EnvLink + "=" + link, key}, "-provider", "sim", "-client", addr, "-iters", "500", "-size", "8")
		err := client.Wait()
		return cout.String(), err
	})
	require.NoError(t, server.Wait(), "server: %s", server.Output())
	require.Equal(t, 500, parseTable(t, out).iters, out)
	t.Logf("client:\n%s", out)
}
