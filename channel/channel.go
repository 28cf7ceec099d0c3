package channel

import (
	"context"
	"fmt"
	"net"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/rc"
)

// Prepared is a Channel whose queue pair exists but is not connected: send
// Endpoint to the peer, and Handshake with the peer's.
type Prepared struct {
	m *PreparedMulti
}

// Share adds mr to the regions the peer learns from Endpoint.
func (p *Prepared) Share(mr *ctx.MemoryRegion) error { return p.m.Share(mr) }

// Endpoint returns what the peer needs to connect: QPN, PSN, LID, GID, MTU
// and the shared regions.
func (p *Prepared) Endpoint() endpoint.Endpoint { return p.m.Endpoints()[0] }

// GID returns the local GID table entry the channel sends from (see
// PreparedMulti.GID).
func (p *Prepared) GID() ctx.GIDEntry { return p.m.GID() }

// Handshake connects the channel to the peer's endpoint. The endpoint is
// checked before anything changes; garbage is refused and the prepared
// channel may try again.
func (p *Prepared) Handshake(remote endpoint.Endpoint) (*Channel, error) {
	m, err := p.m.Handshake([]endpoint.Endpoint{remote})
	if err != nil {
		return nil, err
	}
	return &Channel{m: m}, nil
}

// HandshakeConn exchanges endpoints with the peer over conn and connects.
// side says whether this end dialed conn or accepted it (the peer's side
// is the other); both ends prove to each other that they hold sec's key
// before either sends its endpoint (see endpoint.Exchange: deadlines from
// ctx, the peer's bytes checked, no key refused unless
// sec.InsecureLoopback on a host-local connection).
func (p *Prepared) HandshakeConn(c context.Context, conn net.Conn, side endpoint.Side, sec endpoint.Security) (*Channel, error) {
	remote, err := endpoint.Exchange(c, conn, side, p.Endpoint(), sec)
	if err != nil {
		return nil, fmt.Errorf("channel: handshake: %w", err)
	}
	return p.Handshake(remote)
}

// Close releases the queue pair of a channel that was never connected.
func (p *Prepared) Close() error { return p.m.Close() }

// Channel is one connected queue pair to one peer with its completion
// queue, in a protection domain the caller owns. Its requests' Peer field
// must be 0 (the only peer). It offers the same three levels as
// MultiChannel: blocking calls, Scope, and raw posts.
//
// A Channel is used by one goroutine at a time.
type Channel struct {
	m *MultiChannel
}

// Multi returns the channel as a MultiChannel of one peer, for code written
// against MultiChannel.
func (ch *Channel) Multi() *MultiChannel { return ch.m }

// GID returns the local GID table entry the channel sends from (see
// PreparedMulti.GID).
func (ch *Channel) GID() ctx.GIDEntry { return ch.m.GID() }

// Remote returns the endpoint the peer sent in the handshake.
func (ch *Channel) Remote() endpoint.Endpoint { return ch.m.Remote(0) }

// RemoteRegion returns region i of those the peer shared.
func (ch *Channel) RemoteRegion(i int) (endpoint.RemoteRegion, error) { return ch.m.RemoteRegion(0, i) }

// QP returns the queue pair (nil for a DC channel).
func (ch *Channel) QP() *rc.QP { return ch.m.QP(0) }

// Send is SendContext with context.Background().
func (ch *Channel) Send(r SendRequest) error { return ch.m.Send(r) }

// SendContext sends and waits for the completion, or until c ends (see
// the package documentation).
func (ch *Channel) SendContext(c context.Context, r SendRequest) error { return ch.m.SendContext(c, r) }

// Receive is ReceiveContext with context.Background().
func (ch *Channel) Receive(r RecvRequest) (Result, error) { return ch.m.Receive(r) }

// ReceiveContext posts a receive and waits for a message, or until c ends.
func (ch *Channel) ReceiveContext(c context.Context, r RecvRequest) (Result, error) {
	return ch.m.ReceiveContext(c, r)
}

// Write is WriteContext with context.Background().
func (ch *Channel) Write(r WriteRequest) error { return ch.m.Write(r) }

// WriteContext writes and waits for the completion, or until c ends.
func (ch *Channel) WriteContext(c context.Context, r WriteRequest) error {
	return ch.m.WriteContext(c, r)
}

// Read is ReadContext with context.Background().
func (ch *Channel) Read(r ReadRequest) error { return ch.m.Read(r) }

// ReadContext reads and waits for the data, or until c ends.
func (ch *Channel) ReadContext(c context.Context, r ReadRequest) error { return ch.m.ReadContext(c, r) }

// CompareSwap is CompareSwapContext with context.Background().
func (ch *Channel) CompareSwap(r CompareSwapRequest) error { return ch.m.CompareSwap(r) }

// CompareSwapContext runs an atomic compare-and-swap at the peer and waits
// for the old value in r.Result, or until c ends.
func (ch *Channel) CompareSwapContext(c context.Context, r CompareSwapRequest) error {
	return ch.m.CompareSwapContext(c, r)
}

// FetchAdd is FetchAddContext with context.Background().
func (ch *Channel) FetchAdd(r FetchAddRequest) error { return ch.m.FetchAdd(r) }

// FetchAddContext runs an atomic fetch-and-add at the peer and waits for
// the old value in r.Result, or until c ends.
func (ch *Channel) FetchAddContext(c context.Context, r FetchAddRequest) error {
	return ch.m.FetchAddContext(c, r)
}

// Scope is ScopeContext with context.Background().
func (ch *Channel) Scope(fn func(s *Scope) error) error { return ch.m.Scope(fn) }

// ScopeContext runs fn with a scope and polls its work to completion, or
// until c ends (see MultiChannel.ScopeContext).
func (ch *Channel) ScopeContext(c context.Context, fn func(s *Scope) error) error {
	return ch.m.ScopeContext(c, fn)
}

// PostSend posts a SEND without waiting.
func (ch *Channel) PostSend(r SendRequest) (Pending, error) { return ch.m.PostSend(r) }

// PostReceive posts a receive without waiting.
func (ch *Channel) PostReceive(r RecvRequest) (Pending, error) { return ch.m.PostReceive(r) }

// PostWrite posts an RDMA WRITE without waiting.
func (ch *Channel) PostWrite(r WriteRequest) (Pending, error) { return ch.m.PostWrite(r) }

// PostRead posts an RDMA READ without waiting.
func (ch *Channel) PostRead(r ReadRequest) (Pending, error) { return ch.m.PostRead(r) }

// PostCompareSwap posts an atomic compare-and-swap without waiting.
func (ch *Channel) PostCompareSwap(r CompareSwapRequest) (Pending, error) {
	return ch.m.PostCompareSwap(r)
}

// PostFetchAdd posts an atomic fetch-and-add without waiting.
func (ch *Channel) PostFetchAdd(r FetchAddRequest) (Pending, error) { return ch.m.PostFetchAdd(r) }

// Poll processes the completions that have arrived.
func (ch *Channel) Poll() int { return ch.m.Poll() }

// Outstanding returns the work requests posted and not yet completed.
func (ch *Channel) Outstanding() int { return ch.m.Outstanding() }

// Err returns the first problem met while polling that belongs to no work
// request.
func (ch *Channel) Err() error { return ch.m.Err() }

// Fail moves the queue pair to error and polls until its outstanding work
// has flushed (see MultiChannel.Fail).
func (ch *Channel) Fail() error { return ch.m.Fail() }

// Close destroys the queue pair and the completion queue.
func (ch *Channel) Close() error { return ch.m.Close() }
