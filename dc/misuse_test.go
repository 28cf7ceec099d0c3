package dc_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// A post to a nil Remote is refused with an error, at Post and at Finish;
// it does not crash and rings nothing.
func TestPostNilRemote(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	pd, cq := e.PD[0], e.CQ(0, 8)
	d, err := dc.NewDCI(pd, cq, dc.DCIConfig{SendDepth: 4, MaxInline: 16})
	if err != nil {
		t.Fatal(err)
	}
	for _, post := range []func() (wqebuilder.OpStage, error){
		func() (wqebuilder.OpStage, error) { return d.Post(1, wqebuilder.Signaled, nil) },
	} {
		st, err := post()
		if !errors.Is(err, ctx.ErrInvalidArgument) {
			t.Errorf("post to a nil remote: %v, want ctx.ErrInvalidArgument", err)
		}
		if err := st.Send().Inline([]byte("x")).Finish(); !errors.Is(err, ctx.ErrInvalidArgument) {
			t.Errorf("finish of a post to a nil remote: %v", err)
		}
		if pi := d.SendQueue().ProducerIndex(); pi != 0 {
			t.Errorf("producer index %d after a refused post", pi)
		}
	}
	// A second one is refused too.
	if _, err := d.Post(2, 0, nil); err == nil {
		t.Fatal("second nil post accepted")
	}
}

// TestNewRemoteRefusesNoAddress: a DCT endpoint with neither a LID nor a
// GID, or with a multicast LID (InfiniBand), or without a GID (RoCE), is
// refused with ctx.ErrInvalidArgument; before, NewRemote made an address
// handle for it and the DCI's sends went nowhere.
func TestNewRemoteRefusesNoAddress(t *testing.T) {
	for _, link := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		e := transporttest.New(t, sim.Options{LinkLayer: link})
		d, err := dc.NewDCI(e.PD[0], e.CQ(0, 8), dc.DCIConfig{SendDepth: 4})
		if err != nil {
			t.Fatal(err)
		}
		remote := endpoint.Endpoint{Transport: endpoint.TransportDC, DCTNumber: 0x123, DCAccessKey: 7, MTU: ctx.MTU1024}
		if link == ctx.LinkLayerEthernet {
			remote.LID = 5
		}
		if r, err := d.NewRemote(remote); !errors.Is(err, ctx.ErrInvalidArgument) {
			t.Errorf("%v: NewRemote(%v) = %v, %v; want ctx.ErrInvalidArgument", link, remote, r, err)
		}
		if link == ctx.LinkLayerInfiniBand {
			remote.LID = 0xc000
			if r, err := d.NewRemote(remote); !errors.Is(err, ctx.ErrInvalidArgument) {
				t.Errorf("NewRemote(%v) = %v, %v; want ctx.ErrInvalidArgument", remote, r, err)
			}
		}
	}
}

// TestPostClosedRemote: a post to a Remote after its Close (its address
// handle destroyed) is refused with ctx.ErrClosed, at Post and at Finish,
// and rings nothing, as every other use of a closed object is.
func TestPostClosedRemote(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	d, err := dc.NewDCI(e.PD[0], e.CQ(0, 8), dc.DCIConfig{SendDepth: 4, MaxInline: 16})
	if err != nil {
		t.Fatal(err)
	}
	r, err := d.NewRemote(endpoint.Endpoint{Transport: endpoint.TransportDC, DCTNumber: 0x123, DCAccessKey: 7, LID: 5, MTU: ctx.MTU1024})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Close(); err != nil {
		t.Fatal(err)
	}
	for _, post := range []func() (wqebuilder.OpStage, error){
		func() (wqebuilder.OpStage, error) { return d.Post(1, wqebuilder.Signaled, r) },
	} {
		st, err := post()
		if !errors.Is(err, ctx.ErrClosed) {
			t.Errorf("post to a closed remote: %v, want ctx.ErrClosed", err)
		}
		if err := st.Send().Inline([]byte("x")).Finish(); !errors.Is(err, ctx.ErrClosed) {
			t.Errorf("finish of a post to a closed remote: %v", err)
		}
		if pi := d.SendQueue().ProducerIndex(); pi != 0 {
			t.Errorf("producer index %d after a refused post", pi)
		}
	}
}

// TestZeroDCI: a DCI not made by NewDCI refuses NewRemote (of a valid
// endpoint) with ctx.ErrInvalidArgument, and closes without error;
// NewRemote panicked.
func TestZeroDCI(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	srq, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	dct, err := dc.NewDCT(e.PD[1], e.CQ(1, 8), dc.DCTConfig{SRQ: srq, Key: 1})
	require.NoError(t, err)
	var d dc.DCI
	require.NotPanics(t, func() {
		_, err := d.NewRemote(dct.Endpoint())
		require.ErrorIs(t, err, ctx.ErrInvalidArgument)
		require.NoError(t, d.Close())
	})
}

// TestPostOnZeroDCI: Post on a DCI not made by NewDCI is refused with a
// *wqebuilder.PostError wrapping ctx.ErrInvalidArgument, to a Remote or to
// nil, and the stage it returns fails at Finish the same way; it
// panicked (a nil *ctx.QueuePair, no refusal queue).
func TestPostOnZeroDCI(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	srq, err := transport.NewSharedReceiveQueue(e.PD[0], ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	dct, err := dc.NewDCT(e.PD[0], e.CQ(0, 8), dc.DCTConfig{SRQ: srq, Key: 1})
	require.NoError(t, err)
	dci, err := dc.NewDCI(e.PD[0], e.CQ(0, 8), dc.DCIConfig{SendDepth: 4})
	require.NoError(t, err)
	r, err := dci.NewRemote(dct.Endpoint())
	require.NoError(t, err)
	var d dc.DCI
	for _, remote := range []*dc.Remote{r, nil} {
		require.NotPanics(t, func() {
			s, err := d.Post(1, wqebuilder.Signaled, remote)
			var pe *wqebuilder.PostError
			require.ErrorAs(t, err, &pe)
			require.ErrorIs(t, err, ctx.ErrInvalidArgument)
			require.ErrorIs(t, s.Send().Inline([]byte("x")).FinishBlueFlame(), ctx.ErrInvalidArgument)
		})
	}
}
