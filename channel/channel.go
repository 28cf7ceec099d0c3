package channel

import (
	"context"
	"fmt"
	"net"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// Prepared is a Channel whose queue pair exists but is not connected: send
// Endpoint to the peer, and Handshake with the peer's.
type Prepared struct {
	m *PreparedMulti
}

// Share adds mr to the regions the peer learns from Endpoint. After
// Handshake it returns ErrUsed: the peer has its endpoint already.
func (p *Prepared) Share(mr *ctx.MemoryRegion) error { return p.m.Share(mr) }

// Endpoint returns what the peer needs to connect: QPN, PSN, LID, GID, MTU
// and the shared regions.
func (p *Prepared) Endpoint() endpoint.Endpoint {
	if p.m.zero() {
		return endpoint.Endpoint{} // a zero Prepared
	}
	return p.m.Endpoints()[0]
}

// GID returns the local GID table entry the channel sends from (see
// PreparedMulti.GID).
func (p *Prepared) GID() ctx.GIDEntry { return p.m.GID() }

// Handshake connects the channel to the peer's endpoint. The endpoint is
// checked before anything changes; garbage is refused and the prepared
// channel may try again.
func (p *Prepared) Handshake(remote endpoint.Endpoint) (*Channel, error) {
	if err := p.m.usable("channel: handshake"); err != nil {
		return nil, err
	}
	if p.m.own(remote) == 0 {
		return nil, fmt.Errorf("channel: handshake: the peer sent this side's own endpoint (QPN %#x, DCT %#x, LID %d), a loop to itself (%s): %w",
			remote.QPN, remote.DCTNumber, remote.LID, loopHint, ErrHandshake)
	}
	m, err := p.m.Handshake([]endpoint.Endpoint{remote})
	if err != nil {
		return nil, err
	}
	return &Channel{MultiChannel: m}, nil
}

// HandshakeConn exchanges endpoints with the peer over conn and connects.
// side says whether this end dialed conn or accepted it (the peer's side
// is the other); both ends prove to each other that they hold sec's key
// before either sends its endpoint (see endpoint.Exchange: deadlines from
// ctx, the peer's bytes checked, no key refused unless
// sec.InsecureLoopback on a host-local connection). A prepared channel
// that was closed or has been used already is refused at once, as
// Handshake refuses it (ctx.ErrClosed, ErrUsed), and nothing is sent.
func (p *Prepared) HandshakeConn(c context.Context, conn net.Conn, side endpoint.Side, sec endpoint.Security) (*Channel, error) {
	if err := p.m.usable("channel: handshake"); err != nil {
		return nil, err
	}
	remote, err := endpoint.Exchange(c, conn, side, p.Endpoint(), sec)
	if err != nil {
		return nil, fmt.Errorf("channel: handshake: %w", err)
	}
	return p.Handshake(remote)
}

// Close releases the queue pair of a channel that was never connected.
// After Handshake (or HandshakeConn) it does nothing and returns nil: the
// queue pair is the Channel's (see PreparedMulti.Close).
//
// Close of a nil *Prepared returns nil.
func (p *Prepared) Close() error {
	if p == nil {
		return nil
	}
	return p.m.Close()
}

// Channel is one connected queue pair to one peer with its completion
// queue, in a protection domain the caller owns: a MultiChannel of one
// peer, whose methods it has (the blocking calls, Scope, the raw posts,
// Poll, Fail, Close, …; see MultiChannel). Its requests' Peer field and the
// peer argument of Remote, RemoteRegion and QP are 0 (the only peer).
//
// A Channel is used by one goroutine at a time, Close included; its
// Context, protection domain or queue pair may be closed from any
// goroutine, which ends the owner's waits (see MultiChannel).
type Channel struct {
	*MultiChannel
}

// Close destroys the channel's queue pair and completion queue, as
// MultiChannel.Close does. Close of a nil *Channel returns nil.
func (ch *Channel) Close() error {
	if ch == nil {
		return nil
	}
	return ch.MultiChannel.Close()
}
