package channel_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"time"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/sim"
)

// flapSide is one end of the example: a device, its registered buffer and the
// events its channel reported.
type flapSide struct {
	dev    *ctx.Context
	pd     *ctx.ProtectionDomain
	buf    *ctx.Buffer
	mr     *ctx.MemoryRegion
	events chan ctx.AsyncEvent
	ch     *channel.Channel
}

func openFlapSide(f *sim.Fabric, device string) (*flapSide, error) {
	dev, err := f.Open(device)
	if err != nil {
		return nil, err
	}
	s := &flapSide{dev: dev, events: make(chan ctx.AsyncEvent, 16)}
	if s.pd, err = dev.AllocProtectionDomain(); err == nil {
		if s.buf, err = ctx.AllocBuffer(64<<10, ctx.BufferOptions{}); err == nil {
			s.mr, err = s.pd.RegisterBuffer(s.buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite)
		}
	}
	if err != nil {
		s.close()
		return nil, err
	}
	return s, nil
}

func (s *flapSide) close() {
	if s.ch != nil {
		s.ch.Close()
	}
	s.dev.Close()
	if s.buf != nil {
		s.buf.Close()
	}
}

// flapConnect handshakes a and b over a new TCP connection, each end in its
// own goroutine as two programs would; with a and b connected already it
// reestablishes them.
func flapConnect(ln net.Listener, sec endpoint.Security, a, b *flapSide) error {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan error, 1)
	go func() {
		conn, err := ln.Accept()
		if err != nil {
			accepted <- err
			return
		}
		defer conn.Close()
		b.ch, err = flapHandshake(c, b, conn, endpoint.AcceptSide, sec)
		accepted <- err
	}()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		return err
	}
	defer conn.Close()
	a.ch, err = flapHandshake(c, a, conn, endpoint.DialSide, sec)
	return errors.Join(err, <-accepted)
}

// flapHandshake connects s's channel for the first time, or reestablishes it
// on the same memory region.
func flapHandshake(c context.Context, s *flapSide, conn net.Conn, which endpoint.Side, sec endpoint.Security) (*channel.Channel, error) {
	if s.ch != nil {
		return s.ch.ReestablishConn(c, conn, which, sec)
	}
	p, err := channel.New(s.pd, channel.Options{
		WaitTimeout: 10 * time.Second,
		OnEvent:     func(ev ctx.AsyncEvent) { s.events <- ev },
	})
	if err != nil {
		return nil, err
	}
	if err := p.Share(s.mr); err != nil {
		p.Close()
		return nil, err
	}
	ch, err := p.HandshakeConn(c, conn, which, sec)
	if err != nil {
		p.Close()
	}
	return ch, err
}

// flapWrite writes msg from a's buffer into b's, through the region b shared.
func flapWrite(a *flapSide, msg string) error {
	region, err := a.ch.RemoteRegion(0, 0)
	if err != nil {
		return err
	}
	copy(a.mr.Bytes(), msg)
	return a.ch.Write(context.Background(), channel.WriteRequest{Local: []channel.SGE{channel.Slice(a.mr, 0, len(msg))}, Remote: channel.At(region, 1024)})
}

// A port flap on the software HCA: the channel of the flapSide whose link went
// down reports PORT_ERR, fails its pending receive with an error naming
// the event, and after PORT_ACTIVE both sides reestablish over a new TCP
// connection, on the same registered memory (the same keys).
func ExampleChannel_ReestablishConn() {
	if err := portFlap(); err != nil {
		fmt.Println(err)
	}
	// Output:
	// before: "hello"
	// sim1 reported PORT_ERR port=1: link down
	// the pending receive failed: async event PORT_ERR: true, channel failed: true
	// sim1 reported PORT_ACTIVE port=1: link up
	// after: "again", same rkey: true
}

func portFlap() error {
	f := sim.New(sim.Options{Mode: sim.Engine})
	defer f.Close()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	defer ln.Close()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	sec := endpoint.Security{Key: key}
	a, err := openFlapSide(f, "sim0")
	if err != nil {
		return err
	}
	defer a.close()
	b, err := openFlapSide(f, "sim1")
	if err != nil {
		return err
	}
	defer b.close()

	if err := flapConnect(ln, sec, a, b); err != nil {
		return err
	}
	if err := flapWrite(a, "hello"); err != nil {
		return err
	}
	fmt.Printf("before: %q\n", b.mr.Bytes()[1024:1029])
	rkey := b.mr.RKey()

	pending, err := b.ch.PostReceive(channel.RecvRequest{Local: []channel.SGE{channel.Slice(b.mr, 0, 64)}})
	if err != nil {
		return err
	}
	if err := f.SetPortState("sim1", 1, false); err != nil {
		return err
	}
	fmt.Println("sim1 reported", <-b.events)
	err = pending.Wait(context.Background())
	fmt.Printf("the pending receive failed: async event PORT_ERR: %v, channel failed: %v\n",
		errors.Is(err, channel.ErrAsyncEvent), errors.Is(err, channel.ErrFailed))

	if err := f.SetPortState("sim1", 1, true); err != nil {
		return err
	}
	fmt.Println("sim1 reported", <-b.events)
	if err := flapConnect(ln, sec, a, b); err != nil {
		return err
	}
	if err := flapWrite(a, "again"); err != nil {
		return err
	}
	region, err := a.ch.RemoteRegion(0, 0)
	if err != nil {
		return err
	}
	fmt.Printf("after: %q, same rkey: %v\n", b.mr.Bytes()[1024:1029], region.RemoteKey == rkey && b.mr.RKey() == rkey)
	return nil
}
