package qpstate

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// legal lists, per QP type, every transition the kernel accepts, written
// out by hand from the kernel sources named in the package documentation
// (not computed from the table under test). Any pair not listed must be
// refused with EINVAL.
var legal = map[ctx.QPType]string{
	// qp_state_table entries that optab also has a command for.
	ctx.QPTypeRC: "RESET>RESET RESET>INIT INIT>RESET INIT>ERR INIT>INIT INIT>RTR " +
		"RTR>RESET RTR>ERR RTR>RTS RTS>RESET RTS>ERR RTS>RTS " +
		"SQD>RESET SQD>ERR SQE>RESET SQE>ERR SQE>RTS ERR>RESET ERR>ERR",
	ctx.QPTypeUD: "RESET>RESET RESET>INIT INIT>RESET INIT>ERR INIT>INIT INIT>RTR " +
		"RTR>RESET RTR>ERR RTR>RTS RTS>RESET RTS>ERR RTS>RTS " +
		"SQD>RESET SQD>ERR SQE>RESET SQE>ERR SQE>RTS ERR>RESET ERR>ERR",
	// modify_dci_qp_is_ok: no RESET target, ERR from anything but RESET.
	ctx.QPTypeDCI: "RESET>INIT INIT>INIT INIT>RTR RTR>RTS RTS>RTS " +
		"INIT>ERR RTR>ERR RTS>ERR SQD>ERR SQE>ERR ERR>ERR",
	// mlx5_ib_modify_dct.
	ctx.QPTypeDCT: "RESET>INIT INIT>RTR",
}

func parseState(t *testing.T, s string) ctx.QPState {
	for _, st := range States {
		if st.String() == s {
			return st
		}
	}
	t.Fatalf("state %q", s)
	return 0
}

func legalSet(t *testing.T, typ ctx.QPType) map[edge]bool {
	m := map[edge]bool{}
	for _, p := range strings.Fields(legal[typ]) {
		from, to, ok := strings.Cut(p, ">")
		require.True(t, ok, p)
		m[edge{parseState(t, from), parseState(t, to)}] = true
	}
	return m
}

// TestTableVerdicts walks every (type, from, to) and checks the verdict,
// the errno and the sentinel of Lookup, Check and Derive.
func TestTableVerdicts(t *testing.T) {
	for _, typ := range QPTypes {
		want := legalSet(t, typ)
		for _, from := range States {
			for _, to := range States {
				name := fmt.Sprintf("%v %v→%v", typ, from, to)
				r := Lookup(typ, from, to)
				require.NotEmpty(t, r.Source, name)
				m, err := Derive(typ, from, to)
				if want[edge{from, to}] {
					require.True(t, r.Legal, name)
					require.Zero(t, r.Errno, name)
					require.NoError(t, err, name)
					require.NoError(t, Check(typ, from, to, m), name)
					require.Equal(t, m&(State|r.Required), State|r.Required, name)
					continue
				}
				require.False(t, r.Legal, name)
				require.Equal(t, syscall.EINVAL, r.Errno, name)
				require.NotEmpty(t, r.Why, name)
				require.Error(t, err, name)
				require.Zero(t, m, name)
				require.ErrorIs(t, err, syscall.EINVAL, name)
				require.ErrorIs(t, err, ctx.ErrInvalidState, name)
				require.NotErrorIs(t, err, ctx.ErrInvalidArgument, name)
				var te *Error
				require.True(t, errors.As(err, &te), name)
				require.Equal(t, typ, te.Type)
				require.Equal(t, from, te.From)
				require.Equal(t, to, te.To)
				require.Contains(t, err.Error(), "EINVAL", name)
				require.Contains(t, err.Error(), "drivers/infiniband/", name)
				// No mask makes an illegal transition legal.
				require.ErrorIs(t, Check(typ, from, to, State), syscall.EINVAL, name)
				require.ErrorIs(t, Check(typ, from, to, ^Mask(0)), syscall.EINVAL, name)
			}
		}
	}
}

