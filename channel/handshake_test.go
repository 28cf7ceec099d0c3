package channel_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
)

func TestNewRefusesBadInput(t *testing.T) {
	f := newFabric(t, 1)
	h := newHost(t, f, 0, 4096)
	_, err := channel.New(nil, channel.Options{})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = channel.NewMulti(h.pd, 0, channel.Options{})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = channel.NewMulti(h.pd, endpoint.MaxPeers+1, channel.Options{})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = channel.NewMulti(h.pd, 2, channel.Options{Transport: 9})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = channel.New(h.pd, channel.Options{Transport: endpoint.TransportUD})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument, "a channel runs over RC or DC, not UD")
	require.ErrorContains(t, err, "transport UD")
}

// TestHandshakeFedGarbage feeds a prepared channel endpoints that are wrong
// in every way a peer can get them wrong, then a good one: the garbage
// changes nothing and the good handshake still connects.
func TestHandshakeFedGarbage(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	pa, err := channel.NewMulti(a.pd, 2, channel.Options{WaitTimeout: 10 * time.Second})
	require.NoError(t, err)
	pb, err := channel.NewMulti(b.pd, 2, channel.Options{WaitTimeout: 10 * time.Second})
	require.NoError(t, err)
	ea, eb := pa.Endpoints(), pb.Endpoints()
	good := []endpoint.Endpoint{wire(t, eb[0]), wire(t, eb[1])}

	mutate := func(j int, fn func(*endpoint.Endpoint)) []endpoint.Endpoint {
		out := append([]endpoint.Endpoint(nil), good...)
		fn(&out[j])
		return out
	}
	cases := map[string][]endpoint.Endpoint{
		"none":            nil,
		"one short":       good[:1],
		"one extra":       append(append([]endpoint.Endpoint(nil), good...), good[0]),
		"zero value":      mutate(1, func(e *endpoint.Endpoint) { *e = endpoint.Endpoint{} }),
		"QPN over 24 bit": mutate(0, func(e *endpoint.Endpoint) { e.QPN = 1 << 24 }),
		"QPN 0":           mutate(0, func(e *endpoint.Endpoint) { e.QPN = 0 }),
		"PSN over 24 bit": mutate(1, func(e *endpoint.Endpoint) { e.PSN = 1 << 24 }),
		"bad MTU":         mutate(1, func(e *endpoint.Endpoint) { e.MTU = 0 }),
		"UD endpoint":     mutate(0, func(e *endpoint.Endpoint) { e.Transport = endpoint.TransportUD }),
		"DC endpoint": mutate(0, func(e *endpoint.Endpoint) {
			e.Transport, e.DCTNumber, e.DCAccessKey = endpoint.TransportDC, 0x99, 1
		}),
		"wrapping region": mutate(1, func(e *endpoint.Endpoint) {
			e.Regions = []endpoint.RemoteRegion{{Address: ^uint64(0), Length: 2, RemoteKey: 1}}
		}),
		"unknown transport": mutate(1, func(e *endpoint.Endpoint) { e.Transport = 77 }),
	}
	for name, remote := range cases {
		_, err := pa.Handshake(remote)
		require.ErrorIs(t, err, channel.ErrHandshake, name)
	}
	// Bytes that are not an endpoint never reach Handshake: decoding fails.
	for _, garbage := range [][]byte{nil, []byte("garbage"), make([]byte, 200), []byte("MXEP\x00\x01\xff\xff")} {
		var e endpoint.Endpoint
		require.ErrorIs(t, e.UnmarshalBinary(garbage), endpoint.ErrMalformed)
	}

	// After all that, the real handshake works.
	ma, err := pa.Handshake(good)
	require.NoError(t, err)
	defer ma.Close()
	mb, err := pb.Handshake([]endpoint.Endpoint{wire(t, ea[0]), wire(t, ea[1])})
	require.NoError(t, err)
	defer mb.Close()
	_, err = pa.Handshake(good)
	require.ErrorIs(t, err, channel.ErrUsed)

	copy(a.bytes(), "after garbage")
	done := make(chan error, 1)
	go func() {
		_, err := mb.Receive(context.Background(), channel.RecvRequest{Peer: 1, Local: b.sge(0, 64)})
		done <- err
	}()
	require.NoError(t, ma.Send(context.Background(), channel.SendRequest{Peer: 1, Local: a.sge(0, 13)}))
	require.NoError(t, <-done)
	require.Equal(t, "after garbage", string(b.bytes()[:13]))
}

