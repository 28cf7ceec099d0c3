package transport_test

import (
	"bytes"
	"errors"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// recvTarget is a receive queue under test: a QP's own or an SRQ.
type recvTarget struct {
	begin       func(wrid uint64) transport.RecvStage
	post        func(wrid, addr uint64, n, lkey uint32) error
	outstanding func() uint32
	ring, dbrec []byte
}

func ownRQ(t *testing.T, e *transporttest.Env) recvTarget {
	qp, err := rc.New(e.PD[1], e.CQ(1, 64), rc.Config{SendDepth: 1, RecvDepth: 8, MaxRecvSGE: 2})
	require.NoError(t, err)
	t.Cleanup(func() { qp.Close() })
	ring, dbrec := rqBytes(&qp.Queue)
	return recvTarget{qp.BeginRecv, qp.PostRecv, qp.RecvOutstanding, ring, dbrec}
}

func sharedRQ(t *testing.T, e *transporttest.Env) recvTarget {
	s, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 8, MaxSGE: 2})
	require.NoError(t, err)
	t.Cleanup(func() { s.Close() })
	d := provider.SRQDescriptor(s.Handle())
	ring := unsafe.Slice((*byte)(d.Buf), int(d.WQECnt*d.Stride))
	return recvTarget{s.BeginRecv, s.PostRecv, s.Outstanding, ring, unsafe.Slice((*byte)(d.DBRec), 4)}
}

// A receive stage is posted once: a second Finish of it, or a Finish after
// a later BeginRecv or PostRecv took its slot, fails with ErrStaleStage and
// changes nothing, on a QP's own receive queue and on an SRQ, as a send
// stage does.
func TestStaleReceiveStage(t *testing.T) {
	for name, mk := range map[string]func(*testing.T, *transporttest.Env) recvTarget{"RQ": ownRQ, "SRQ": sharedRQ} {
		t.Run(name, func(t *testing.T) {
			e := transporttest.New(t, sim.Options{})
			q := mk(t, e)
			addr, lkey := e.Addr(1, 0), e.LKey(1)
			snapshot := func() ([]byte, []byte, uint32) {
				return bytes.Clone(q.ring), bytes.Clone(q.dbrec), q.outstanding()
			}
			unchanged := func(what string, err error, ring, dbrec []byte, n uint32) {
				t.Helper()
				require.ErrorIs(t, err, wqebuilder.ErrStaleStage, what)
				var pe *wqebuilder.PostError
				require.True(t, errors.As(err, &pe), what)
				require.Equal(t, "post receive", pe.Op)
				require.Equal(t, ring, q.ring, what)
				require.Equal(t, dbrec, q.dbrec, what)
				require.Equal(t, n, q.outstanding(), what)
			}

			// Finished twice.
			s := q.begin(1).SGE(addr, 8, lkey)
			require.NoError(t, s.FinishDoorbell())
			ring, dbrec, n := snapshot()
			require.Equal(t, uint32(1), n)
			unchanged("second FinishDoorbell", s.FinishDoorbell(), ring, dbrec, n)
			unchanged("second Finish", s.Finish(), ring, dbrec, n)

			// Two stages begun on the same slot: the later one wins.
			older := q.begin(2)
			require.NoError(t, q.begin(3).SGE(addr, 16, lkey).FinishDoorbell())
			ring, dbrec, n = snapshot()
			require.Equal(t, uint32(2), n)
			unchanged("older stage", older.SGE(addr, 24, lkey).FinishDoorbell(), ring, dbrec, n)

			// PostRecv takes the slot of an open stage.
			older = q.begin(4)
			require.NoError(t, q.post(5, addr, 32, lkey))
			ring, dbrec, n = snapshot()
			require.Equal(t, uint32(3), n)
			unchanged("stage before PostRecv", older.Finish(), ring, dbrec, n)

			// A stage refused for too many entries that then goes stale
			// reports the stale stage.
			older = q.begin(7).SGE(addr, 1, lkey).SGE(addr, 1, lkey).SGE(addr, 1, lkey)
			require.NoError(t, q.post(8, addr, 8, lkey))
			ring, dbrec, n = snapshot()
			unchanged("stale after too many entries", older.Finish(), ring, dbrec, n)

			// The queue goes on posting.
			require.NoError(t, q.begin(6).SGE(addr, 8, lkey).SGE(addr+8, 8, lkey).FinishDoorbell())
			require.Equal(t, uint32(5), q.outstanding())
		})
	}
}

// The other refusals of a staged receive keep their errors, checked in
// order: closed before full, too many entries, and no receive queue.
func TestReceiveStageErrors(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	q := ownRQ(t, e)
	addr, lkey := e.Addr(1, 0), e.LKey(1)
	require.ErrorIs(t, q.begin(1).SGE(addr, 1, lkey).SGE(addr, 1, lkey).SGE(addr, 1, lkey).Finish(), wqebuilder.ErrTooManySGE)
	for i := range 8 {
		require.NoError(t, q.begin(uint64(i)).Finish())
	}
	ring, dbrec := bytes.Clone(q.ring), bytes.Clone(q.dbrec)
	require.ErrorIs(t, q.begin(9).SGE(addr, 8, lkey).FinishDoorbell(), transport.ErrReceiveQueueFull)
	require.Equal(t, ring, q.ring, "a refused stage writes nothing")
	require.Equal(t, dbrec, q.dbrec)

	s, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	qp, err := rc.New(e.PD[1], e.CQ(1, 64), rc.Config{SendDepth: 1, SRQ: s})
	require.NoError(t, err)
	require.ErrorIs(t, qp.BeginRecv(1).SGE(addr, 8, lkey).Finish(), transport.ErrNoReceiveQueue)
	require.NoError(t, qp.Close())
	require.ErrorIs(t, qp.BeginRecv(1).Finish(), ctx.ErrClosed, "closed comes before no receive queue")
	require.NoError(t, s.Close())
	require.ErrorIs(t, s.BeginRecv(3).Finish(), ctx.ErrClosed)
}
