package channel_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/channel"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestFailRecordsFlushOfItsQueue: the work a failed channel destroys its
// queues over (here: its CQ overran, so no flush arrives) is recorded as
// flushed with the opcode and queue number it was posted with, as the
// device's flushes carry them. They read "NOP on QPN 0x0".
func TestFailRecordsFlushOfItsQueue(t *testing.T) {
	f := newFabric(t, 2)
	ha, hb := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	a, _ := pair(t, ha, hb, channel.Options{SendDepth: 4, RecvDepth: 4, MaxInline: 256})
	room := int(provider.CQDescriptor(a.CompletionQueue()).CQECnt)
	rem := channel.Remote{Addr: uint64(hb.mr.Addr()), RKey: hb.mr.RKey()}
	q := a.QP(0)
	for i := range room + 1 {
		st, err := q.Post(uint64(1<<40+i), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, st.RdmaWrite(rem.Addr, rem.RKey).SGE(uint64(ha.mr.Addr()), 8, ha.mr.LKey()).FinishBlueFlame())
	}
	waitOverrun(t, f) // the engine executes every write: the CQ overruns
	read, err := a.PostRead(channel.ReadRequest{Local: ha.sge(0, 8), Remote: rem})
	require.NoError(t, err)
	recv, err := a.PostReceive(channel.RecvRequest{Local: ha.sge(8, 8)})
	require.NoError(t, err)
	err = read.Wait(context.Background())
	require.ErrorIs(t, err, channel.ErrFailed)
	require.Zero(t, a.Outstanding())

	for _, c := range []struct {
		p    channel.Pending
		op   prm.Opcode
		verb string
	}{{read, prm.OpRdmaRead, "RDMA_READ on QPN"}, {recv, 0, "receive on QPN"}} {
		done, err := c.p.Poll()
		require.True(t, done)
		require.ErrorIs(t, err, monocq.ErrFlushed)
		var ce *monocq.CompletionError
		require.True(t, errors.As(err, &ce))
		require.Equal(t, q.QPN(), ce.QPN)
		require.Equal(t, c.op, ce.Opcode)
		require.Contains(t, err.Error(), c.verb)
	}
}

// TestFailRecordsFlushOfDCReceive: a DC channel's receive, which Fail
// records as flushed when it destroys the shared receive queues, names the
// DC target it was posted for.
func TestFailRecordsFlushOfDCReceive(t *testing.T) {
	f := newFabric(t, 2)
	ha, hb := newHost(t, f, 0, 1<<16), newHost(t, f, 1, 1<<16)
	a, b := pair(t, ha, hb, channel.Options{Transport: endpoint.TransportDC})
	recv, err := a.PostReceive(channel.RecvRequest{Local: ha.sge(0, 8)})
	require.NoError(t, err)
	require.NoError(t, a.Fail())
	done, err := recv.Poll()
	require.True(t, done)
	require.ErrorIs(t, err, monocq.ErrFlushed)
	var ce *monocq.CompletionError
	require.True(t, errors.As(err, &ce))
	require.Equal(t, b.Remote(0).DCTNumber, ce.QPN)
}
