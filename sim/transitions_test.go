package sim

import (
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
)

// transitionAttr returns attributes the model accepts for moving a QP of
// type typ to state to (those a legal transition needs).
func (e *env) transitionAttr(typ ctx.QPType, to ctx.QPState) ctx.QPAttr {
	a := ctx.QPAttr{State: to}
	switch to {
	case ctx.QPStateInit:
		a.Access, a.QKey = allAccess, 0x11
	case ctx.QPStateRTR:
		a.PathMTU, a.MinRNRTimer = ctx.MTU1024, 12
		if typ == ctx.QPTypeRC {
			a.RemoteQPN, a.MaxDestRdAtomic = 0x42, 16
			a.Path = ctx.AddressAttr{DLID: lidOf(e.t, e.c2)}
		}
	case ctx.QPStateRTS:
		a.Timeout, a.RetryCount, a.RNRRetry, a.MaxRdAtomic, a.SQPSN = 14, 7, 7, maxRdAtomic, 0x100
		if typ == ctx.QPTypeDCI {
			a.MaxRdAtomic = maxDCInitRdAtomic
		}
	}
	return a
}

// pathsFrom returns, for every state a QP of type typ reaches from RESET
// through transitions the table accepts, the shortest such sequence.
func pathsFrom(typ ctx.QPType) map[ctx.QPState][]ctx.QPState {
	paths := map[ctx.QPState][]ctx.QPState{ctx.QPStateReset: nil}
	queue := []ctx.QPState{ctx.QPStateReset}
	for len(queue) > 0 {
		s := queue[0]
		queue = queue[1:]
		for _, n := range qpstate.States {
			if _, seen := paths[n]; seen || !qpstate.Lookup(typ, s, n).Legal {
				continue
			}
			paths[n] = append(append([]ctx.QPState(nil), paths[s]...), n)
			queue = append(queue, n)
		}
	}
	return paths
}

// TestModifyFollowsKernelTable brings a QP of every type to every state it
// can reach and tries every transition from there through ctx: the model
// accepts exactly what the kernel's table accepts, refuses the rest with
// EINVAL and ctx.ErrInvalidState, and a refused modify leaves the QP where
// it was.
func TestModifyFollowsKernelTable(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd, 16, 1)
	reached := map[ctx.QPType]int{}
	for _, typ := range qpstate.QPTypes {
		o := qpOpts{typ: typ}
		if typ == ctx.QPTypeDCT {
			o.srq, o.dcKey = srq, 7
		}
		for from, path := range pathsFrom(typ) {
			reached[typ]++
			for _, to := range qpstate.States {
				name := fmt.Sprintf("%v %v→%v", typ, from, to)
				q := e.newQP(e.pd, o)
				for _, s := range path {
					require.NoError(t, q.qp.Modify(e.transitionAttr(typ, s)), "%s: on the way to %v", name, s)
				}
				err := q.qp.Modify(e.transitionAttr(typ, to))
				st, serr := q.qp.State()
				require.NoError(t, serr)
				if qpstate.Lookup(typ, from, to).Legal {
					require.NoError(t, err, name)
					require.Equal(t, to, st, name)
				} else {
					require.Error(t, err, name)
					require.ErrorIs(t, err, syscall.EINVAL, name)
					require.ErrorIs(t, err, ctx.ErrInvalidState, name)
					require.Equal(t, from, st, "%s: a refused modify changes nothing", name)
				}
				require.NoError(t, q.qp.Close(), name)
			}
		}
	}
	// RESET, INIT, RTR, RTS and ERR; a DCT only RESET, INIT and RTR. No
	// QP reaches SQD (no RTS→SQD) or SQE (only the device enters it).
	require.Equal(t, map[ctx.QPType]int{ctx.QPTypeRC: 5, ctx.QPTypeUD: 5, ctx.QPTypeDCI: 5, ctx.QPTypeDCT: 3}, reached)
}

// TestModifyRefusesWhatConnectXRefuses pins the transitions the model used
// to accept and a ConnectX refuses, and that destroying a DCT is always
// allowed.
func TestModifyRefusesWhatConnectXRefuses(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 16, 1)

	dct := e.dct(e.pd2, srq, 9)
	for _, to := range []ctx.QPState{ctx.QPStateError, ctx.QPStateReset, ctx.QPStateRTS, ctx.QPStateInit} {
		err := dct.qp.Modify(ctx.QPAttr{State: to})
		require.ErrorIs(t, err, syscall.EINVAL, "DCT RTR→%v", to)
		require.ErrorIs(t, err, ctx.ErrInvalidState, "DCT RTR→%v", to)
		require.Contains(t, err.Error(), "mlx5_ib_modify_dct")
	}
	st, err := dct.qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTR, st)
	require.NoError(t, dct.qp.Close(), "a DCT in RTR is destroyed, not moved to ERR")

	fresh := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeDCT, srq: srq, dcKey: 9})
	require.ErrorIs(t, fresh.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}), syscall.EINVAL)
	require.NoError(t, fresh.qp.Close(), "a DCT in RESET is destroyed")

	dci := e.dci(e.pd)
	err = dci.qp.Modify(ctx.QPAttr{State: ctx.QPStateReset})
	require.ErrorIs(t, err, syscall.EINVAL)
	require.Contains(t, err.Error(), "modify_dci_qp_is_ok")
	require.NoError(t, dci.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))
	require.ErrorIs(t, dci.qp.Modify(ctx.QPAttr{State: ctx.QPStateReset}), syscall.EINVAL, "a DCI in ERR is not reset either")
	require.NoError(t, dci.qp.Close())

	a, _ := e.rcPair(qpOpts{})
	err = a.qp.Modify(ctx.QPAttr{State: ctx.QPStateSQD})
	require.ErrorIs(t, err, syscall.EINVAL)
	require.Contains(t, err.Error(), "optab")
	st, err = a.qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTS, st)

	rc := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
	require.ErrorIs(t, rc.qp.Modify(ctx.QPAttr{State: ctx.QPStateError}), syscall.EINVAL, "RESET→ERR")
	require.NoError(t, rc.qp.Modify(ctx.QPAttr{State: ctx.QPStateReset}), "RESET→RESET is a no-op")
}
