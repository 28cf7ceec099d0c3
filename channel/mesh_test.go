package channel_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
)

// TestMeshAllToAll connects 4 ranks over TCP and runs an all-to-all
// exchange: every rank sends a distinct message to every rank (itself
// included, over its loopback queue pair) and gathers one from each.
func TestMeshAllToAll(t *testing.T) {
	for _, tr := range []channel.Transport{channel.TransportRC, channel.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			const ranks = 4
			f := newFabric(t, ranks)
			hosts := make([]*host, ranks)
			prepared := make([]*channel.PreparedMulti, ranks)
			for i := range hosts {
				hosts[i] = newHost(t, f, i, 1<<16)
				p, err := channel.New().PD(hosts[i].pd).Peers(ranks).
					With(channel.Options{Transport: tr, Timeout: 10 * time.Second}).Build()
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
					errs[r] = m.Scope(func(s *channel.Scope) error {
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
	p, err := channel.New().PD(h.pd).Peers(3).Build()
	require.NoError(t, err)
	defer p.Close()
	_, err = channel.Mesh(context.Background(), "127.0.0.1:0", []*channel.PreparedMulti{p})
	require.ErrorIs(t, err, channel.ErrHandshake)
}