func TestHandshakeDCRefusesMissingDCT(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 4096), newHost(t, f, 1, 4096)
	opts := channel.Options{Transport: endpoint.TransportDC}
	pa, err := channel.New(a.pd, opts)
	require.NoError(t, err)
	defer pa.Close()
	pb, err := channel.New(b.pd, opts)
	require.NoError(t, err)
	defer pb.Close()
	e := pb.Endpoint()
	require.NotZero(t, e.DCTNumber)
	e.DCTNumber = 0
	_, err = pa.Handshake(e)
	require.ErrorIs(t, err, channel.ErrHandshake)
	rc := endpoint.Endpoint{Transport: endpoint.TransportRC, QPN: 5, LID: 1, MTU: ctx.MTU1024}
	_, err = pa.Handshake(rc)
	require.ErrorIs(t, err, channel.ErrHandshake)
}

// testSec is the key of the tests' handshakes.
var testSec = endpoint.Security{Key: []byte("channel-test-key-0123456789")}

// TestHandshakeConnHostilePeer runs the TCP handshake against a peer that
// answers garbage, and against one that hangs up.
func TestHandshakeConnHostilePeer(t *testing.T) {
	f := newFabric(t, 2)
	a := newHost(t, f, 0, 4096)
	p, err := channel.New(a.pd, channel.Options{})
	require.NoError(t, err)
	defer p.Close()

	mine, theirs := net.Pipe()
	go func() {
		buf := make([]byte, 4096)
		_, _ = theirs.Read(buf)
		_, _ = theirs.Write([]byte("MXEP\x00\x01\x00\x30this is not an endpoint at all, not at all!!"))
		_ = theirs.Close()
	}()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = p.HandshakeConn(c, mine, endpoint.DialSide, testSec)
	require.ErrorIs(t, err, endpoint.ErrMalformed)

	mine, theirs = net.Pipe()
	go func() { _ = theirs.Close() }()
	_, err = p.HandshakeConn(c, mine, endpoint.DialSide, testSec)
	require.Error(t, err)

	// A silent peer costs the context's deadline.
	mine, theirs = net.Pipe()
	defer theirs.Close()
	go func() { buf := make([]byte, 4096); _, _ = theirs.Read(buf) }()
	short, cancel2 := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel2()
	_, err = p.HandshakeConn(short, mine, endpoint.DialSide, testSec)
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

func TestHandshakeConnConnects(t *testing.T) {
	f := newFabric(t, 2)
	a, b := newHost(t, f, 0, 4096), newHost(t, f, 1, 4096)
	pa, err := channel.New(a.pd, channel.Options{WaitTimeout: 10 * time.Second})
	require.NoError(t, err)
	pb, err := channel.New(b.pd, channel.Options{WaitTimeout: 10 * time.Second})
	require.NoError(t, err)
	require.NoError(t, pb.Share(b.mr))
	ca, cb := net.Pipe()
	c, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var chB *channel.Channel
	errB := make(chan error, 1)
	go func() {
		var err error
		chB, err = pb.HandshakeConn(c, cb, endpoint.AcceptSide, testSec)
		errB <- err
	}()
	chA, err := pa.HandshakeConn(c, ca, endpoint.DialSide, testSec)
	require.NoError(t, err)
	require.NoError(t, <-errB)
	defer chA.Close()
	defer chB.Close()
	region, err := chA.RemoteRegion(0, 0)
	require.NoError(t, err)
	copy(a.bytes(), "over tcp")
	require.NoError(t, chA.Write(context.Background(), channel.WriteRequest{Local: a.sge(0, 8), Remote: channel.At(region, 64)}))
	require.Equal(t, "over tcp", string(b.bytes()[64:72]))
	_, err = chA.RemoteRegion(0, 1)
	require.ErrorIs(t, err, ctx.ErrNotFound)
}

// TestHandshakeRefusesNoAddress: an endpoint with neither a LID nor a GID,
// with a GID and no LID (on InfiniBand), or with a multicast LID, is refused with ErrHandshake before anything is
// connected, and the prepared channel then connects to the real peer;
// before, the handshake connected the queue pair (RC) or made the address
// handle (DC) towards the zero GID or the multicast LID, and the first
// send failed with RETRY_EXC_ERR.
func TestHandshakeRefusesNoAddress(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFabric(t, 2)
			a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
			pa, err := channel.NewMulti(a.pd, 1, channel.Options{Transport: tr, WaitTimeout: 10 * time.Second})
			require.NoError(t, err)
			pb, err := channel.NewMulti(b.pd, 1, channel.Options{Transport: tr, WaitTimeout: 10 * time.Second})
			require.NoError(t, err)
			noAddress, multicast, noLID := pb.Endpoints()[0], pb.Endpoints()[0], pb.Endpoints()[0]
			noAddress.LID, noAddress.GID = 0, ctx.GID{}
			multicast.LID = 0xc001
			noLID.LID = 0 // a GID does not stand for the LID on InfiniBand
			for _, bad := range []endpoint.Endpoint{noAddress, multicast, noLID} {
				m, err := pa.Handshake([]endpoint.Endpoint{bad})
				if m != nil {
					m.Close()
				}
				require.ErrorIs(t, err, channel.ErrHandshake, "%v", bad)
			}
			ma, err := pa.Handshake(pb.Endpoints())
			require.NoError(t, err, "the refusal spoilt the prepared channel")
			defer ma.Close()
			mb, err := pb.Handshake(pa.Endpoints())
			require.NoError(t, err)
			defer mb.Close()
		})
	}
}

