package channel_test

import (
	"bytes"
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

const (
	peers    = 16
	msgSize  = 256
	leafSize = 1 << 16
)

// star is a root MultiChannel to 16 leaves, each leaf a Channel to the root
// on its own device.
type star struct {
	root   *channel.MultiChannel
	rh     *host
	leaves []*channel.Channel
	lh     []*host
}

func newStar(t *testing.T, opts channel.Options) *star {
	f := newFabric(t, peers+1)
	s := &star{rh: newHost(t, f, 0, 1<<20)}
	opts.WaitTimeout = 20 * time.Second
	pr, err := channel.NewMulti(s.rh.pd, peers, opts)
	require.NoError(t, err)
	require.Equal(t, peers, pr.Peers())
	require.NoError(t, pr.Share(s.rh.mr))
	rootEPs := pr.Endpoints()
	require.Len(t, rootEPs, peers)
	remote := make([]endpoint.Endpoint, peers)
	for j := 0; j < peers; j++ {
		h := newHost(t, f, j+1, leafSize)
		p, err := channel.New(h.pd, opts)
		require.NoError(t, err)
		require.NoError(t, p.Share(h.mr))
		remote[j] = wire(t, p.Endpoint())
		leaf, err := p.Handshake(wire(t, rootEPs[j]))
		require.NoError(t, err)
		t.Cleanup(func() { _ = leaf.Close() })
		s.leaves = append(s.leaves, leaf)
		s.lh = append(s.lh, h)
	}
	s.root, err = pr.Handshake(remote)
	require.NoError(t, err)
	t.Cleanup(func() { _ = s.root.Close() })
	return s
}

// pattern is the message peer j gets in round r.
func pattern(r, j int) []byte {
	b := make([]byte, msgSize)
	for i := range b {
		b[i] = byte(r*31 + j*7 + i)
	}
	copy(b, fmt.Sprintf("round %d peer %d", r, j))
	return b
}

// leaves runs fn for every leaf in its own goroutine and waits.
func (s *star) leaves16(t *testing.T, fn func(j int, c *channel.Channel, h *host) error) {
	var wg sync.WaitGroup
	errs := make([]error, peers)
	for j := range s.leaves {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[j] = fn(j, s.leaves[j], s.lh[j])
		}()
	}
	wg.Wait()
	for j, err := range errs {
		require.NoError(t, err, "leaf %d", j)
	}
}

