package main

import (
	"fmt"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/perftool"
)

// Queue sizes of each end.
const (
	sendDepth = 64
	recvDepth = 128
	cqDepth   = 512
)

// errAborted is returned by an end whose wait was ended because the other
// end failed.
var errAborted = perftool.ErrAborted

// end is one side of the ping-pong: a perftool.End whose receive area
// takes the peer's writes and whose source area is the payload sent.
type end struct {
	*perftool.End
	size   int
	inline bool   // the payload goes inline in the WQE
	recv   []byte // End.Recv
}

// endConfig is the setup of an end for messages of size bytes. inline
// asks for the payload inline when the device can carry it that way; the
// queue pair then takes size bytes inline, else none.
func endConfig(size int, inline bool, port, gidIndex int, timeout time.Duration) perftool.EndConfig {
	return perftool.EndConfig{
		Size:      size,
		SendDepth: sendDepth,
		RecvDepth: recvDepth,
		CQDepth:   cqDepth,
		Inline: func(device int) int {
			if inline && size <= device {
				return size
			}
			return 0
		},
		Port:     uint8(port),
		GIDIndex: gidIndex,
		Timeout:  timeout,
	}
}

// wrapper returns what makes an end of an x set up by endConfig with the
// same inline: its payload goes inline when that was asked for and the
// queue pair took the whole message.
func wrapper(inline bool) func(x *perftool.End) *end {
	return func(x *perftool.End) *end {
		size := len(x.Recv)
		return &end{End: x, size: size, inline: inline && x.MaxInline == size, recv: x.Recv}
	}
}

// newEnd creates an end on c for messages of size bytes: buffer, region,
// CQ and an RC queue pair in INIT with every receive posted. inline asks
// for the payload inline when the device can carry it that way. A
// negative gidIndex is resolved by perftool.GIDSelector.
func newEnd(name string, c *ctx.Context, size int, inline bool, port, gidIndex int, timeout time.Duration) (*end, error) {
	x, err := perftool.NewEnd(name, c, endConfig(size, inline, port, gidIndex, timeout))
	if err != nil {
		return nil, err
	}
	return wrapper(inline)(x), nil
}

// endpoint describes the end to its peer: the queue pair and the receive
// area it may write.
func (x *end) endpoint() endpoint.Endpoint {
	ep := x.QP.Endpoint()
	ep.Regions = []endpoint.RemoteRegion{{
		Address:   x.RecvAddr,
		Length:    uint64(max(x.size, 1)),
		RemoteKey: x.MR.RKey(),
		Access:    ctx.AccessRemoteWrite | ctx.AccessLocalWrite,
	}}
	return ep
}

// connect takes the peer's receive area from its endpoint and connects the
// queue pair to it.
func (x *end) connect(peer endpoint.Endpoint) error {
	if len(peer.Regions) != 1 {
		return fmt.Errorf("%s: the peer's endpoint has %d regions, want 1", x.Name, len(peer.Regions))
	}
	r := peer.Regions[0]
	if !r.Allows(ctx.AccessRemoteWrite) || r.Length < uint64(x.size) {
		return fmt.Errorf("%s: the peer's receive area %v does not take %d-byte writes", x.Name, r, x.size)
	}
	x.PeerRecv, x.RKey = r.Address, r.RemoteKey
	return x.QP.Connect(peer)
}

// post sends message seq: an RDMA_WRITE_IMM, signaled, with the payload
// inline (or by SGE when it is too long for that) and the WQE copied to the
// BlueFlame register. The first four bytes of the payload carry seq. It
// allocates nothing.
func (x *end) post(seq uint32) error {
	return x.Post(perftool.OpWriteImm, x.size, seq, x.inline)
}

// await busy-polls until message seq has arrived, checks that its data is
// in the receive area, and posts a receive in place of the one it used.
// Send completions met on the way are retired. It allocates nothing unless
// it fails.
func (x *end) await(seq uint32) error {
	return x.Await(perftool.OpWriteImm, x.size, seq)
}

// ping is one measured iteration of the measuring end: it sends seq and
// waits for the answer.
func (x *end) ping(seq uint32) error {
	if err := x.post(seq); err != nil {
		return err
	}
	return x.await(seq)
}

// drain polls until every signaled send has completed.
func (x *end) drain() error { return x.Drain() }

// verify checks the whole receive area against the last message, seq.
func (x *end) verify(seq uint32) error {
	for i, b := range x.recv {
		if want := perftool.Want(i, x.size, true, seq); b != want {
			return fmt.Errorf("%s: byte %d of the last message is %#02x, want %#02x", x.Name, i, b, want)
		}
	}
	return nil
}

// close destroys everything the end created.
func (x *end) close() error { return x.Close() }

// roundTrip is one iteration with both ends in the calling goroutine: a
// sends seq, b receives it and answers with seq, a receives the answer.
func roundTrip(a, b *end, seq uint32) error {
	if err := a.post(seq); err != nil {
		return err
	}
	if err := b.await(seq); err != nil {
		return err
	}
	if err := b.post(seq); err != nil {
		return err
	}
	return a.await(seq)
}