// TestHandshakeRefusesOwnEndpoint: a Channel's peer that sends this
// side's own endpoint (one that echoes it, or a process numbered alike on
// a software fabric of its own, which does not share /dev/shm) is refused
// with ErrHandshake, where the queue pair was connected to itself and the
// side's sends came back to it; so is a MultiChannel's peer that names
// this side's endpoint for another peer. A mesh rank's peer naming its own
// endpoint for that rank is its loop to itself, as before (TestMeshAllToAll).
// The refusals leave the prepared channels usable.
func TestHandshakeRefusesOwnEndpoint(t *testing.T) {
	for _, tr := range []endpoint.Transport{endpoint.TransportRC, endpoint.TransportDC} {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFabric(t, 2)
			a, b := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
			pa, err := channel.New(a.pd, channel.Options{Transport: tr, WaitTimeout: 10 * time.Second})
			require.NoError(t, err)
			pb, err := channel.New(b.pd, channel.Options{Transport: tr, WaitTimeout: 10 * time.Second})
			require.NoError(t, err)
			requireRefusedThenConnects(t, pa, pb, pa.Endpoint())

			ma, err := channel.NewMulti(a.pd, 2, channel.Options{Transport: tr, WaitTimeout: 10 * time.Second})
			require.NoError(t, err)
			defer ma.Close()
			mb, err := channel.NewMulti(b.pd, 2, channel.Options{Transport: tr, WaitTimeout: 10 * time.Second})
			require.NoError(t, err)
			defer mb.Close()
			m, err := ma.Handshake([]endpoint.Endpoint{ma.Endpoints()[1], mb.Endpoints()[0]})
			if m != nil {
				m.Close()
			}
			require.ErrorIs(t, err, channel.ErrHandshake, "peer 0 named this side's endpoint for peer 1")
			require.ErrorContains(t, err, "MLX5KIT_SIM_FABRIC", "the refusal names the usual cause")
		})
	}
}

// requireRefusedThenConnects requires pa's handshake with the endpoint bad
// to be refused with ErrHandshake, and pa and pb to connect after it: the
// refusal left the prepared channel as it was. The channels close when
// the test ends.
func requireRefusedThenConnects(t *testing.T, pa, pb *channel.Prepared, bad endpoint.Endpoint) {
	t.Helper()
	ch, err := pa.Handshake(bad)
	if ch != nil {
		ch.Close()
	}
	require.ErrorIs(t, err, channel.ErrHandshake)
	if bad.Equal(pa.Endpoint()) {
		// Two processes that each run a fabric of their own send each
		// other this: the refusal names what to set.
		require.ErrorContains(t, err, "MLX5KIT_SIM_FABRIC")
	}
	ca, err := pa.Handshake(pb.Endpoint())
	require.NoError(t, err, "the refusal spoilt the prepared channel")
	t.Cleanup(func() { ca.Close() })
	cb, err := pb.Handshake(pa.Endpoint())
	require.NoError(t, err)
	t.Cleanup(func() { cb.Close() })
}
