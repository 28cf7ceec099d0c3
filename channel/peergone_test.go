package channel_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// A send to a peer that has gone completes with RETRY_EXC_ERR, and the
// channel's other outstanding requests complete flushed: on RC the queue
// pair's error state flushes its receive queue; on DC the initiator is
// every peer's at once, so its error fails the whole channel, whose
// receives (in shared receive queues, which no error state flushes) then
// complete flushed as well. Nothing waits for a receive that can no longer
// come: not a scope, not a loop over Pending.Poll, and not one over
// Poll and Pending.Done.
func TestSendToGonePeerEndsEveryRequest(t *testing.T) {
	// toGonePeer connects a channel of host a to one that then closes.
	toGonePeer := func(t *testing.T, tr endpoint.Transport) (*host, *channel.Channel) {
		f := newFabric(t, 2)
		a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
		ca, cb := pair(t, a, b, channel.Options{Transport: tr})
		require.NoError(t, cb.Close())
		return a, ca
	}
	postReceiveAndSend := func(t *testing.T, a *host, ca *channel.Channel) (recv, send channel.Pending) {
		recv, err := ca.PostReceive(channel.RecvRequest{Local: a.sge(0, 64)})
		require.NoError(t, err)
		send, err = ca.PostSend(channel.SendRequest{Local: a.sge(1024, 8)})
		require.NoError(t, err)
		return recv, send
	}
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String()+"/scope", func(t *testing.T) {
			a, ca := toGonePeer(t, tr)
			c, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := ca.Scope(c, func(s *channel.Scope) error {
				if _, err := s.PostReceive(channel.RecvRequest{Local: a.sge(0, 64)}); err != nil {
					return err
				}
				_, err := s.PostSend(channel.SendRequest{Local: a.sge(1024, 8)})
				return err
			})
			require.NoError(t, c.Err(), "the scope waited for its context")
			require.ErrorIs(t, err, monocq.ErrRetryExceeded)
			require.ErrorIs(t, err, monocq.ErrFlushed, "the receive")
			require.Zero(t, ca.Outstanding())
			require.Error(t, ca.Send(c, channel.SendRequest{Local: a.sge(1024, 8)}), "a later send")
		})
		t.Run(tr.String()+"/pending", func(t *testing.T) {
			a, ca := toGonePeer(t, tr)
			recv, send := postReceiveAndSend(t, a, ca)
			var recvErr, sendErr error
			var recvDone, sendDone bool
			for end := time.Now().Add(20 * time.Second); !(recvDone && sendDone) && time.Now().Before(end); {
				if !sendDone {
					sendDone, sendErr = send.Poll()
				}
				if !recvDone {
					recvDone, recvErr = recv.Poll()
				}
			}
			require.True(t, sendDone, "the send")
			require.True(t, recvDone, "the receive")
			require.ErrorIs(t, sendErr, monocq.ErrRetryExceeded)
			require.ErrorIs(t, recvErr, monocq.ErrFlushed)
			require.Zero(t, ca.Outstanding())
		})
		t.Run(tr.String()+"/poll", func(t *testing.T) {
			a, ca := toGonePeer(t, tr)
			recv, send := postReceiveAndSend(t, a, ca)
			for end := time.Now().Add(20 * time.Second); !(recv.Done() && send.Done()) && time.Now().Before(end); {
				ca.Poll()
			}
			require.True(t, send.Done(), "the send")
			require.True(t, recv.Done(), "the receive")
			_, recvErr := recv.Poll()
			_, sendErr := send.Poll()
			require.ErrorIs(t, sendErr, monocq.ErrRetryExceeded)
			require.ErrorIs(t, recvErr, monocq.ErrFlushed)
			require.Zero(t, ca.Outstanding())
		})
	}
}

// A Receive whose sender has gone, with nothing of this side in flight,
// learns of it only from the connection the handshake ran over: with
// endpoint.WatchConn's context it ends, failing the channel, with
// endpoint.ErrPeerGone.
func TestReceiveEndsWhenHandshakeConnCloses(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFabric(t, 2)
			a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			require.NoError(t, err)
			defer ln.Close()
			sec := endpoint.Security{Key: make([]byte, 32)}
			type side struct {
				ch   *channel.Channel
				conn net.Conn
				err  error
			}
			accepted := make(chan side, 1)
			go func() {
				conn, err := ln.Accept()
				if err != nil {
					accepted <- side{err: err}
					return
				}
				p, err := channel.New(b.pd, channel.Options{Transport: tr})
				if err != nil {
					accepted <- side{err: err}
					return
				}
				ch, err := p.HandshakeConn(bg, conn, endpoint.AcceptSide, sec)
				accepted <- side{ch, conn, err}
			}()
			conn, err := net.Dial("tcp", ln.Addr().String())
			require.NoError(t, err)
			defer conn.Close()
			p, err := channel.New(a.pd, channel.Options{Transport: tr})
			require.NoError(t, err)
			ca, err := p.HandshakeConn(bg, conn, endpoint.DialSide, sec)
			require.NoError(t, err)
			defer ca.Close()
			peer := <-accepted
			require.NoError(t, peer.err)

			// The peer exits: its queues go, and the kernel closes its
			// connection.
			require.NoError(t, peer.ch.Close())
			require.NoError(t, peer.conn.Close())

			c, cancel, err := endpoint.WatchConn(bg, conn, 5*time.Millisecond)
			require.NoError(t, err)
			defer cancel()
			limit, stop := context.WithTimeout(c, 20*time.Second)
			defer stop()
			_, err = ca.Receive(limit, channel.RecvRequest{Local: a.sge(0, 64)})
			require.ErrorIs(t, err, endpoint.ErrPeerGone)
			require.ErrorIs(t, err, context.Canceled)
			require.ErrorIs(t, err, channel.ErrFailed)
			require.NotErrorIs(t, err, context.DeadlineExceeded)
			require.Zero(t, ca.Outstanding())
		})
	}
}