// TestNamedRefusals pins the transitions a ConnectX refuses that the
// model used to accept, with the kernel check that refuses each.
func TestNamedRefusals(t *testing.T) {
	for _, c := range []struct {
		typ      ctx.QPType
		from, to ctx.QPState
		source   string
		newer    bool
	}{
		{ctx.QPTypeDCT, ctx.QPStateRTR, ctx.QPStateError, "mlx5_ib_modify_dct", false},
		{ctx.QPTypeDCT, ctx.QPStateRTR, ctx.QPStateReset, "mlx5_ib_modify_dct", false},
		{ctx.QPTypeDCT, ctx.QPStateInit, ctx.QPStateError, "mlx5_ib_modify_dct", false},
		{ctx.QPTypeDCT, ctx.QPStateReset, ctx.QPStateReset, "mlx5_ib_modify_dct", false},
		{ctx.QPTypeRC, ctx.QPStateRTS, ctx.QPStateSQD, "optab", false},
		{ctx.QPTypeUD, ctx.QPStateRTS, ctx.QPStateSQD, "optab", false},
		{ctx.QPTypeRC, ctx.QPStateSQD, ctx.QPStateRTS, "optab", true},
		{ctx.QPTypeRC, ctx.QPStateReset, ctx.QPStateError, "qp_state_table", false},
		{ctx.QPTypeDCI, ctx.QPStateRTS, ctx.QPStateReset, "modify_dci_qp_is_ok", true},
		{ctx.QPTypeDCI, ctx.QPStateError, ctx.QPStateReset, "modify_dci_qp_is_ok", true},
		{ctx.QPTypeDCI, ctx.QPStateReset, ctx.QPStateError, "modify_dci_qp_is_ok", false},
		{ctx.QPTypeDCI, ctx.QPStateSQE, ctx.QPStateRTS, "modify_dci_qp_is_ok", false},
	} {
		name := fmt.Sprintf("%v %v→%v", c.typ, c.from, c.to)
		r := Lookup(c.typ, c.from, c.to)
		require.False(t, r.Legal, name)
		require.Contains(t, r.Source, c.source, name)
		require.Equal(t, c.newer, r.Newer != "", name)
		err := Check(c.typ, c.from, c.to, State)
		require.ErrorIs(t, err, syscall.EINVAL, name)
		require.ErrorIs(t, err, ctx.ErrInvalidState, name)
	}
}

