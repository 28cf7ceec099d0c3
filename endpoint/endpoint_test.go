package endpoint

import (
	"math"
	"testing"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/stretchr/testify/require"
)

func TestTransportString(t *testing.T) {
	require.Equal(t, "RC", TransportRC.String())
	require.Equal(t, "UD", TransportUD.String())
	require.Equal(t, "DC", TransportDC.String())
	require.Equal(t, "Transport(9)", Transport(9).String())
	require.False(t, Transport(0).Valid())
}

// A region's access is ctx.Access; Allows wants every bit asked for.
func TestRegionAllows(t *testing.T) {
	r := RemoteRegion{Access: ctx.AccessRemoteRead | ctx.AccessRemoteWrite}
	require.True(t, r.Allows(ctx.AccessRemoteRead))
	require.True(t, r.Allows(ctx.AccessRemoteRead|ctx.AccessRemoteWrite))
	require.False(t, r.Allows(ctx.AccessRemoteAtomic))
	require.False(t, r.Allows(ctx.AccessRemoteRead|ctx.AccessRemoteAtomic))
}

func TestRegionContains(t *testing.T) {
	r := RemoteRegion{Address: 1000, Length: 100}
	cases := []struct {
		addr, n uint64
		want    bool
	}{
		{1000, 100, true},
		{1000, 101, false},
		{1099, 1, true},
		{1099, 2, false},
		{1100, 0, true},
		{1100, 1, false},
		{999, 1, false},
		{1050, math.MaxUint64, false},
		{math.MaxUint64, 1, false},
	}
	for _, c := range cases {
		require.Equal(t, c.want, r.Contains(c.addr, c.n), "addr %d len %d", c.addr, c.n)
	}
	top := RemoteRegion{Address: math.MaxUint64 - 9, Length: 9}
	require.True(t, top.Contains(math.MaxUint64-1, 1))
	require.False(t, top.Contains(math.MaxUint64-1, 2))
}

func TestEqual(t *testing.T) {
	a, b := sampleRC(), sampleRC()
	require.True(t, a.Equal(b))
	b.Regions[0].RemoteKey++
	require.False(t, a.Equal(b))
	c, d := sampleUD(), sampleUD()
	d.Regions = []RemoteRegion{}
	require.True(t, c.Equal(d), "nil and empty region lists are equal")
	d.GID[0] = 1
	require.False(t, c.Equal(d))
}

func TestEndpointString(t *testing.T) {
	require.Equal(t, "RC qpn=0xabcdef lid=4660 gid=fe80::1 gid_index=3 psn=0x123456 mtu=4096 regions=1", sampleRC().String())
	require.Equal(t, "UD qpn=0x1 qkey=0x11111111 lid=0 gid=::ffff:10.0.0.7 gid_index=0 psn=0x0 mtu=2048 regions=0", sampleUD().String())
	require.Contains(t, sampleDC().String(), "DC qpn=0x77 dct=0xffffff dc_key=0x123456789abcdef")
	require.Equal(t, "[0x10,+5) rkey=0x7 RemoteRead", RemoteRegion{Address: 16, Length: 5, RemoteKey: 7, Access: ctx.AccessRemoteRead}.String())
}

// A field the transport does not use is named with the transport, in a
// sentence that reads right for each ("an endpoint of transport RC", never
// "a RC endpoint"), and the error is a local-check error.
func TestNotApplicableText(t *testing.T) {
	e := Endpoint{Transport: TransportRC, QPN: 1, LID: 1, MTU: ctx.MTU1024, QKey: 7}
	err := e.Validate()
	require.ErrorIs(t, err, errNotApplicable)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "0x7 set on an endpoint of transport RC")
	require.NotContains(t, err.Error(), "a RC")
}
