package endpoint

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestMTU(t *testing.T) {
	// The values are those of enum ibv_mtu in verbs.h.
	want := map[MTU]int{1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
	for m, n := range want {
		require.True(t, m.Valid())
		require.Equal(t, n, m.Bytes())
		got, err := MTUFromBytes(n)
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	require.Equal(t, MTU(5), MTU4096)
	require.Equal(t, "4096", MTU4096.String())
	for _, bad := range []MTU{0, 6, 255} {
		require.False(t, bad.Valid())
		require.Zero(t, bad.Bytes())
	}
	require.Equal(t, "MTU(6)", MTU(6).String())
	for _, n := range []int{0, 128, 1500, 8192, -1} {
		_, err := MTUFromBytes(n)
		require.ErrorIs(t, err, ErrRange)
	}
}

func TestTransportString(t *testing.T) {
	require.Equal(t, "RC", TransportRC.String())
	require.Equal(t, "UD", TransportUD.String())
	require.Equal(t, "DC", TransportDC.String())
	require.Equal(t, "Transport(9)", Transport(9).String())
	require.False(t, Transport(0).Valid())
}

func TestAccess(t *testing.T) {
	// The bits are those of enum ibv_access_flags in verbs.h.
	require.Equal(t, Access(1), AccessLocalWrite)
	require.Equal(t, Access(2), AccessRemoteWrite)
	require.Equal(t, Access(4), AccessRemoteRead)
	require.Equal(t, Access(8), AccessRemoteAtomic)
	require.Equal(t, Access(32), AccessZeroBased)
	require.Equal(t, "0", Access(0).String())
	require.Equal(t, "REMOTE_WRITE|REMOTE_READ", (AccessRemoteRead | AccessRemoteWrite).String())
	require.Equal(t, "LOCAL_WRITE|0x80", (AccessLocalWrite | 0x80).String())

	r := RemoteRegion{Access: AccessRemoteRead | AccessRemoteWrite}
	require.True(t, r.Allows(AccessRemoteRead))
	require.True(t, r.Allows(AccessRemoteRead|AccessRemoteWrite))
	require.False(t, r.Allows(AccessRemoteAtomic))
	require.False(t, r.Allows(AccessRemoteRead|AccessRemoteAtomic))
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
	require.Equal(t, "[0x10,+5) rkey=0x7 REMOTE_READ", RemoteRegion{Address: 16, Length: 5, RemoteKey: 7, Access: AccessRemoteRead}.String())
}
