package channel_test

import (
	"context"
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/monocq"
)

func TestAtomicsRC(t *testing.T) { testAtomics(t, channel.Options{}) }
func TestAtomicsDC(t *testing.T) { testAtomics(t, channel.Options{Transport: endpoint.TransportDC}) }

// testAtomics runs compare-and-swap and fetch-and-add at all three levels
// against a counter in the peer's memory, and checks the old values, the
// counter and the refusals.
func testAtomics(t *testing.T, opts channel.Options) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, opts)
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	const counterOff, resultOff = 4096, 64
	counter := func() uint64 { return binary.NativeEndian.Uint64(b.bytes()[counterOff:]) }
	old := func(i int) uint64 { return binary.NativeEndian.Uint64(a.bytes()[resultOff+8*i:]) }
	binary.NativeEndian.PutUint64(b.bytes()[counterOff:], 100)
	at := channel.At(region, counterOff)
	res := func(i int) channel.SGE { return channel.Slice(a.mr, resultOff+8*i, 8) }

	// Blocking: a compare that matches swaps, one that does not leaves the
	// value; both return the old value.
	require.NoError(t, ca.CompareSwap(context.Background(), channel.CompareSwapRequest{Remote: at, Compare: 100, Swap: 200, Result: res(0)}))
	require.Equal(t, uint64(100), old(0))
	require.Equal(t, uint64(200), counter())
	require.NoError(t, ca.CompareSwap(context.Background(), channel.CompareSwapRequest{Remote: at, Compare: 100, Swap: 300, Result: res(0)}))
	require.Equal(t, uint64(200), old(0), "no match: the old value comes back")
	require.Equal(t, uint64(200), counter(), "no match: nothing swapped")
	require.NoError(t, ca.FetchAdd(context.Background(), channel.FetchAddRequest{Remote: at, Add: 5, Result: res(0)}))
	require.Equal(t, uint64(200), old(0))
	require.Equal(t, uint64(205), counter())

	// Scoped: eight fetch-and-adds in flight; their old values are the
	// eight distinct steps.
	err = ca.Scope(context.Background(), func(s *channel.Scope) error {
		for i := range 8 {
			if _, err := s.PostFetchAdd(channel.FetchAddRequest{Remote: at, Add: 1, Result: res(i)}); err != nil {
				return err
			}
		}
		p, err := s.PostCompareSwap(channel.CompareSwapRequest{Remote: at, Compare: 213, Swap: 1000, Result: res(8)})
		if err != nil {
			return err
		}
		require.NoError(t, p.Wait(context.Background()))
		r, ok := p.Result()
		require.True(t, ok)
		require.Equal(t, channel.OpCompareSwap, r.Op)
		require.Equal(t, uint32(8), r.ByteCount)
		return nil
	})
	require.NoError(t, err)
	seen := map[uint64]bool{}
	for i := range 8 {
		seen[old(i)] = true
	}
	for v := uint64(205); v < 213; v++ {
		require.True(t, seen[v], "old value %d", v)
	}
	require.Equal(t, uint64(213), old(8))
	require.Equal(t, uint64(1000), counter())

	// Raw: post, poll to completion.
	p, err := ca.PostFetchAdd(channel.FetchAddRequest{Remote: at, Add: 1 << 40, Result: res(0)})
	require.NoError(t, err)
	require.NoError(t, p.Wait(context.Background()))
	r, ok := p.Result()
	require.True(t, ok)
	require.Equal(t, channel.OpFetchAdd, r.Op)
	require.Equal(t, uint64(1000), old(0))
	require.Equal(t, uint64(1000+1<<40), counter())
	p, err = ca.PostCompareSwap(channel.CompareSwapRequest{Remote: at, Compare: 1000 + 1<<40, Swap: 7, Result: res(1)})
	require.NoError(t, err)
	require.NoError(t, p.Wait(context.Background()))
	require.Equal(t, uint64(7), counter())

	// The blocking and raw levels allocate nothing.
	allocs := testing.AllocsPerRun(50, func() {
		if err := ca.FetchAdd(context.Background(), channel.FetchAddRequest{Remote: at, Add: 1, Result: res(0)}); err != nil {
			panic(err)
		}
		p, err := ca.PostCompareSwap(channel.CompareSwapRequest{Remote: at, Compare: 0, Swap: 0, Result: res(1)})
		if err != nil {
			panic(err)
		}
		if err := p.Wait(context.Background()); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs)

	// A wrong rkey fails at the peer: the error names the op and matches
	// the completion sentinel.
	bad := channel.Remote{Addr: at.Addr, RKey: at.RKey ^ 0x5a00}
	err = ca.FetchAdd(context.Background(), channel.FetchAddRequest{Remote: bad, Add: 1, Result: res(0)})
	require.ErrorIs(t, err, monocq.ErrRemoteAccess)
	var pe *channel.PeerError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, channel.OpFetchAdd, pe.Op)
	require.Contains(t, err.Error(), "fetch-and-add at peer 0")
	require.Equal(t, uint64(7+50+1), counter(), "the failed add changed nothing")

}

// TestAtomicMisuse: a result buffer that is not 8 bytes and a peer out of
// range are refused before anything is posted.
func TestAtomicMisuse(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, _ := pair(t, a, b, channel.Options{})
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	at := channel.At(region, 0)
	_, err = ca.PostCompareSwap(channel.CompareSwapRequest{Remote: at, Result: channel.Slice(a.mr, 0, 4)})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	err = ca.FetchAdd(context.Background(), channel.FetchAddRequest{Remote: at, Result: channel.Slice(a.mr, 0, 16)})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	err = ca.MultiChannel.CompareSwap(context.Background(), channel.CompareSwapRequest{Peer: 1, Remote: at, Result: channel.Slice(a.mr, 0, 8)})
	require.ErrorIs(t, err, channel.ErrPeer)
	_, err = ca.MultiChannel.PostFetchAdd(channel.FetchAddRequest{Peer: -1, Remote: at, Result: channel.Slice(a.mr, 0, 8)})
	require.ErrorIs(t, err, channel.ErrPeer)
	require.Zero(t, ca.Outstanding(), "nothing was posted")
	require.NoError(t, ca.Err())
}
