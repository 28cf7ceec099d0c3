package ibpath

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestAttributes checks the attributes each transition gets from a path.
func TestAttributes(t *testing.T) {
	p := Path{
		Port: 2, PKeyIndex: 3, QKey: 0x11112222, MTU: ctx.MTU2048,
		RetryCount: 5, RNRRetry: 6, MinRNRTimer: 17, Timeout: 19,
		SQPN: 0x123, DQPN: 0x456, SQPSN: 0x789, DQPSN: 0xabc,
		MaxRdAtomic: 4, MaxDestRdAtomic: 8,
		SLID: 7, DLID: 9, SrcPathBits: 1, SL: 3, StaticRate: 2,
		GlobalRoute: true, SGID: ctx.GID{0xfe, 0x80, 15: 1}, DGID: ctx.GID{0xfe, 0x80, 15: 2}, SGIDIndex: 1,
		FlowLabel: 0x12345, TrafficClass: 0x20, HopLimit: 9,
	}
	ini := p.initAttr(ctx.AccessRemoteRead)
	require.Equal(t, ctx.QPAttr{State: ctx.QPStateInit, Port: 2, PKeyIndex: 3, Access: ctx.AccessRemoteRead, QKey: 0x11112222}, ini)

	av := ctx.AddressAttr{Port: 2, DLID: 9, SL: 3, SrcPathBits: 1, StaticRate: 2, GlobalRoute: true,
		DGID: ctx.GID{0xfe, 0x80, 15: 2}, SGIDIndex: 1, FlowLabel: 0x12345, TrafficClass: 0x20, HopLimit: 9}
	require.Equal(t, av, p.addressAttr())

	rtr := p.rtrAttr()
	require.Equal(t, ctx.QPAttr{State: ctx.QPStateRTR, Port: 2, RemoteQPN: 0x456, Path: av, PathMTU: ctx.MTU2048,
		RQPSN: 0xabc, MaxDestRdAtomic: 8, MinRNRTimer: 17}, rtr)

	rts := p.rtsAttr()
	require.Equal(t, ctx.QPAttr{State: ctx.QPStateRTS, Port: 2, SQPSN: 0x789, Timeout: 19, RetryCount: 5,
		RNRRetry: 6, MaxRdAtomic: 4}, rts)

	// Without a GRH the GRH fields stay out of the address.
	p.GlobalRoute = false
	require.Equal(t, ctx.AddressAttr{Port: 2, DLID: 9, SL: 3, SrcPathBits: 1, StaticRate: 2}, p.addressAttr())
	p.Port = 0
	require.Equal(t, uint8(1), p.addressAttr().Port, "port 0 means 1")
}
