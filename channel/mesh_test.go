package channel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// TestMeshAllToAll connects 4 ranks over TCP and runs an all-to-all
// exchange: every rank sends a distinct message to every rank (itself
// included, over its loopback queue pair) and gathers one from each.
func TestMeshAllToAll(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			const ranks = 4
			f := newFabric(t, ranks)
			hosts := make([]*host, ranks)
			prepared := make([]*channel.PreparedMulti, ranks)
			for i := range hosts {
				hosts[i] = newHost(t, f, i, 1<<16)
				p, err := channel.NewMulti(hosts[i].pd, ranks, channel.Options{Transport: tr, WaitTimeout: 10 * time.Second})
				require.NoError(t, err)
				prepared[i] = p
			}
			c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			mcs, err := channel.Mesh(c, "127.0.0.1:0", prepared)
			require.NoError(t, err)
			for _, m := range mcs {
				defer m.Close()
			}
			msg := func(from, to int) string { return fmt.Sprintf("from %d to %d", from, to) }
			var wg sync.WaitGroup
			errs := make([]error, ranks)
			for r := 0; r < ranks; r++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					h, m := hosts[r], mcs[r]
					recvs := make([]channel.RecvRequest, ranks)
					sends := make([]channel.SendRequest, ranks)
					for j := 0; j < ranks; j++ {
						recvs[j] = channel.RecvRequest{Peer: j, Local: h.sge(4096+j*64, 64)}
						copy(h.bytes()[j*64:], msg(r, j))
						sends[j] = channel.SendRequest{Peer: j, Local: h.sge(j*64, len(msg(r, j)))}
					}
					errs[r] = m.Scope(context.Background(), func(s *channel.Scope) error {
						if err := s.PostGatherReceive(recvs); err != nil {
							return err
						}
						return s.PostScatterSend(sends)
					})
				}()
			}
			wg.Wait()
			for r := 0; r < ranks; r++ {
				require.NoError(t, errs[r], "rank %d", r)
				for j := 0; j < ranks; j++ {
					want := msg(j, r)
					require.Equal(t, want, string(hosts[r].bytes()[4096+j*64:4096+j*64+len(want)]), "rank %d from %d", r, j)
				}
			}
		})
	}
}

func TestMeshRefusesMismatchedRanks(t *testing.T) {
	f := newFabric(t, 2)
	h := newHost(t, f, 0, 4096)
	p, err := channel.NewMulti(h.pd, 3, channel.Options{})
	require.NoError(t, err)
	defer p.Close()
	_, err = channel.Mesh(context.Background(), "127.0.0.1:0", []*channel.PreparedMulti{p})
	require.ErrorIs(t, err, channel.ErrHandshake)
}

// TestAcceptDialMesh: rank 0 accepts, the others dial with the mesh's key
// and the ranks write into each other's memory; a rank with another key
// is refused before it connects anything.
func TestAcceptDialMesh(t *testing.T) {
	const ranks = 3
	f := newFabric(t, ranks)
	hosts := make([]*host, ranks)
	prepared := make([]*channel.PreparedMulti, ranks)
	for i := range hosts {
		hosts[i] = newHost(t, f, i, 1<<16)
		p, err := channel.NewMulti(hosts[i].pd, ranks, channel.Options{WaitTimeout: 10 * time.Second})
		require.NoError(t, err)
		require.NoError(t, p.Share(hosts[i].mr))
		prepared[i] = p
	}
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	opts := endpoint.MeshOptions{Security: testSec}
	l, err := endpoint.ListenMesh(c, "127.0.0.1:0", ranks, opts)
	require.NoError(t, err)
	addr := l.Addr().String()

	mcs := make([]*channel.MultiChannel, ranks)
	errs := make([]error, ranks)
	var wg sync.WaitGroup
	start := func(r int) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r == 0 {
				mcs[r], errs[r] = prepared[r].AcceptMesh(c, l)
			} else {
				mcs[r], errs[r] = prepared[r].DialMesh(c, addr, r, opts)
			}
		}()
	}
	start(0)
	stranger, err := channel.NewMulti(hosts[1].pd, ranks, channel.Options{})
	require.NoError(t, err)
	defer stranger.Close()
	_, err = stranger.DialMesh(c, addr, 1, endpoint.MeshOptions{Security: endpoint.Security{Key: []byte("another key, 16 bytes or more")}})
	require.ErrorIs(t, err, endpoint.ErrAuth)
	for r := 1; r < ranks; r++ {
		start(r)
	}
	wg.Wait()
	for r := range ranks {
		require.NoError(t, errs[r], "rank %d", r)
		defer mcs[r].Close()
	}
	for r := range ranks {
		for j := range ranks {
			region, err := mcs[r].RemoteRegion(j, 0)
			require.NoError(t, err)
			msg := fmt.Sprintf("rank %d was here", r)
			copy(hosts[r].bytes()[j*64:], msg)
			require.NoError(t, mcs[r].Write(context.Background(), channel.WriteRequest{Peer: j, Local: hosts[r].sge(j*64, len(msg)), Remote: channel.At(region, uint64(8192+r*64))}))
			require.Equal(t, msg, string(hosts[j].bytes()[8192+r*64:8192+r*64+len(msg)]))
		}
	}
}

// TestMeshClosesOnMismatchedRanks: Mesh closes every prepared channel on
// error, as documented, also when a rank's peer count does not match the
// mesh; before, that refusal returned with the queue pairs still open (a
// caller that trusted the documentation leaked them), and the prepared
// channel could still be connected.
func TestMeshClosesOnMismatchedRanks(t *testing.T) {
	f := newFabric(t, 2)
	h := newHost(t, f, 0, 4096)
	p, err := channel.NewMulti(h.pd, 2, channel.Options{})
	require.NoError(t, err)
	_, err = channel.Mesh(context.Background(), "127.0.0.1:0", []*channel.PreparedMulti{p})
	require.ErrorIs(t, err, channel.ErrHandshake)
	// Both endpoints name p's own queue pairs: a live prepared channel
	// connects to itself, a closed one cannot.
	eps := p.Endpoints()
	m, err := p.Handshake([]endpoint.Endpoint{eps[0], eps[1]})
	if err == nil {
		m.Close()
	}
	require.ErrorIs(t, err, ctx.ErrClosed, "the prepared channel was left open")
}
