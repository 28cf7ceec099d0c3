package channel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

func testChannelBasics(t *testing.T, opts channel.Options) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	opts.WaitTimeout = 10 * time.Second
	ca, cb := pair(t, a, b, opts)

	// SEND into a posted receive.
	copy(a.bytes(), "hello, channel")
	pend, err := cb.PostReceive(channel.RecvRequest{Local: b.sge(4096, 64)})
	require.NoError(t, err)
	require.False(t, pend.Done())
	require.NoError(t, ca.Send(context.Background(), channel.SendRequest{Local: a.sge(0, 14)}))
	require.NoError(t, pend.Wait(context.Background()))
	res, ok := pend.Result()
	require.True(t, ok)
	require.Equal(t, uint32(14), res.ByteCount)
	require.Equal(t, channel.OpRecv, res.Op)
	require.False(t, res.WithImmediate)
	require.Equal(t, "hello, channel", string(b.bytes()[4096:4110]))

	// SEND with immediate data, received by a blocking Receive running
	// while the sender posts.
	done := make(chan channel.Result, 1)
	go func() {
		r, _ := cb.Receive(context.Background(), channel.RecvRequest{Local: b.sge(8192, 64)})
		done <- r
	}()
	copy(a.bytes()[100:], "imm")
	require.NoError(t, ca.Send(context.Background(), channel.SendRequest{Local: a.sge(100, 3), Immediate: 0xc0ffee, WithImmediate: true}))
	r := <-done
	require.NoError(t, r.Err)
	require.True(t, r.WithImmediate)
	require.Equal(t, uint32(0xc0ffee), r.Immediate)
	require.Equal(t, "imm", string(b.bytes()[8192:8195]))

	// RDMA WRITE and READ through the region the peer shared.
	region, err := ca.RemoteRegion(0, 0)
	require.NoError(t, err)
	require.Equal(t, uint64(b.mr.Addr()), region.Address)
	copy(a.bytes()[200:], "written remotely")
	require.NoError(t, ca.Write(context.Background(), channel.WriteRequest{Local: a.sge(200, 16), Remote: channel.At(region, 12000)}))
	require.Equal(t, "written remotely", string(b.bytes()[12000:12016]))
	copy(b.bytes()[13000:], "read me back")
	require.NoError(t, ca.Read(context.Background(), channel.ReadRequest{Local: a.sge(300, 12), Remote: channel.At(region, 13000)}))
	require.Equal(t, "read me back", string(a.bytes()[300:312]))

	require.Zero(t, ca.Outstanding())
	require.Zero(t, cb.Outstanding())
	require.NoError(t, ca.Err())
	require.NoError(t, cb.Err())
}

func TestChannelRC(t *testing.T) { testChannelBasics(t, channel.Options{}) }
func TestChannelDC(t *testing.T) {
	testChannelBasics(t, channel.Options{Transport: endpoint.TransportDC})
}
func TestChannelEvents(t *testing.T) {
	testChannelBasics(t, channel.Options{Events: true})
}

// TestEventsSleepUntilTheMessage waits in a blocking Receive for a message
// sent 300 ms later: with Options.Events the wait sleeps on the completion
// channel instead of spinning.
func TestEventsSleepUntilTheMessage(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	ca, cb := pair(t, a, b, channel.Options{Events: true, WaitTimeout: 10 * time.Second})
	require.NotNil(t, cb.MultiChannel.Notifier())
	sent := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		copy(a.bytes(), "late")
		sent <- ca.Send(context.Background(), channel.SendRequest{Local: a.sge(0, 4)})
	}()
	res, err := cb.Receive(context.Background(), channel.RecvRequest{Local: b.sge(0, 64)})
	require.NoError(t, <-sent)
	require.NoError(t, err)
	require.Equal(t, uint32(4), res.ByteCount)
	require.Equal(t, "late", string(b.bytes()[:4]))
	require.NotZero(t, cb.MultiChannel.Notifier().Sleeps(), "the receiver slept on the completion channel")

	// The timeout still holds while sleeping.
	_, cb2 := pair(t, a, b, channel.Options{Events: true, WaitTimeout: 30 * time.Millisecond})
	start := time.Now()
	_, err = cb2.Receive(context.Background(), channel.RecvRequest{Local: b.sge(0, 64)})
	require.ErrorIs(t, err, channel.ErrTimeout)
	require.Less(t, time.Since(start), 5*time.Second)
}
