package channel_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// The allocation counts include the software HCA's engine goroutine, which
// executes the work meanwhile: a zero here means neither side allocated.

func allocPair(t *testing.T, opts channel.Options) (*host, *channel.Channel, channel.Remote) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	opts.WaitTimeout = 10 * time.Second
	ca, _ := pair(t, a, b, opts)
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	return a, ca, channel.At(region, 0)
}

func testRawAllocs(t *testing.T, opts channel.Options) {
	a, ca, remote := allocPair(t, opts)
	local := a.sge(0, 64)
	run := func() {
		p, err := ca.PostWrite(channel.WriteRequest{Local: local, Remote: remote})
		if err != nil {
			panic(err)
		}
		for {
			done, err := p.Poll()
			if err != nil {
				panic(err)
			}
			if done {
				break
			}
			// AllocsPerRun runs with GOMAXPROCS 1: let the engine run.
			runtime.Gosched()
		}
	}
	run()
	require.Zero(t, testing.AllocsPerRun(500, run), "raw post and poll")
}

func testScopeAllocs(t *testing.T, opts channel.Options) {
	a, ca, remote := allocPair(t, opts)
	reqs := make([]channel.WriteRequest, 8)
	for i := range reqs {
		reqs[i] = channel.WriteRequest{Local: a.sge(i*64, 64), Remote: remote}
	}
	run := func() {
		err := ca.Scope(context.Background(), func(s *channel.Scope) error {
			p, err := s.PostRead(channel.ReadRequest{Local: a.sge(4096, 64), Remote: remote})
			if err != nil {
				return err
			}
			if err := s.PostScatterWrite(reqs); err != nil {
				return err
			}
			return p.Wait(context.Background())
		})
		if err != nil {
			panic(err)
		}
	}
	run()
	require.Zero(t, testing.AllocsPerRun(200, run), "scope")
}

func testBlockingAllocs(t *testing.T, opts channel.Options) {
	a, ca, remote := allocPair(t, opts)
	m := ca.MultiChannel
	reqs := []channel.WriteRequest{{Local: a.sge(0, 64), Remote: remote}, {Local: a.sge(64, 64), Remote: remote}}
	run := func() {
		if err := m.ScatterWrite(context.Background(), reqs); err != nil {
			panic(err)
		}
		if err := ca.Write(context.Background(), reqs[0]); err != nil {
			panic(err)
		}
	}
	run()
	require.Zero(t, testing.AllocsPerRun(200, run), "blocking")
}

func TestRawPathDoesNotAllocateRC(t *testing.T) { testRawAllocs(t, channel.Options{}) }
func TestRawPathDoesNotAllocateDC(t *testing.T) {
	testRawAllocs(t, channel.Options{Transport: endpoint.TransportDC})
}
func TestScopeDoesNotAllocateRC(t *testing.T) { testScopeAllocs(t, channel.Options{}) }
func TestScopeDoesNotAllocateDC(t *testing.T) {
	testScopeAllocs(t, channel.Options{Transport: endpoint.TransportDC})
}
func TestBlockingDoesNotAllocate(t *testing.T) { testBlockingAllocs(t, channel.Options{}) }

// A live context costs no allocation either: the waits look at its Done
// channel without blocking.
func TestContextCallsDoNotAllocate(t *testing.T) {
	a, ca, remote := allocPair(t, channel.Options{})
	m := ca.MultiChannel
	c, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	reqs := []channel.WriteRequest{{Local: a.sge(0, 64), Remote: remote}, {Local: a.sge(64, 64), Remote: remote}}
	read := channel.ReadRequest{Local: a.sge(4096, 64), Remote: remote}
	scope := func(s *channel.Scope) error {
		p, err := s.PostRead(read)
		if err != nil {
			return err
		}
		return p.Wait(c)
	}
	run := func() {
		if err := m.ScatterWrite(c, reqs); err != nil {
			panic(err)
		}
		if err := ca.Read(c, read); err != nil {
			panic(err)
		}
		if err := ca.Scope(c, scope); err != nil {
			panic(err)
		}
	}
	run()
	require.Zero(t, testing.AllocsPerRun(200, run), "blocking calls and scope with a context")
}
