package qpstate

import (
	"errors"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestCheckUC: qp_state_table's UC masks. INIT→RTR requires AV, PATH_MTU,
// DEST_QPN and RQ_PSN, RTR→RTS SQ_PSN; RC's attributes of
// acknowledgement, retry and READ/atomic depth are refused (EINVAL).
func TestCheckUC(t *testing.T) {
	rtr := State | AV | PathMTU | DestQPN | RQPSN
	for _, c := range []struct {
		from, to ctx.QPState
		m        Mask
		ok       bool
	}{
		{ctx.QPStateReset, ctx.QPStateInit, State | PKeyIndex | Port | AccessFlags, true},
		{ctx.QPStateReset, ctx.QPStateInit, State | PKeyIndex | Port, false},
		{ctx.QPStateInit, ctx.QPStateRTR, rtr, true},
		{ctx.QPStateInit, ctx.QPStateRTR, rtr | AccessFlags | PKeyIndex, true},
		{ctx.QPStateInit, ctx.QPStateRTR, rtr | MaxDestRdAtomic, false},
		{ctx.QPStateInit, ctx.QPStateRTR, rtr | MinRNRTimer, false},
		{ctx.QPStateInit, ctx.QPStateRTR, rtr &^ RQPSN, false},
		{ctx.QPStateRTR, ctx.QPStateRTS, State | SQPSN, true},
		{ctx.QPStateRTR, ctx.QPStateRTS, State | SQPSN | CurState | AccessFlags, true},
		{ctx.QPStateRTR, ctx.QPStateRTS, State | SQPSN | Timeout | RetryCount | RNRRetry | MaxQPRdAtomic, false},
		{ctx.QPStateRTR, ctx.QPStateRTS, State | SQPSN | MinRNRTimer, false},
		{ctx.QPStateRTR, ctx.QPStateRTS, State, false},
		{ctx.QPStateRTS, ctx.QPStateRTS, State | AccessFlags, true},
		{ctx.QPStateRTS, ctx.QPStateRTS, State | MinRNRTimer, false},
		{ctx.QPStateRTS, ctx.QPStateError, State, true},
		{ctx.QPStateError, ctx.QPStateReset, State, true},
		{ctx.QPStateRTS, ctx.QPStateSQD, State, false}, // no optab command
		{ctx.QPStateReset, ctx.QPStateRTS, State | SQPSN, false},
	} {
		err := CheckUC(c.from, c.to, c.m)
		if c.ok {
			require.NoError(t, err, "%v→%v %v", c.from, c.to, c.m)
			continue
		}
		require.Error(t, err, "%v→%v %v", c.from, c.to, c.m)
		require.True(t, errors.Is(err, syscall.EINVAL), "%v", err)
	}
}