// TestMasks checks the required and optional masks of the transitions the
// kit performs and the masks it derives for them, against the kernel's
// tables, and that a mask missing a required bit or carrying a bit the
// transition does not allow is refused with EINVAL.
func TestMasks(t *testing.T) {
	R, I, RTR, RTS, E := ctx.QPStateReset, ctx.QPStateInit, ctx.QPStateRTR, ctx.QPStateRTS, ctx.QPStateError
	rcRTR := AV | PathMTU | DestQPN | RQPSN | MaxDestRdAtomic | MinRNRTimer
	rcRTS := Timeout | RetryCount | RNRRetry | SQPSN | MaxQPRdAtomic
	for _, c := range []struct {
		typ      ctx.QPType
		from, to ctx.QPState
		derived  Mask
	}{
		{ctx.QPTypeRC, R, I, State | PKeyIndex | Port | AccessFlags},
		{ctx.QPTypeRC, I, I, State | PKeyIndex | Port | AccessFlags},
		{ctx.QPTypeRC, I, RTR, State | rcRTR},
		{ctx.QPTypeRC, RTR, RTS, State | rcRTS},
		{ctx.QPTypeRC, RTS, RTS, State},
		{ctx.QPTypeRC, RTS, E, State},
		{ctx.QPTypeRC, E, R, State},
		{ctx.QPTypeUD, R, I, State | PKeyIndex | Port | QKey},
		{ctx.QPTypeUD, I, I, State | PKeyIndex | Port | QKey},
		{ctx.QPTypeUD, I, RTR, State},
		{ctx.QPTypeUD, RTR, RTS, State | SQPSN},
		{ctx.QPTypeDCI, R, I, State | PKeyIndex | Port},
		{ctx.QPTypeDCI, I, I, State | PKeyIndex | Port},
		{ctx.QPTypeDCI, I, RTR, State | PathMTU},
		{ctx.QPTypeDCI, RTR, RTS, State | rcRTS},
		{ctx.QPTypeDCI, RTS, E, State},
		{ctx.QPTypeDCT, R, I, State | AccessFlags | PKeyIndex | Port},
		{ctx.QPTypeDCT, I, RTR, State | AV | PathMTU | MinRNRTimer},
	} {
		name := fmt.Sprintf("%v %v→%v", c.typ, c.from, c.to)
		got, err := Derive(c.typ, c.from, c.to)
		require.NoError(t, err, name)
		require.Equal(t, c.derived, got, "%s: %v, want %v", name, got, c.derived)
		r := Lookup(c.typ, c.from, c.to)
		// Each required bit left out is refused.
		for b := Mask(1); b != 0 && b <= DestQPN; b <<= 1 {
			if r.Required&b == 0 {
				continue
			}
			err := Check(c.typ, c.from, c.to, got&^b)
			require.ErrorIs(t, err, syscall.EINVAL, "%s without %v", name, b)
			require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%s without %v", name, b)
			require.NotErrorIs(t, err, ctx.ErrInvalidState, "%s without %v", name, b)
			require.Contains(t, err.Error(), "lacks "+b.String())
		}
		// Each bit outside State|Required|Optional is refused.
		for b := Mask(1); b <= DestQPN; b <<= 1 {
			if (State|r.Required|r.Optional)&b != 0 {
				require.NoError(t, Check(c.typ, c.from, c.to, got|b), "%s with %v", name, b)
				continue
			}
			err := Check(c.typ, c.from, c.to, got|b)
			require.ErrorIs(t, err, syscall.EINVAL, "%s with %v", name, b)
			require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%s with %v", name, b)
		}
		// Without State: refused for a move between two states and for
		// a DC QP; a move to the same state of an RC or UD QP is the
		// same check with State.
		if noState := Check(c.typ, c.from, c.to, got&^State); c.from == c.to && c.typ != ctx.QPTypeDCI && c.typ != ctx.QPTypeDCT {
			require.NoError(t, noState, name)
		} else {
			require.ErrorIs(t, noState, syscall.EINVAL, name)
			require.Contains(t, noState.Error(), "no STATE", name)
		}
	}
	// mlx5_ib_modify_qp: RTS with only ACCESS_FLAGS or MIN_RNR_TIMER
	// is an RTS→RTS; RTR→RTR does not exist, with or without State.
	require.NoError(t, Check(ctx.QPTypeRC, RTS, RTS, AccessFlags))
	require.NoError(t, Check(ctx.QPTypeRC, RTS, RTS, MinRNRTimer))
	require.NoError(t, CheckUC(RTS, RTS, AccessFlags))
	require.ErrorIs(t, Check(ctx.QPTypeRC, RTS, RTS, Timeout), syscall.EINVAL)
	require.ErrorIs(t, Check(ctx.QPTypeRC, RTR, RTR, AccessFlags), ctx.ErrInvalidState)
	require.ErrorIs(t, Check(ctx.QPTypeDCI, RTS, RTS, 0), syscall.EINVAL)
	// A DCI's address vector at RTR is refused by the first DC kernels.
	err := Check(ctx.QPTypeDCI, I, RTR, State|PathMTU|AV)
	require.ErrorIs(t, err, syscall.EINVAL)
	require.Contains(t, err.Error(), "AV")
	require.NotEmpty(t, Lookup(ctx.QPTypeDCI, I, RTR).Newer)
	// RC and UD differ where qp_state_table says so.
	require.ErrorIs(t, Check(ctx.QPTypeUD, I, RTR, State|rcRTR), syscall.EINVAL)
	require.ErrorIs(t, Check(ctx.QPTypeRC, R, I, State|PKeyIndex|Port|QKey), syscall.EINVAL)
}

func TestUnknownTypeAndState(t *testing.T) {
	for _, c := range []struct {
		typ      ctx.QPType
		from, to ctx.QPState
	}{
		{ctx.QPType(0), ctx.QPStateReset, ctx.QPStateInit},
		{ctx.QPType(99), ctx.QPStateReset, ctx.QPStateInit},
		{ctx.QPTypeRC, ctx.QPState(7), ctx.QPStateReset},
		{ctx.QPTypeRC, ctx.QPStateReset, ctx.QPState(9)},
	} {
		_, err := Derive(c.typ, c.from, c.to)
		require.ErrorIs(t, err, syscall.EINVAL)
		require.ErrorIs(t, err, ctx.ErrInvalidState)
	}
}

func TestMaskString(t *testing.T) {
	require.Equal(t, "0", Mask(0).String())
	require.Equal(t, "STATE|AV|PATH_MTU", (State | AV | PathMTU).String())
	require.Equal(t, "DEST_QPN|0x200000", (DestQPN | 1<<21).String())
}
