package channel_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// Pending.Poll of a request whose channel was closed reports the close
// (ctx.ErrClosed) instead of "not done, no error" forever, which made a
// loop polling it until done spin for good; Wait names the call.
func TestPendingAfterClose(t *testing.T) {
	_, b, mr := misusePair(t)
	p, err := b.PostReceive(channel.RecvRequest{Local: []channel.SGE{channel.Slice(mr, 0, 64)}})
	require.NoError(t, err)
	require.NoError(t, b.Close())

	done, err := p.Poll()
	require.False(t, done)
	require.ErrorIs(t, err, ctx.ErrClosed)

	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = p.Wait(c)
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.Contains(t, err.Error(), "channel: wait for work request")
}

// A wait whose context never ends, for a receive no peer answers, ends
// with an error wrapping ctx.ErrClosed when another goroutine closes what
// the channel's queues depend on (its Context or PD, which ctx allows on
// any goroutine while the owner polls) or a queue pair itself: the work
// outstanding on a closed queue never completes. Before, the wait polled
// the closed CQ for good. The channel is closed from then on, and Close
// still succeeds.
func TestWaitEndsWhenQueuesCloseUnderIt(t *testing.T) {
	closers := []struct {
		name  string
		close func(h *host, ch *channel.Channel) error
	}{
		{"Context", func(h *host, _ *channel.Channel) error { return h.dev.Close() }},
		{"PD", func(h *host, _ *channel.Channel) error { return h.pd.Close() }},
		{"queue pair", func(_ *host, ch *channel.Channel) error {
			if qp := ch.QP(0); qp != nil {
				return qp.Close()
			}
			return ch.DCI().Close()
		}},
	}
	waits := []struct {
		name string
		wait func(ch *channel.Channel, h *host) error
	}{
		{"Receive", func(ch *channel.Channel, h *host) error {
			_, err := ch.Receive(context.Background(), channel.RecvRequest{Local: h.sge(0, 64)})
			return err
		}},
		{"Pending.Wait", func(ch *channel.Channel, h *host) error {
			p, err := ch.PostReceive(channel.RecvRequest{Local: h.sge(0, 64)})
			if err != nil {
				return err
			}
			return p.Wait(context.Background())
		}},
		{"Pending.Poll", func(ch *channel.Channel, h *host) error {
			p, err := ch.PostReceive(channel.RecvRequest{Local: h.sge(0, 64)})
			if err != nil {
				return err
			}
			for {
				if done, err := p.Poll(); done || err != nil {
					return err
				}
				h.dev.Idle()
			}
		}},
	}
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		for _, events := range []bool{false, true} {
			for _, cl := range closers {
				for _, wt := range waits {
					name := tr.String() + "/events=" + map[bool]string{false: "off", true: "on"}[events] + "/" + cl.name + "/" + wt.name
					t.Run(name, func(t *testing.T) {
						f := newFabric(t, 2)
						ha, hb := newHost(t, f, 0, 4096), newHost(t, f, 1, 4096)
						_, b := pair(t, ha, hb, channel.Options{Transport: tr, Events: events})
						done := make(chan error, 1)
						go func() { done <- wt.wait(b, hb) }()
						// Let the wait start (the result must be the same
						// when the close comes first).
						time.Sleep(20 * time.Millisecond)
						require.NoError(t, cl.close(hb, b))
						select {
						case err := <-done:
							require.ErrorIs(t, err, ctx.ErrClosed)
						case <-time.After(5 * time.Second):
							t.Fatal("the wait did not end when the channel's queues closed")
						}
						_, err := b.Receive(context.Background(), channel.RecvRequest{Local: hb.sge(0, 64)})
						require.ErrorIs(t, err, ctx.ErrClosed)
						require.NoError(t, b.Close())
					})
				}
			}
		}
	}
}
