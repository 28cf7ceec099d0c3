package transport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// completeSendRig is an RC pair whose CQEs the test reads from the rings
// itself, so that it can hand each one to CompleteSend and Complete.
type completeSendRig struct {
	e      *transporttest.Env
	a, b   *rc.QP
	ca, cb *monocq.CQ
}

func newCompleteSendRig(t *testing.T) *completeSendRig {
	e := transporttest.New(t, sim.Options{})
	acq, bcq := e.CQ(0, 64), e.CQ(1, 64)
	a, err := rc.New(e.PD[0], acq, nil, rc.Config{SendDepth: 16, MaxInline: 64})
	require.NoError(t, err)
	b, err := rc.New(e.PD[1], bcq, nil, rc.Config{SendDepth: 1, RecvDepth: 16})
	require.NoError(t, err)
	t.Cleanup(func() { a.Close(); b.Close() })
	require.NoError(t, a.Connect(b.Endpoint()))
	require.NoError(t, b.Connect(a.Endpoint()))
	ca, err := rc.NewCQ(acq)
	require.NoError(t, err)
	cb, err := rc.NewCQ(bcq)
	require.NoError(t, err)
	return &completeSendRig{e: e, a: a, b: b, ca: ca, cb: cb}
}

// next returns the one CQE the ring holds after the model ran.
func next(t *testing.T, e *transporttest.Env, cq *monocq.CQ) *monocq.CQE {
	t.Helper()
	e.Run()
	require.Equal(t, 1, cq.Ready(1))
	c := cq.Next()
	require.NotNil(t, c)
	return c
}

// A successful send completion: CompleteSend fills the Completion exactly
// as Complete does (checked against a twin rig that ran Complete) and
// retires the same WQEs; a successful receive: CompleteRecv does. Any
// other CQE: each reports false and changes neither the Completion nor the
// queue, and Complete then handles it as if they had not been called.
func TestCompleteSendMatchesComplete(t *testing.T) {
	x, y := newCompleteSendRig(t), newCompleteSendRig(t)
	sentinel := transport.Completion{WRID: 0xdead, QPN: 7, Opcode: prm.CQERespSendImm, Immediate: 9,
		SourceQPN: 3, SLID: 4, SL: 5, GRH: true, Solicited: true, Syndrome: 1, VendorSyndrome: 2,
		Status: transport.StatusUnmatched, WQECounter: 77}
	for _, rig := range []*completeSendRig{x, y} {
		// An unsignaled write, then a signaled write with immediate:
		// one CQE that retires both.
		s, err := rig.a.Post(10, 0)
		require.NoError(t, err)
		require.NoError(t, s.RdmaWrite(rig.e.Addr(1, 0), rig.e.RKey(1)).Inline([]byte("12345678")).Finish())
		require.NoError(t, rig.b.PostRecv(20, rig.e.Addr(1, 64), 64, rig.e.LKey(1)))
		s, err = rig.a.Post(11, wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.RdmaWriteImm(rig.e.Addr(1, 8), rig.e.RKey(1), 42).Inline([]byte("abcdefgh")).FinishBlueFlame())
	}

	// The send completion.
	var got, want transport.Completion
	got, want = sentinel, sentinel
	cx, cy := next(t, x.e, x.ca), next(t, y.e, y.ca)
	require.True(t, x.a.Queue.CompleteSend(cx, &got))
	y.a.Queue.Complete(cy, &want)
	require.Same(t, &x.a.Queue, got.Queue)
	require.Same(t, &y.a.Queue, want.Queue)
	got.Queue, want.Queue = nil, nil
	require.Equal(t, want, got)
	require.Equal(t, uint64(11), got.WRID)
	require.Equal(t, transport.StatusOK, got.Status)
	require.Equal(t, y.a.SendQueue().ConsumerIndex(), x.a.SendQueue().ConsumerIndex())
	require.Zero(t, x.a.SendQueue().Outstanding())
	x.ca.Release()
	y.ca.Release()

	// The same CQE again (its WQE is retired): not CompleteSend's.
	got = sentinel
	require.False(t, x.a.Queue.CompleteSend(cx, &got))
	require.Equal(t, sentinel, got)
	x.a.Queue.Complete(cx, &got)
	require.Equal(t, transport.StatusUnmatched, got.Status)

	// The send completion is not CompleteRecv's either.
	got = sentinel
	require.False(t, x.a.Queue.CompleteRecv(cx, &got))
	require.Equal(t, sentinel, got)

	// The receive completion on the other side: not CompleteSend's, and
	// CompleteRecv fills the Completion exactly as Complete does on the
	// twin rig, and retires the same receive.
	cr, cry := next(t, x.e, x.cb), next(t, y.e, y.cb)
	got, want = sentinel, sentinel
	require.False(t, x.b.Queue.CompleteSend(cr, &got))
	require.Equal(t, sentinel, got)
	require.True(t, x.b.Queue.CompleteRecv(cr, &got))
	y.b.Queue.Complete(cry, &want)
	require.Same(t, &x.b.Queue, got.Queue)
	got.Queue, want.Queue = nil, nil
	require.Equal(t, want, got)
	require.Equal(t, transport.StatusOK, got.Status)
	require.Equal(t, uint64(20), got.WRID)
	require.Equal(t, uint32(42), got.Immediate)
	require.Equal(t, y.b.Queue.RecvOutstanding(), x.b.Queue.RecvOutstanding())
	require.Zero(t, x.b.Queue.RecvOutstanding())
	// Again (its receive is retired): not CompleteRecv's; Complete says so.
	got = sentinel
	require.False(t, x.b.Queue.CompleteRecv(cr, &got))
	require.Equal(t, sentinel, got)
	x.b.Queue.Complete(cr, &got)
	require.Equal(t, transport.StatusUnmatched, got.Status)
	x.cb.Release()
	y.cb.Release()

	// An error completion (a wrong rkey): not CompleteSend's, and the
	// queue stays ready until Complete sees it.
	s, err := x.a.Post(12, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.RdmaWrite(x.e.Addr(1, 0), x.e.RKey(1)^0xff).Inline([]byte("x")).FinishBlueFlame())
	ce := next(t, x.e, x.ca)
	got = sentinel
	require.False(t, x.a.Queue.CompleteSend(ce, &got))
	require.False(t, x.a.Queue.CompleteRecv(ce, &got))
	require.Equal(t, sentinel, got)
	require.Equal(t, transport.StateReady, x.a.Queue.State())
	require.Equal(t, uint32(1), x.a.SendQueue().Outstanding())
	x.a.Queue.Complete(ce, &got)
	require.Equal(t, transport.StatusError, got.Status)
	require.Equal(t, transport.StateError, x.a.Queue.State())
	x.ca.Release()
}
