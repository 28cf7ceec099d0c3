package channel_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// An SGE of 2^31 bytes or more cannot be described by a data segment (bit
// 31 of its byte count is the inline flag). Slice refuses to make one, even
// inside a region that large, and a hand-made one is refused by every post
// with ErrSGETooLong, on RC and DC, before anything reaches the device.
func TestSGETooLongRefused(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFabric(t, 2)
			// The memory is mapped, not touched: 2 GiB and a page.
			a, b := newHost(t, f, 0, 1<<31+4096), newHost(t, f, 1, 1<<16)
			ca, cb := pair(t, a, b, channel.Options{Transport: tr, WaitTimeout: 10 * time.Second})

			require.Panics(t, func() { channel.Slice(a.mr, 0, 1<<31) })
			require.Panics(t, func() { channel.Slice(a.mr, 4096, 1<<31) })
			g := channel.Slice(a.mr, 1, wqebuilder.MaxSGELength)
			require.Equal(t, uint32(wqebuilder.MaxSGELength), g.Length)

			region, err := ca.RemoteRegion(0, 0)
			require.NoError(t, err)
			copy(b.bytes()[100:], "untouched")
			for _, n := range []uint32{1 << 31, 0xffffffff} {
				bad := []channel.SGE{{Addr: uint64(a.mr.Addr()), Length: n, LKey: a.mr.LKey()}}
				for _, post := range []struct {
					op  channel.Op
					run func() error
				}{
					{channel.OpSend, func() error { return ca.Send(context.Background(), channel.SendRequest{Local: bad}) }},
					{channel.OpWrite, func() error {
						return ca.Write(context.Background(), channel.WriteRequest{Local: bad, Remote: channel.At(region, 100)})
					}},
					{channel.OpRead, func() error {
						_, err := ca.PostRead(channel.ReadRequest{Local: bad, Remote: channel.At(region, 100)})
						return err
					}},
					{channel.OpRecv, func() error {
						_, err := ca.PostReceive(channel.RecvRequest{Local: bad})
						return err
					}},
				} {
					err := post.run()
					require.ErrorIs(t, err, wqebuilder.ErrSGETooLong, "%v %#x", post.op, n)
					var pe *channel.PeerError
					require.True(t, errors.As(err, &pe), "%v: %v", post.op, err)
					require.Equal(t, post.op, pe.Op)
					require.Zero(t, ca.Outstanding(), post.op)
				}
			}
			require.Equal(t, "untouched", string(b.bytes()[100:109]))
			require.NoError(t, ca.Err())
			require.NoError(t, cb.Err())
			// The channel still works.
			copy(a.bytes(), "after")
			require.NoError(t, ca.Write(context.Background(), channel.WriteRequest{Local: a.sge(0, 5), Remote: channel.At(region, 200)}))
			require.Equal(t, "after", string(b.bytes()[200:205]))
		})
	}
}
