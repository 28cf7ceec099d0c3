package transport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// TestPollUnknownQPNAllocatesNothing: Poll allocates nothing, also for
// the first completion of an unknown QPN, which Err reports afterwards
// (errors.Is with monocq.ErrUnknownQPN, naming the QPN).
func TestPollUnknownQPNAllocatesNothing(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	const runs = 4
	var pollers []*transport.Poller
	for range runs + 1 {
		cq := e.CQ(0, 16)
		p, err := transport.NewPoller(cq)
		require.NoError(t, err)
		var img [prm.CQE64Size]byte
		img[prm.CQESopDropQPN+1], img[prm.CQESopDropQPN+2], img[prm.CQESopDropQPN+3] = 0xab, 0xcd, 0xef
		img[prm.CQEOpOwn] = prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, 0)
		require.NoError(t, e.Fabric.InjectCQE(cq.CQN(), img))
		pollers = append(pollers, p)
	}
	var match transport.Match
	var qpn uint32
	take := func(c *transport.Completion) { match, qpn = c.Match, c.QPN }
	i := 0
	allocs := testing.AllocsPerRun(runs, func() {
		if pollers[i].Poll(4, take) != 1 {
			panic("no completion")
		}
		i++
	})
	require.Zero(t, allocs)
	require.Equal(t, transport.MatchUnknownQPN, match)
	require.Equal(t, uint32(0xabcdef), qpn)
	for _, p := range pollers {
		err := p.Err()
		require.ErrorIs(t, err, monocq.ErrUnknownQPN)
		require.ErrorContains(t, err, "QPN 0xabcdef")
		require.NotErrorIs(t, err, ctx.ErrClosed)
	}
}
