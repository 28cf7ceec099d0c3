package dc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

func TestSendAndWriteToTwoDCTs(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	scq, sp := newPoller(e, 0, 256)
	rcq, rp := newPoller(e, 1, 256)
	dci, err := dc.NewDCI(e.PD[0], scq, dc.DCIConfig{SendDepth: 32, MaxInline: 64})
	require.NoError(t, err)
	require.NoError(t, sp.Add(dci))
	srq, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 16})
	require.NoError(t, err)
	var remotes []*dc.Remote
	for i := range 2 {
		dct, err := dc.NewDCT(e.PD[1], rcq, dc.DCTConfig{SRQ: srq, Key: uint64(0x1000 + i)})
		require.NoError(t, err)
		require.NoError(t, rp.Add(dct))
		r, err := dci.NewRemote(dct.Endpoint())
		require.NoError(t, err)
		remotes = append(remotes, r)
	}
	for i := range 2 {
		require.NoError(t, srq.PostRecv(uint64(100+i), e.Addr(1, 64*i), 64, e.LKey(1)))
	}
	for i, r := range remotes {
		s, err := dci.Post(uint64(i), wqebuilder.Signaled, r)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte{byte('a' + i), 'x'}).FinishBlueFlame())
	}
	got := e.Drain(sp, rp)
	require.Len(t, got, 4)
	for _, c := range got {
		require.NoError(t, c.Err())
	}
	require.Equal(t, prm.CQERespSend, got[2].Opcode)
	require.Equal(t, dci.QPN(), got[2].SourceQPN)
	require.Equal(t, "ax", string(e.Mem(1, 0, 2)))
	require.Equal(t, "bx", string(e.Mem(1, 64, 2)))
}
