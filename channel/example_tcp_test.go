package channel_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"time"

	"github.com/mlx5kit/mlx5kit"
	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// The whole path of docs/guide.md: open a device, register memory, build a
// channel, swap endpoints over TCP, and exchange messages. The two sides
// run in one process here, each on its own device of the software HCA;
// across machines each side is its own program, and both read the same
// key (from a file only they may read, or the environment).
func ExamplePrepared_HandshakeConn() {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ln.Close()
	key := make([]byte, 32)
	_, _ = rand.Read(key)
	sec := endpoint.Security{Key: key}
	done := make(chan string, 1)
	go func() { done <- server(ln, sec) }()
	fmt.Println("client:", client(ln.Addr().String(), sec))
	fmt.Println("server:", <-done)
	// Output:
	// client: got "PONG" back
	// server: got "ping", wrote the reply
}

// setup opens a device and registers a 64 KiB buffer.
func setup(device string) (*ctx.Context, *ctx.ProtectionDomain, *ctx.Buffer, *ctx.MemoryRegion, error) {
	dev, err := mlx5kit.Open(mlx5kit.Options{Provider: ctx.ProviderSoftware, Device: device})
	if err != nil {
		return nil, nil, nil, nil, err
	}
	pd, err := dev.AllocProtectionDomain()
	if err != nil {
		dev.Close()
		return nil, nil, nil, nil, err
	}
	buf, err := ctx.AllocBuffer(64<<10, ctx.BufferOptions{})
	if err != nil {
		dev.Close()
		return nil, nil, nil, nil, err
	}
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteRead)
	if err != nil {
		dev.Close()
		buf.Close()
		return nil, nil, nil, nil, err
	}
	return dev, pd, buf, mr, nil
}

func server(ln net.Listener, sec endpoint.Security) string {
	dev, pd, buf, mr, err := setup("sim1")
	if err != nil {
		return err.Error()
	}
	defer buf.Close()
	defer dev.Close()
	conn, err := ln.Accept()
	if err != nil {
		return err.Error()
	}
	defer conn.Close()

	prepared, err := channel.New(pd, channel.Options{WaitTimeout: 10 * time.Second})
	if err != nil {
		return err.Error()
	}
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := prepared.HandshakeConn(c, conn, endpoint.AcceptSide, sec)
	if err != nil {
		return err.Error()
	}
	defer ch.Close()

	res, err := ch.Receive(context.Background(), channel.RecvRequest{Local: []channel.SGE{channel.Slice(mr, 0, 256)}})
	if err != nil {
		return err.Error()
	}
	msg := string(mr.Bytes()[:res.ByteCount])
	// Answer with an RDMA WRITE into the region the client shared, then a
	// SEND with immediate data to tell it the reply is there.
	region, err := ch.RemoteRegion(0, 0)
	if err != nil {
		return err.Error()
	}
	copy(mr.Bytes()[1024:], "PONG")
	if err := ch.Write(context.Background(), channel.WriteRequest{Local: []channel.SGE{channel.Slice(mr, 1024, 4)}, Remote: channel.At(region, 512)}); err != nil {
		return err.Error()
	}
	if err := ch.Send(context.Background(), channel.SendRequest{Immediate: 4, WithImmediate: true}); err != nil {
		return err.Error()
	}
	return fmt.Sprintf("got %q, wrote the reply", msg)
}

func client(address string, sec endpoint.Security) string {
	dev, pd, buf, mr, err := setup("sim0")
	if err != nil {
		return err.Error()
	}
	defer buf.Close()
	defer dev.Close()
	conn, err := net.Dial("tcp", address)
	if err != nil {
		return err.Error()
	}
	defer conn.Close()

	prepared, err := channel.New(pd, channel.Options{WaitTimeout: 10 * time.Second})
	if err != nil {
		return err.Error()
	}
	if err := prepared.Share(mr); err != nil { // the server may write here
		return err.Error()
	}
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ch, err := prepared.HandshakeConn(c, conn, endpoint.DialSide, sec)
	if err != nil {
		return err.Error()
	}
	defer ch.Close()

	// Post the receive for the notice before sending, so it is there when
	// the server answers.
	notice, err := ch.PostReceive(channel.RecvRequest{})
	if err != nil {
		return err.Error()
	}
	copy(mr.Bytes(), "ping")
	if err := ch.Send(context.Background(), channel.SendRequest{Local: []channel.SGE{channel.Slice(mr, 0, 4)}}); err != nil {
		return err.Error()
	}
	if err := notice.Wait(context.Background()); err != nil {
		return err.Error()
	}
	res, _ := notice.Result()
	return fmt.Sprintf("got %q back", mr.Bytes()[512:512+res.Immediate])
}
