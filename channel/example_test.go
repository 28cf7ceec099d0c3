package channel_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/sim"
)

// side is a device with a protection domain and a registered buffer.
type side struct {
	dev *ctx.Context
	pd  *ctx.ProtectionDomain
	buf *ctx.Buffer
	mr  *ctx.MemoryRegion
}

func openSide(f *sim.Fabric, name string) *side {
	dev, _ := f.Open(name)
	pd, _ := dev.AllocProtectionDomain()
	buf, _ := ctx.AllocBuffer(1<<16, ctx.BufferOptions{})
	mr, _ := pd.RegisterBuffer(buf, ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteRead)
	return &side{dev: dev, pd: pd, buf: buf, mr: mr}
}

func (s *side) close() { _ = s.dev.Close(); _ = s.buf.Close() }

// Two channels connect by swapping endpoints (here directly; over TCP see
// Prepared.HandshakeConn), then send, write and read.
func ExampleChannel() {
	fabric := sim.New(sim.Options{Mode: sim.Engine})
	defer fabric.Close()
	a, b := openSide(fabric, "sim0"), openSide(fabric, "sim1")
	defer a.close()
	defer b.close()

	pa, _ := channel.New(a.pd, channel.Options{})
	pb, _ := channel.New(b.pd, channel.Options{})
	_ = pb.Share(b.mr) // a may write to and read from b's buffer
	ca, err := pa.Handshake(pb.Endpoint())
	if err != nil {
		fmt.Println(err)
		return
	}
	defer ca.Close()
	cb, _ := pb.Handshake(pa.Endpoint())
	defer cb.Close()

	// A two-sided message: b posts a receive, a sends.
	recv, _ := cb.PostReceive(channel.RecvRequest{Local: []channel.SGE{channel.Slice(b.mr, 0, 64)}})
	copy(a.mr.Bytes(), "hello")
	_ = ca.Send(context.Background(), channel.SendRequest{Local: []channel.SGE{channel.Slice(a.mr, 0, 5)}})
	_ = recv.Wait(context.Background())
	res, _ := recv.Result()
	fmt.Printf("b received %d bytes: %s\n", res.ByteCount, b.mr.Bytes()[:res.ByteCount])

	// One-sided: a writes into b's shared region, then reads it back.
	region, _ := ca.RemoteRegion(0, 0)
	copy(a.mr.Bytes()[100:], "one-sided")
	_ = ca.Write(context.Background(), channel.WriteRequest{Local: []channel.SGE{channel.Slice(a.mr, 100, 9)}, Remote: channel.At(region, 1000)})
	_ = ca.Read(context.Background(), channel.ReadRequest{Local: []channel.SGE{channel.Slice(a.mr, 200, 9)}, Remote: channel.At(region, 1000)})
	fmt.Printf("b holds %q, a read back %q\n", b.mr.Bytes()[1000:1009], a.mr.Bytes()[200:209])
	// Output:
	// b received 5 bytes: hello
	// b holds "one-sided", a read back "one-sided"
}

// A MultiChannel scatters a different message to each peer from one
// registered buffer, and multicasts one buffer to a set of peers.
func ExampleMultiChannel() {
	const peers = 3
	fabric := sim.New(sim.Options{Mode: sim.Engine, Devices: peers + 1})
	defer fabric.Close()
	root := openSide(fabric, "sim0")
	defer root.close()

	p, _ := channel.NewMulti(root.pd, peers, channel.Options{})
	mine := p.Endpoints()
	leaves := make([]*channel.Channel, peers)
	leafSides := make([]*side, peers)
	theirs := make([]endpoint.Endpoint, peers)
	for j := range leaves {
		leafSides[j] = openSide(fabric, fmt.Sprintf("sim%d", j+1))
		defer leafSides[j].close()
		lp, _ := channel.New(leafSides[j].pd, channel.Options{})
		theirs[j] = lp.Endpoint()
		leaves[j], _ = lp.Handshake(mine[j])
		defer leaves[j].Close()
	}
	mc, err := p.Handshake(theirs)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer mc.Close()

	// Every leaf expects two messages.
	var first, second [peers]channel.Pending
	for j, leaf := range leaves {
		first[j], _ = leaf.PostReceive(channel.RecvRequest{Local: []channel.SGE{channel.Slice(leafSides[j].mr, 0, 32)}})
		second[j], _ = leaf.PostReceive(channel.RecvRequest{Local: []channel.SGE{channel.Slice(leafSides[j].mr, 32, 32)}})
	}
	sends := make([]channel.SendRequest, peers)
	for j := range sends {
		n := copy(root.mr.Bytes()[j*32:], fmt.Sprintf("for peer %d only", j))
		sends[j] = channel.SendRequest{Peer: j, Local: []channel.SGE{channel.Slice(root.mr, j*32, n)}}
	}
	_ = mc.ScatterSend(context.Background(), sends)
	n := copy(root.mr.Bytes()[1024:], "to everyone")
	_ = mc.MulticastSend(context.Background(), []int{0, 1, 2}, channel.SendRequest{Local: []channel.SGE{channel.Slice(root.mr, 1024, n)}})

	for j := range leaves {
		_ = first[j].Wait(context.Background())
		_ = second[j].Wait(context.Background())
		r1, _ := first[j].Result()
		r2, _ := second[j].Result()
		b := leafSides[j].mr.Bytes()
		fmt.Printf("peer %d: %q, %q\n", j, b[:r1.ByteCount], b[32:32+r2.ByteCount])
	}
	// Output:
	// peer 0: "for peer 0 only", "to everyone"
	// peer 1: "for peer 1 only", "to everyone"
	// peer 2: "for peer 2 only", "to everyone"
}

