package ctx_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// The path MTU of ctx is the one of every package (endpoint, ibpath, the
// transports): its values, sizes and the conversion from bytes.
func TestMTU(t *testing.T) {
	// The values are those of enum ibv_mtu in verbs.h.
	want := map[ctx.MTU]int{1: 256, 2: 512, 3: 1024, 4: 2048, 5: 4096}
	for m, n := range want {
		require.True(t, m.Valid())
		require.Equal(t, n, m.Bytes())
		got, err := ctx.MTUFromBytes(n)
		require.NoError(t, err)
		require.Equal(t, m, got)
	}
	require.Equal(t, ctx.MTU(5), ctx.MTU4096)
	require.Equal(t, "4096", ctx.MTU4096.String())
	for _, bad := range []ctx.MTU{0, 6, 255} {
		require.False(t, bad.Valid())
		require.Zero(t, bad.Bytes())
	}
	require.Equal(t, "MTU(6)", ctx.MTU(6).String())
	for _, n := range []int{0, 128, 1500, 8192, -1} {
		_, err := ctx.MTUFromBytes(n)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	}
}

// The access flags of ctx are those endpoints carry too.
func TestAccess(t *testing.T) {
	// The bits are those of enum ibv_access_flags in verbs.h.
	require.Equal(t, ctx.Access(1), ctx.AccessLocalWrite)
	require.Equal(t, ctx.Access(2), ctx.AccessRemoteWrite)
	require.Equal(t, ctx.Access(4), ctx.AccessRemoteRead)
	require.Equal(t, ctx.Access(8), ctx.AccessRemoteAtomic)
	require.Equal(t, ctx.Access(32), ctx.AccessZeroBased)
	require.Equal(t, "0", ctx.Access(0).String())
	require.Equal(t, "RemoteWrite|RemoteRead", (ctx.AccessRemoteRead | ctx.AccessRemoteWrite).String())
	require.Equal(t, "LocalWrite|0x80", (ctx.AccessLocalWrite | 0x80).String())
	require.Equal(t, "RemoteRead|ZeroBased", (ctx.AccessRemoteRead | ctx.AccessZeroBased).String())
}
