package rc_test

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// pair is two connected RC QPs, one on each HCA, each with its own CQ and
// poller.
type pair struct {
	e  *transporttest.Env
	qp [2]*rc.QP
	cq [2]*ctx.CompletionQueue
	p  [2]*transport.Poller
}

func newPair(t testing.TB, cfg rc.Config) *pair {
	t.Helper()
	e := transporttest.New(t, sim.Options{})
	return connectPair(e, cfg)
}

func connectPair(e *transporttest.Env, cfg rc.Config) *pair {
	t := e.T
	t.Helper()
	x := &pair{e: e}
	for i := range 2 {
		x.cq[i], x.p[i] = newPoller(e, i, 1024)
		qp, err := rc.New(e.PD[i], x.cq[i], cfg)
		require.NoError(t, err)
		require.NoError(t, x.p[i].Add(qp))
		x.qp[i] = qp
	}
	require.NoError(t, x.qp[0].Connect(x.qp[1].Endpoint()))
	require.NoError(t, x.qp[1].Connect(x.qp[0].Endpoint()))
	return x
}

func TestWriteImmReadAtomic(t *testing.T) {
	x := newPair(t, rc.Config{SendDepth: 64, RecvDepth: 64, MaxInline: 64})
	e := x.e
	copy(e.Mem(0, 0, 5), "hello")
	require.NoError(t, x.qp[1].PostRecv(7, 0, 0, 0))
	s, err := x.qp[0].Post(1, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.RdmaWriteImm(e.Addr(1, 100), e.RKey(1), 0xabcd).SGE(e.Addr(0, 0), 5, e.LKey(0)).FinishBlueFlame())
	c := e.One(x.p[0])
	require.Equal(t, uint64(1), c.WRID)
	require.Equal(t, prm.CQEReq, c.Opcode)
	require.NoError(t, c.Err())
	r := e.One(x.p[1])
	require.Equal(t, uint64(7), r.WRID)
	require.Equal(t, prm.CQERespWrImm, r.Opcode)
	require.Equal(t, uint32(0xabcd), r.Immediate)
	require.Equal(t, "hello", string(e.Mem(1, 100, 5)))

	// RDMA read it back into another place.
	s, err = x.qp[0].Post(2, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.RdmaRead(e.Addr(1, 100), e.RKey(1)).SGE(e.Addr(0, 200), 5, e.LKey(0)).FinishBlueFlame())
	c = e.One(x.p[0])
	require.Equal(t, uint64(2), c.WRID)
	require.Equal(t, uint32(5), c.ByteCount)
	require.Equal(t, "hello", string(e.Mem(0, 200, 5)))

	// Fetch-and-add.
	binary.NativeEndian.PutUint64(e.Mem(1, 0, 8), 40) // an 8-byte atomic's word is in host byte order
	s, err = x.qp[0].Post(3, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.AtomicFA(e.Addr(1, 0), e.RKey(1), 2).Result(e.Addr(0, 8), e.LKey(0)).FinishBlueFlame())
	c = e.One(x.p[0])
	require.NoError(t, c.Err())
	require.Equal(t, uint64(40), binary.NativeEndian.Uint64(e.Mem(0, 8, 8)))
	require.Equal(t, uint64(42), binary.NativeEndian.Uint64(e.Mem(1, 0, 8)))
}
