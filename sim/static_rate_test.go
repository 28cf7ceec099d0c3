package sim

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
)

// TestStaticRateLikeKernel checks the static rates of an RC path and of an
// address handle against mlx5_ib's mlx5r_ib_rate, which takes 0 and
// IB_RATE_2_5_GBPS (2) to IB_RATE_1600_GBPS (25): a path with rate 1, or
// (past ctx's own check, with the kernel's mask) 26, is refused with
// EINVAL and the QP stays in INIT; rate 23 (800 Gb/s) is taken and read
// back as 0, the port's rate, which is what mlx5r_ib_rate writes for it;
// rate 3 is read back as given. A RoCE address handle, which libmlx5 asks
// the kernel for, with rate 1 is refused with EINVAL; an InfiniBand one,
// which libmlx5 builds itself, takes it as the port's rate (code 0).
func TestStaticRateLikeKernel(t *testing.T) {
	for _, ll := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		e := newEnv(t, Options{LinkLayer: ll})
		rtr := func(rate uint8) (*testQP, ctx.QPAttr) {
			q := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
			require.NoError(t, q.qp.Modify(e.attrBase(ctx.QPTypeRC, ctx.QPStateInit, ll)))
			a := e.attrBase(ctx.QPTypeRC, ctx.QPStateRTR, ll)
			a.Path.StaticRate = rate
			return q, a
		}
		readBack := func(q *testQP) (ctx.QPState, uint8) {
			st, attr, ok := queuePairAttributes(provider.QueuePairOf(q.qp))
			require.True(t, ok)
			return st, attr.Path.StaticRate
		}

		q, a := rtr(1)
		err := q.qp.Modify(a)
		require.ErrorIs(t, err, syscall.EINVAL, "%v", ll)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%v", ll)
		var ae *qpstate.AttrError
		require.True(t, errors.As(err, &ae), "%v: %v", ll, err)
		require.Equal(t, "Path.StaticRate", ae.Attr)
		require.Contains(t, err.Error(), "mlx5r_ib_rate")
		st, _ := readBack(q)
		require.Equal(t, ctx.QPStateInit, st, "%v: refused, still INIT", ll)

		a.Path.Port = 1
		mask, err := qpstate.Derive(ctx.QPTypeRC, ctx.QPStateInit, ctx.QPStateRTR)
		require.NoError(t, err)
		a.Path.StaticRate = 26
		require.ErrorIs(t, modifyQueuePair(provider.QueuePairOf(q.qp), a, mask), syscall.EINVAL, "%v: rate 26", ll)

		for rate, kept := range map[uint8]uint8{23: 0, 3: 3} {
			q, a := rtr(rate)
			require.NoError(t, q.qp.Modify(a), "%v: rate %d", ll, rate)
			st, got := readBack(q)
			require.Equal(t, ctx.QPStateRTR, st)
			require.Equal(t, kept, got, "%v: rate %d read back", ll, rate)
		}

		theirs, err := e.c2.QueryGIDs(1)
		require.NoError(t, err)
		ah, err := e.pd.CreateAddressHandle(ctx.AddressAttr{DLID: 2, GlobalRoute: true, DGID: theirs[0].GID, HopLimit: 1, StaticRate: 1})
		if ll == ctx.LinkLayerEthernet {
			require.ErrorIs(t, err, syscall.EINVAL)
			require.ErrorIs(t, err, ctx.ErrInvalidArgument)
			require.Contains(t, err.Error(), "static rate 1")
			continue
		}
		require.NoError(t, err)
		require.Zero(t, ah.AV()[prm.AVStatRateSL]>>prm.AVStatRateShift, "rdma-core's table: no code for 1, the port's rate")
		require.NoError(t, ah.Close())
	}
}
