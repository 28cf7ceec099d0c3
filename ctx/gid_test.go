package ctx_test

import (
	"errors"
	"math/rand"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// gid parses an IPv6 address (IPv4 ones are IPv4-mapped) into a GID.
func gid(t *testing.T, s string) ctx.GID {
	t.Helper()
	a, err := netip.ParseAddr(s)
	require.NoError(t, err)
	return ctx.GID(a.As16())
}

func TestGIDSelector(t *testing.T) {
	var auto ctx.GIDSelector
	require.True(t, auto.Auto())
	_, ok := auto.Index()
	require.False(t, ok)
	require.Equal(t, "auto", auto.String())

	for _, i := range []uint8{0, 3, 255} {
		s := ctx.GIDIndex(i)
		require.False(t, s.Auto())
		got, ok := s.Index()
		require.True(t, ok)
		require.Equal(t, i, got)
		require.NotEqual(t, auto, s, "index %d is not the unset value", i)
	}
	require.Equal(t, "0", ctx.GIDIndex(0).String())
}

// TestChooseGID checks the automatic choice on RoCE tables laid out as
// ConnectX fills them and on contrived ones for each step of the order:
// RoCE v2 before v1; IPv4-mapped, then link-local IPv4, then IPv6 other
// than link-local, then link-local IPv6; ties to the lower index, whatever
// the order of the table; zero GIDs never.
func TestChooseGID(t *testing.T) {
	v1, v2 := ctx.GIDTypeRoCEv1, ctx.GIDTypeRoCEv2
	ll := gid(t, "fe80::202:c9ff:fe00:1")
	v4 := gid(t, "10.1.2.3")
	v4b := gid(t, "192.168.7.9")
	v4ll := gid(t, "169.254.3.4")
	v6 := gid(t, "2001:db8::5")
	ula := gid(t, "fd12:3456::5")
	e := func(i int, g ctx.GID, ty ctx.GIDType) ctx.GIDEntry {
		return ctx.GIDEntry{Index: i, GID: g, Type: ty, Port: 1}
	}
	for _, c := range []struct {
		name string
		gids []ctx.GIDEntry
		want int
	}{
		{"ConnectX with IPv4 and IPv6", []ctx.GIDEntry{e(0, ll, v1), e(1, ll, v2), e(2, v4, v1), e(3, v4, v2), e(4, v6, v1), e(5, v6, v2)}, 3},
		{"IPv6 before IPv4 in the table", []ctx.GIDEntry{e(0, ll, v1), e(1, ll, v2), e(2, v6, v1), e(3, v6, v2), e(4, v4, v1), e(5, v4, v2)}, 5},
		{"no IPv4", []ctx.GIDEntry{e(0, ll, v1), e(1, ll, v2), e(2, ula, v1), e(3, ula, v2)}, 3},
		{"link-local only", []ctx.GIDEntry{e(0, ll, v1), e(1, ll, v2)}, 1},
		{"RoCE v1 only", []ctx.GIDEntry{e(0, ll, v1), e(2, v6, v1), e(4, v4, v1)}, 4},
		{"RoCE v1 IPv6 before link-local", []ctx.GIDEntry{e(0, ll, v1), e(2, v6, v1)}, 2},
		{"RoCE v2 link-local before RoCE v1 IPv4", []ctx.GIDEntry{e(0, v4, v1), e(1, ll, v2)}, 1},
		{"two IPv4 addresses: the lower index", []ctx.GIDEntry{e(0, ll, v1), e(1, ll, v2), e(6, v4b, v2), e(3, v4, v2)}, 3},
		{"link-local IPv4 after IPv4", []ctx.GIDEntry{e(2, v4ll, v2), e(3, v4, v2)}, 3},
		{"link-local IPv4 before IPv6", []ctx.GIDEntry{e(2, v6, v2), e(3, v4ll, v2)}, 3},
		{"zero GID skipped", []ctx.GIDEntry{e(0, ctx.GID{}, v2), e(1, ll, v1)}, 1},
		{"unknown type after RoCE v1", []ctx.GIDEntry{e(0, v4, 0), e(1, ll, v1)}, 1},
		{"unknown type when nothing else", []ctx.GIDEntry{e(0, v4, 0), e(1, ll, 0)}, 0},
	} {
		t.Run(c.name, func(t *testing.T) {
			pa := ctx.PortAttr{Port: 1, State: ctx.PortStateActive, LinkLayer: ctx.LinkLayerEthernet}
			rng := rand.New(rand.NewSource(1))
			for range 8 {
				got, err := ctx.ChooseGID(pa, c.gids, ctx.GIDSelector{})
				require.NoError(t, err)
				require.Equal(t, c.want, got.Index)
				rng.Shuffle(len(c.gids), func(i, j int) { c.gids[i], c.gids[j] = c.gids[j], c.gids[i] })
			}
			pa.State = ctx.PortStateActiveDefer
			got, err := ctx.ChooseGID(pa, c.gids, ctx.GIDSelector{})
			require.NoError(t, err)
			require.Equal(t, c.want, got.Index, "ACTIVE_DEFER is active")
		})
	}
}

// TestChooseGIDExplicitAndErrors: an explicit index wins over the choice,
// even index 0 and even on a port that is down; a missing entry, an empty
// RoCE table and a RoCE port that is not ACTIVE are errors; InfiniBand
// takes the port GID (the lowest index) whatever the port's state.
func TestChooseGIDExplicitAndErrors(t *testing.T) {
	ll := gid(t, "fe80::1")
	v4 := gid(t, "10.0.0.1")
	roce := []ctx.GIDEntry{
		{Index: 0, GID: ll, Type: ctx.GIDTypeRoCEv1, Port: 1},
		{Index: 1, GID: ll, Type: ctx.GIDTypeRoCEv2, Port: 1},
		{Index: 2, GID: v4, Type: ctx.GIDTypeRoCEv1, Port: 1},
		{Index: 3, GID: v4, Type: ctx.GIDTypeRoCEv2, Port: 1},
	}
	up := ctx.PortAttr{Port: 1, State: ctx.PortStateActive, LinkLayer: ctx.LinkLayerEthernet}
	down := up
	down.State = ctx.PortStateDown

	for _, i := range []uint8{0, 2} {
		for _, pa := range []ctx.PortAttr{up, down} {
			got, err := ctx.ChooseGID(pa, roce, ctx.GIDIndex(i))
			require.NoError(t, err)
			require.Equal(t, roce[i], got)
		}
	}
	_, err := ctx.ChooseGID(up, roce, ctx.GIDIndex(9))
	require.ErrorIs(t, err, ctx.ErrNotFound)
	require.Contains(t, err.Error(), "index 9")

	_, err = ctx.ChooseGID(down, roce, ctx.GIDSelector{})
	require.ErrorIs(t, err, ctx.ErrPortNotActive)
	require.Contains(t, err.Error(), "DOWN")
	_, err = ctx.ChooseGID(up, nil, ctx.GIDSelector{})
	require.ErrorIs(t, err, ctx.ErrNotFound)
	_, err = ctx.ChooseGID(up, []ctx.GIDEntry{{Index: 0, Type: ctx.GIDTypeRoCEv2}}, ctx.GIDSelector{})
	require.ErrorIs(t, err, ctx.ErrNotFound, "a zero GID is no address")

	ib := ctx.PortAttr{Port: 1, State: ctx.PortStateDown, LinkLayer: ctx.LinkLayerInfiniBand, LID: 7}
	port := ctx.GIDEntry{Index: 0, GID: gid(t, "fe80::2:c903:a0:b001"), Type: ctx.GIDTypeIB, Port: 1}
	alias := ctx.GIDEntry{Index: 1, GID: gid(t, "fec0::2:c903:a0:b001"), Type: ctx.GIDTypeIB, Port: 1}
	got, err := ctx.ChooseGID(ib, []ctx.GIDEntry{alias, port}, ctx.GIDSelector{})
	require.NoError(t, err)
	require.Equal(t, port, got, "InfiniBand: the port GID")
	got, err = ctx.ChooseGID(ib, []ctx.GIDEntry{alias, port}, ctx.GIDIndex(1))
	require.NoError(t, err)
	require.Equal(t, alias, got)
	_, err = ctx.ChooseGID(ib, nil, ctx.GIDSelector{})
	require.ErrorIs(t, err, ctx.ErrNotFound)
}

// gidDevice is a fake device with one port as given.
type gidDevice struct {
	fakeDev
	pa    ctx.PortAttr
	gids  []ctx.GIDEntry
	ports *[]uint8
}

func (d gidDevice) QueryPort(p uint8) (ctx.PortAttr, error) {
	*d.ports = append(*d.ports, p)
	if p != 1 {
		return ctx.PortAttr{}, provider.Errorf("fake: query port", "port %d: %w", p, ctx.ErrInvalidArgument)
	}
	return d.pa, nil
}

func (d gidDevice) QueryGIDs(uint8) ([]ctx.GIDEntry, error) { return d.gids, nil }

type gidProvider struct{ dev gidDevice }

func (p gidProvider) Devices() ([]provider.DeviceInfo, error) {
	return []provider.DeviceInfo{{Name: "fake0", Kind: ctx.KindSoftware}}, nil
}
func (p gidProvider) OpenDevice(string) (provider.Device, error) { return p.dev, nil }

// TestContextChooseGID: the method queries the port (0 meaning 1) and its
// table and reports errors as a *ctx.OpError naming the device and port.
func TestContextChooseGID(t *testing.T) {
	var ports []uint8
	ll, v4 := gid(t, "fe80::1"), gid(t, "10.0.0.1")
	dev := gidDevice{fakeDev: fakeDev{closer{&fake{}, "dev"}}, ports: &ports,
		pa: ctx.PortAttr{Port: 1, State: ctx.PortStateActive, LinkLayer: ctx.LinkLayerEthernet},
		gids: []ctx.GIDEntry{
			{Index: 0, GID: ll, Type: ctx.GIDTypeRoCEv1, Port: 1},
			{Index: 1, GID: v4, Type: ctx.GIDTypeRoCEv2, Port: 1},
		}}
	c, err := provider.Open("fake-gid", gidProvider{dev}, "")
	require.NoError(t, err)
	defer func() { require.NoError(t, c.Close()) }()

	got, err := c.ChooseGID(0, ctx.GIDSelector{})
	require.NoError(t, err)
	require.Equal(t, 1, got.Index)
	require.Equal(t, []uint8{1}, ports, "port 0 means 1")

	_, err = c.ChooseGID(1, ctx.GIDIndex(4))
	require.ErrorIs(t, err, ctx.ErrNotFound)
	var oe *ctx.OpError
	require.True(t, errors.As(err, &oe))
	require.Equal(t, "choose GID", oe.Op)
	require.Contains(t, err.Error(), "fake0 port 1")
	_, err = c.ChooseGID(2, ctx.GIDSelector{})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}