func test16Peers(t *testing.T, opts channel.Options) {
	s := newStar(t, opts)
	rb := s.rh.bytes()

	// Scatter: a different message to every peer, from one region.
	pend := make([]channel.Pending, peers)
	for j, leaf := range s.leaves {
		var err error
		pend[j], err = leaf.PostReceive(channel.RecvRequest{Local: s.lh[j].sge(0, msgSize)})
		require.NoError(t, err)
	}
	sends := make([]channel.SendRequest, peers)
	for j := range sends {
		copy(rb[j*msgSize:], pattern(1, j))
		sends[j] = channel.SendRequest{Peer: j, Local: s.rh.sge(j*msgSize, msgSize)}
	}
	require.NoError(t, s.root.ScatterSend(context.Background(), sends))
	for j, leaf := range s.leaves {
		require.NoError(t, pend[j].Wait(context.Background()))
		r, ok := pend[j].Result()
		require.True(t, ok)
		require.Equal(t, uint32(msgSize), r.ByteCount)
		require.Equal(t, pattern(1, j), s.lh[j].bytes()[:msgSize], "peer %d", j)
		require.Zero(t, leaf.Outstanding())
	}

	// Gather: every peer sends its own message; each lands in the root's
	// buffer for that peer.
	recvs := make([]channel.RecvRequest, peers)
	for j := range recvs {
		recvs[j] = channel.RecvRequest{Peer: j, Local: s.rh.sge(64<<10+j*msgSize, msgSize)}
	}
	results := make([]channel.Result, peers)
	gathered := make(chan error, 1)
	go func() { gathered <- s.root.GatherReceive(context.Background(), recvs, results) }()
	s.leaves16(t, func(j int, c *channel.Channel, h *host) error {
		copy(h.bytes()[1024:], pattern(2, j))
		return c.Send(context.Background(), channel.SendRequest{Local: h.sge(1024, msgSize)})
	})
	require.NoError(t, <-gathered)
	for j := range results {
		require.Equal(t, j, results[j].Peer)
		require.Equal(t, channel.OpRecv, results[j].Op)
		require.Equal(t, uint32(msgSize), results[j].ByteCount)
		require.Equal(t, pattern(2, j), rb[64<<10+j*msgSize:64<<10+(j+1)*msgSize], "from peer %d", j)
	}

	// Multicast: the same buffer to the odd peers only.
	for j, leaf := range s.leaves {
		var err error
		pend[j], err = leaf.PostReceive(channel.RecvRequest{Local: s.lh[j].sge(2048, msgSize)})
		require.NoError(t, err)
	}
	mc := pattern(3, 99)
	copy(rb[128<<10:], mc)
	var odd, even []int
	for j := 0; j < peers; j++ {
		if j%2 == 1 {
			odd = append(odd, j)
		} else {
			even = append(even, j)
		}
	}
	require.NoError(t, s.root.MulticastSend(context.Background(), odd, channel.SendRequest{Local: s.rh.sge(128<<10, msgSize), Immediate: 7, WithImmediate: true}))
	for _, j := range odd {
		require.NoError(t, pend[j].Wait(context.Background()))
		r, _ := pend[j].Result()
		require.True(t, r.WithImmediate)
		require.Equal(t, uint32(7), r.Immediate)
		require.Equal(t, mc, s.lh[j].bytes()[2048:2048+msgSize], "peer %d", j)
	}
	time.Sleep(5 * time.Millisecond)
	for _, j := range even {
		done, err := pend[j].Poll()
		require.NoError(t, err)
		require.False(t, done, "peer %d was not in the multicast", j)
		require.False(t, bytes.Equal(mc, s.lh[j].bytes()[2048:2048+msgSize]))
	}
	require.NoError(t, s.root.MulticastSend(context.Background(), even, channel.SendRequest{Local: s.rh.sge(128<<10, msgSize)}))
	for _, j := range even {
		require.NoError(t, pend[j].Wait(context.Background()))
		require.Equal(t, mc, s.lh[j].bytes()[2048:2048+msgSize], "peer %d", j)
	}

	// Scatter write and gather read through the regions the peers shared.
	writes := make([]channel.WriteRequest, peers)
	reads := make([]channel.ReadRequest, peers)
	for j := range writes {
		region, err := s.root.RemoteRegion(j, 0)
		require.NoError(t, err)
		copy(rb[256<<10+j*msgSize:], pattern(4, j))
		writes[j] = channel.WriteRequest{Peer: j, Local: s.rh.sge(256<<10+j*msgSize, msgSize), Remote: channel.At(region, 8192)}
		copy(s.lh[j].bytes()[16384:], pattern(5, j))
		reads[j] = channel.ReadRequest{Peer: j, Local: s.rh.sge(512<<10+j*msgSize, msgSize), Remote: channel.At(region, 16384)}
	}
	require.NoError(t, s.root.ScatterWrite(context.Background(), writes))
	require.NoError(t, s.root.GatherRead(context.Background(), reads))
	for j := range writes {
		require.Equal(t, pattern(4, j), s.lh[j].bytes()[8192:8192+msgSize], "write to peer %d", j)
		require.Equal(t, pattern(5, j), rb[512<<10+j*msgSize:512<<10+(j+1)*msgSize], "read from peer %d", j)
	}
	require.Zero(t, s.root.Outstanding())
	require.NoError(t, s.root.Err())
}

func Test16PeersRC(t *testing.T) { test16Peers(t, channel.Options{}) }
func Test16PeersDC(t *testing.T) { test16Peers(t, channel.Options{Transport: endpoint.TransportDC}) }