// A scope polls all of its work before it returns and reports every
// failure with its syndrome.
func ExampleMultiChannel_Scope() {
	fabric := sim.New(sim.Options{Mode: sim.Engine})
	defer fabric.Close()
	a, b := openSide(fabric, "sim0"), openSide(fabric, "sim1")
	defer a.close()
	defer b.close()
	pa, _ := channel.New(a.pd, channel.Options{})
	pb, _ := channel.New(b.pd, channel.Options{})
	_ = pb.Share(b.mr)
	ca, _ := pa.Handshake(pb.Endpoint())
	defer ca.Close()
	cb, _ := pb.Handshake(pa.Endpoint())
	defer cb.Close()
	region, _ := ca.RemoteRegion(0, 0)

	good := channel.At(region, 0)
	bad := good
	bad.RKey++ // not a key b handed out
	err := ca.MultiChannel.Scope(context.Background(), func(s *channel.Scope) error {
		local := []channel.SGE{channel.Slice(a.mr, 0, 8)}
		if _, err := s.PostWrite(channel.WriteRequest{Local: local, Remote: good}); err != nil {
			return err
		}
		_, err := s.PostWrite(channel.WriteRequest{Local: local, Remote: bad})
		return err
	})
	var ce *monocq.CompletionError
	if errors.As(err, &ce) {
		fmt.Println("failed:", ce.Status, ce.Syndrome, ce.Opcode)
	}
	fmt.Println("remote access error:", errors.Is(err, monocq.ErrRemoteAccess))
	fmt.Println("still outstanding:", ca.Outstanding())
	// Output:
	// failed: REM_ACCESS_ERR REMOTE_ACCESS_ERR RDMA_WRITE
	// remote access error: true
	// still outstanding: 0
}

// A receive bounded by a deadline: nothing is sent, the deadline passes,
// and the channel flushes the receive before the call returns, so the
// buffer is the caller's again; the channel itself has failed and refuses
// new work.
func ExampleMultiChannel_Receive() {
	fabric := sim.New(sim.Options{Mode: sim.Engine})
	defer fabric.Close()
	a, b := openSide(fabric, "sim0"), openSide(fabric, "sim1")
	defer a.close()
	defer b.close()
	pa, _ := channel.New(a.pd, channel.Options{})
	pb, _ := channel.New(b.pd, channel.Options{})
	ca, _ := pa.Handshake(pb.Endpoint())
	defer ca.Close()
	cb, _ := pb.Handshake(pa.Endpoint())
	defer cb.Close()

	c, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	_, err := ca.Receive(c, channel.RecvRequest{Local: []channel.SGE{channel.Slice(a.mr, 0, 64)}})
	fmt.Println("deadline exceeded:", errors.Is(err, context.DeadlineExceeded))
	fmt.Println("channel failed:", errors.Is(err, channel.ErrFailed))
	fmt.Println("still outstanding:", ca.Outstanding())
	err = ca.Send(context.Background(), channel.SendRequest{Local: []channel.SGE{channel.Slice(a.mr, 0, 8)}})
	fmt.Println("send refused:", errors.Is(err, channel.ErrFailed))
	// Output:
	// deadline exceeded: true
	// channel failed: true
	// still outstanding: 0
	// send refused: true
}

// Mesh connects N ranks over TCP: each rank's MultiChannel reaches every
// rank, itself included.
func ExampleMesh() {
	const ranks = 3
	fabric := sim.New(sim.Options{Mode: sim.Engine, Devices: ranks})
	defer fabric.Close()
	sides := make([]*side, ranks)
	prepared := make([]*channel.PreparedMulti, ranks)
	for i := range sides {
		sides[i] = openSide(fabric, fmt.Sprintf("sim%d", i))
		defer sides[i].close()
		prepared[i], _ = channel.NewMulti(sides[i].pd, ranks, channel.Options{})
		_ = prepared[i].Share(sides[i].mr)
	}
	mcs, err := channel.Mesh(context.Background(), "127.0.0.1:0", prepared)
	if err != nil {
		fmt.Println(err)
		return
	}
	// Rank 0 writes byte 0 of its buffer (42) into byte 100 of every
	// rank's buffer, its own included.
	sides[0].mr.Bytes()[0] = 42
	writes := make([]channel.WriteRequest, ranks)
	for j := range writes {
		region, _ := mcs[0].RemoteRegion(j, 0)
		writes[j] = channel.WriteRequest{Peer: j, Local: []channel.SGE{channel.Slice(sides[0].mr, 0, 1)}, Remote: channel.At(region, 100)}
	}
	fmt.Println(mcs[0].ScatterWrite(context.Background(), writes))
	for i := range sides {
		fmt.Println("rank", i, "byte 100:", sides[i].mr.Bytes()[100])
		_ = mcs[i].Close()
	}
	// Output:
	// <nil>
	// rank 0 byte 100: 42
	// rank 1 byte 100: 42
	// rank 2 byte 100: 42
}
