package channel

import (
	"context"
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

// The mesh helpers connect N ranks that each built a MultiChannel of N
// peers: rank r's peer j is rank j, and its own index r is a queue pair
// connected to itself (a loopback, useful for uniform collectives). Rank 0
// listens and the others dial it (package endpoint's mesh), each checking
// the others' endpoints. Every rank proves it holds the mesh's key before
// it learns anything (see endpoint.MeshOptions). An endpoint.MeshWatch in
// the options is the caller's to close, after an error too: the endpoints
// may have been swapped, and the watch filled, before Handshake failed.

// AcceptMesh runs rank 0: it waits on l (from endpoint.ListenMesh, with
// the mesh's key) for the other ranks, swaps endpoints and connects. l is
// closed when it returns. A prepared channel that was closed or has been
// used already is refused at once, as Handshake refuses it (ctx.ErrClosed,
// ErrUsed), before any rank learns its endpoints; a nil l is refused with
// ctx.ErrInvalidArgument.
func (p *PreparedMulti) AcceptMesh(c context.Context, l *endpoint.MeshListener) (*MultiChannel, error) {
	const op = "channel: accept mesh"
	if l == nil {
		return nil, fmt.Errorf("%s: nil listener: %w", op, ctx.ErrInvalidArgument)
	}
	if err := p.usable(op); err != nil {
		_ = l.Close()
		return nil, err
	}
	remote, err := l.Exchange(c, p.Endpoints())
	if err != nil {
		return nil, fmt.Errorf("%s: %w", op, err)
	}
	return p.Handshake(remote)
}

// DialMesh runs rank (1..Peers()-1): it dials rank 0 at address, proves it
// holds opts' key, swaps endpoints and connects. A prepared channel that
// was closed or has been used already is refused at once, as Handshake
// refuses it (ctx.ErrClosed, ErrUsed), without dialing.
func (p *PreparedMulti) DialMesh(c context.Context, address string, rank int, opts endpoint.MeshOptions) (*MultiChannel, error) {
	if err := p.usable("channel: dial mesh"); err != nil {
		return nil, err
	}
	remote, err := endpoint.DialMesh(c, address, rank, p.Endpoints(), opts)
	if err != nil {
		return nil, fmt.Errorf("channel: dial mesh: %w", err)
	}
	return p.Handshake(remote)
}

// Mesh connects every rank of prepared, all in this process, over TCP on
// address (e.g. "127.0.0.1:0"): prepared[i] becomes rank i. The ranks
// authenticate with a key made for the call (see endpoint.Mesh). It is
// meant for tests and tools. A nil prepared channel is refused with
// ctx.ErrInvalidArgument, one that was closed or used already as
// Handshake refuses it (ctx.ErrClosed, ErrUsed), before any endpoint is
// exchanged. On error every prepared channel is closed, except one that
// was used already (its channel is not the call's to close).
func Mesh(c context.Context, address string, prepared []*PreparedMulti) ([]*MultiChannel, error) {
	const op = "channel: mesh"
	closeAll := func() {
		for _, p := range prepared {
			_ = p.Close()
		}
	}
	local := make([][]endpoint.Endpoint, len(prepared))
	for i, p := range prepared {
		if p == nil {
			closeAll()
			return nil, fmt.Errorf("%s: rank %d: nil prepared channel: %w", op, i, ctx.ErrInvalidArgument)
		}
		if err := p.usable(fmt.Sprintf("%s: rank %d", op, i)); err != nil {
			closeAll()
			return nil, err
		}
		if p.Peers() != len(prepared) {
			closeAll()
			return nil, fmt.Errorf("channel: mesh: rank %d has %d peers, the mesh %d ranks: %w", i, p.Peers(), len(prepared), ErrHandshake)
		}
		local[i] = p.Endpoints()
	}
	remote, err := endpoint.Mesh(c, address, local)
	if err != nil {
		closeAll()
		return nil, fmt.Errorf("channel: mesh: %w", err)
	}
	out := make([]*MultiChannel, len(prepared))
	var errs []error
	for i, p := range prepared {
		if out[i], err = p.Handshake(remote[i]); err != nil {
			errs = append(errs, fmt.Errorf("rank %d: %w", i, err))
		}
	}
	if len(errs) > 0 {
		// The ranks that connected are their MultiChannels' now (a
		// used prepared channel's Close does nothing).
		for _, m := range out {
			if m != nil {
				_ = m.Close()
			}
		}
		closeAll()
		return nil, fmt.Errorf("channel: mesh: %w", errors.Join(errs...))
	}
	return out, nil
}
