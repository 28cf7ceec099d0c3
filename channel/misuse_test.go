package channel_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// misusePair connects two channels on the software HCA; mr is b's
// registered buffer.
func misusePair(t *testing.T) (a, b *channel.Channel, mr *ctx.MemoryRegion) {
	t.Helper()
	f := newFabric(t, 2)
	ha, hb := newHost(t, f, 0, 4096), newHost(t, f, 1, 4096)
	a, b = pair(t, ha, hb, channel.Options{})
	return a, b, hb.mr
}

// returnsWithin fails the test when fn has not returned after d.
func returnsWithin(t *testing.T, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("did not return within %v", d)
	}
}

// A scope whose function closes the channel with a receive outstanding
// returns (with an error wrapping ctx.ErrClosed) instead of polling the
// closed CQ forever.
func TestScopeReturnsAfterCloseInside(t *testing.T) {
	_, b, mr := misusePair(t)
	var err error
	returnsWithin(t, 5*time.Second, func() {
		err = b.Scope(context.Background(), func(s *channel.Scope) error {
			if _, err := s.PostReceive(channel.RecvRequest{Local: []channel.SGE{channel.Slice(mr, 0, 64)}}); err != nil {
				return err
			}
			return b.Close()
		})
	})
	if !errors.Is(err, ctx.ErrClosed) {
		t.Fatalf("scope after close: %v, want ctx.ErrClosed", err)
	}
}

// The Pending that a refused raw post returns with its error does not
// crash when asked about its request.
func TestPendingOfRefusedPost(t *testing.T) {
	a, _, _ := misusePair(t)
	p, err := a.PostSend(channel.SendRequest{Peer: 7}) // no such peer
	if !errors.Is(err, channel.ErrPeer) {
		t.Fatalf("post to peer 7: %v", err)
	}
	returnsWithin(t, 5*time.Second, func() {
		if p.Done() {
			t.Error("Done of a refused post")
		}
		if _, ok := p.Result(); ok {
			t.Error("Result of a refused post")
		}
		if done, err := p.Poll(); done || err == nil {
			t.Errorf("Poll of a refused post: %v, %v", done, err)
		}
		if err := p.Wait(context.Background()); err == nil {
			t.Error("Wait of a refused post: nil error")
		}
	})
}

// Likewise the Pending a scope's refused post returns: its Wait must not
// wait for ever on a request that was never posted.
func TestPendingOfRefusedScopePost(t *testing.T) {
	a, _, _ := misusePair(t)
	returnsWithin(t, 5*time.Second, func() {
		_ = a.Scope(context.Background(), func(s *channel.Scope) error {
			p, err := s.PostSend(channel.SendRequest{Peer: 7})
			if err == nil {
				t.Error("post to peer 7 accepted")
			}
			if err := p.Wait(context.Background()); err == nil {
				t.Error("Wait of a refused post: nil error")
			}
			if done, err := p.Poll(); done || err == nil {
				t.Errorf("Poll of a refused post: %v, %v", done, err)
			}
			return nil
		})
	})
}

// RemoteRegion of a peer the channel does not have names the call, not a
// placeholder operation ("Op(0) to peer 5").
func TestRemoteRegionBadPeerError(t *testing.T) {
	a, _, _ := misusePair(t)
	_, err := a.RemoteRegion(5, 0)
	if !errors.Is(err, channel.ErrPeer) {
		t.Fatalf("RemoteRegion(5, 0): %v, want channel.ErrPeer", err)
	}
	if msg := err.Error(); strings.Contains(msg, "Op(") || !strings.Contains(msg, "remote region") {
		t.Errorf("RemoteRegion(5, 0): %q names no call", msg)
	}
}

// A nil connection is refused before anything changes: ReestablishConn
// returns an error matching ctx.ErrInvalidArgument and the channel stays
// connected. Slice of a nil region panics with a message that says so.
func TestNilConnectionAndRegion(t *testing.T) {
	a, b, mr := misusePair(t)
	_, err := a.ReestablishConn(context.Background(), nil, 0, endpoint.Security{})
	if !errors.Is(err, ctx.ErrInvalidArgument) {
		t.Fatalf("ReestablishConn with a nil connection: %v, want ctx.ErrInvalidArgument", err)
	}
	bg := context.Background()
	recv, err := b.PostReceive(channel.RecvRequest{Local: []channel.SGE{channel.Slice(mr, 0, 8)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Send(bg, channel.SendRequest{}); err != nil {
		t.Fatalf("the channel after a refused ReestablishConn: %v", err)
	}
	if err := recv.Wait(bg); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(fmt.Sprint(r), "nil memory region") {
			t.Errorf("Slice of a nil region: panic %v, want one naming the nil region", r)
		}
	}()
	channel.Slice(nil, 0, 0)
}

// A side or key the exchange would refuse is refused before the channel
// gives up its queue pair: ReestablishConn returns the exchange's error
// and the channel still sends. Before, the channel was closed first and
// the caller was left with nothing to retry.
func TestReestablishConnBadArgumentsKeepChannel(t *testing.T) {
	a, b, mr := misusePair(t)
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	key := make([]byte, endpoint.MinKeySize)
	for name, call := range map[string]func() error{
		"side": func() error {
			_, err := a.ReestablishConn(context.Background(), c1, endpoint.Side(7), endpoint.Security{Key: key})
			return err
		},
		"short key": func() error {
			_, err := a.ReestablishConn(context.Background(), c1, endpoint.DialSide, endpoint.Security{Key: key[:4]})
			return err
		},
		"no key": func() error {
			_, err := a.ReestablishConn(context.Background(), c1, endpoint.DialSide, endpoint.Security{})
			return err
		},
	} {
		err := call()
		if err == nil {
			t.Fatalf("%s: ReestablishConn succeeded", name)
		}
		if !errors.Is(err, ctx.ErrInvalidArgument) && !errors.Is(err, endpoint.ErrBadKey) && !errors.Is(err, endpoint.ErrKeyRequired) {
			t.Fatalf("%s: %v, want the exchange's refusal", name, err)
		}
		recv, err := b.PostReceive(channel.RecvRequest{Local: []channel.SGE{channel.Slice(mr, 0, 8)}})
		if err != nil {
			t.Fatal(err)
		}
		if err := a.Send(context.Background(), channel.SendRequest{}); err != nil {
			t.Fatalf("%s: the channel after a refused ReestablishConn: %v", name, err)
		}
		if err := recv.Wait(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}
