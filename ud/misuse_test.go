package ud_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// A send to a nil Remote is refused with an error, at Post and at Finish;
// it does not crash and rings nothing.
func TestPostNilRemote(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	pd, cq := e.PD[0], e.CQ(0, 8)
	q, err := ud.New(pd, cq, ud.Config{SendDepth: 4, MaxInline: 16, QKey: 0x11})
	if err != nil {
		t.Fatal(err)
	}
	st, err := q.Post(1, wqebuilder.Signaled, nil)
	if !errors.Is(err, ctx.ErrInvalidArgument) {
		t.Errorf("post to a nil remote: %v, want ctx.ErrInvalidArgument", err)
	}
	if err := st.Send().Inline([]byte("x")).Finish(); !errors.Is(err, ctx.ErrInvalidArgument) {
		t.Errorf("finish of a post to a nil remote: %v", err)
	}
	if pi := q.SendQueue().ProducerIndex(); pi != 0 {
		t.Errorf("producer index %d after a refused post", pi)
	}
}

// TestNewRemoteRefusesNoAddress: a UD endpoint with neither a LID nor a
// GID (InfiniBand), or without a GID (RoCE), is refused with
// ctx.ErrInvalidArgument; before, NewRemote made an address handle for
// the zero GID and the datagrams went nowhere.
func TestNewRemoteRefusesNoAddress(t *testing.T) {
	for _, link := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		e := transporttest.New(t, sim.Options{LinkLayer: link})
		q, err := ud.New(e.PD[0], e.CQ(0, 8), ud.Config{SendDepth: 4, QKey: 0x11})
		if err != nil {
			t.Fatal(err)
		}
		remote := endpoint.Endpoint{Transport: endpoint.TransportUD, QPN: 0x123, QKey: 0x11, MTU: ctx.MTU1024}
		if link == ctx.LinkLayerEthernet {
			remote.LID = 5
		}
		if r, err := q.NewRemote(remote); !errors.Is(err, ctx.ErrInvalidArgument) {
			t.Errorf("%v: NewRemote(%v) = %v, %v; want ctx.ErrInvalidArgument", link, remote, r, err)
		}
		if link == ctx.LinkLayerInfiniBand {
			// A multicast group is reached by UD alone, and by its LID.
			remote.LID, remote.QPN = 0xc001, 0xffffff
			r, err := q.NewRemote(remote)
			if err != nil {
				t.Errorf("NewRemote(%v): %v", remote, err)
			} else {
				_ = r.Close()
			}
		}
	}
}

// TestPostClosedRemote: a send to a Remote after its Close (its address
// handle destroyed) is refused with ctx.ErrClosed, at Post and at Finish,
// and rings nothing, as every other use of a closed object is.
func TestPostClosedRemote(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	q, err := ud.New(e.PD[0], e.CQ(0, 8), ud.Config{SendDepth: 4, MaxInline: 16, QKey: 0x11})
	if err != nil {
		t.Fatal(err)
	}
	r, err := q.NewRemote(endpoint.Endpoint{Transport: endpoint.TransportUD, QPN: 0x123, QKey: 0x11, LID: 5, MTU: ctx.MTU1024})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	st, err := q.Post(1, wqebuilder.Signaled, r)
	if !errors.Is(err, ctx.ErrClosed) {
		t.Errorf("post to a closed remote: %v, want ctx.ErrClosed", err)
	}
	if err := st.Send().Inline([]byte("x")).Finish(); !errors.Is(err, ctx.ErrClosed) {
		t.Errorf("finish of a post to a closed remote: %v", err)
	}
	if pi := q.SendQueue().ProducerIndex(); pi != 0 {
		t.Errorf("producer index %d after a refused post", pi)
	}
}

// TestZeroQP: a QP not made by New refuses NewRemote (of a valid endpoint)
// with ctx.ErrInvalidArgument, and closes without error; NewRemote
// panicked.
func TestZeroQP(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	peer, err := ud.New(e.PD[1], e.CQ(1, 8), ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 0x11})
	require.NoError(t, err)
	var q ud.QP
	require.NotPanics(t, func() {
		_, err := q.NewRemote(peer.Endpoint())
		require.ErrorIs(t, err, ctx.ErrInvalidArgument)
		require.NoError(t, q.Close())
	})
}

// TestPostOnZeroQP: Post on a QP not made by New is refused with a
// *wqebuilder.PostError wrapping ctx.ErrInvalidArgument, to a Remote or to
// nil, and the stage it returns fails at Finish the same way; it
// panicked (a nil *ctx.QueuePair, no refusal queue).
func TestPostOnZeroQP(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	peer, err := ud.New(e.PD[0], e.CQ(0, 8), ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 0x11})
	require.NoError(t, err)
	r, err := peer.NewRemote(peer.Endpoint())
	require.NoError(t, err)
	var q ud.QP
	for _, remote := range []*ud.Remote{r, nil} {
		require.NotPanics(t, func() {
			s, err := q.Post(1, wqebuilder.Signaled, remote)
			var pe *wqebuilder.PostError
			require.ErrorAs(t, err, &pe)
			require.ErrorIs(t, err, ctx.ErrInvalidArgument)
			require.ErrorIs(t, s.Send().Inline([]byte("x")).FinishBlueFlame(), ctx.ErrInvalidArgument)
		})
	}
}
