package kerrno_test

import (
	"errors"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/kerrno"
)

// TestCause checks the text of a cause and that errors.Is sees both the
// errno and the sentinel, through a ctx.OpError too.
func TestCause(t *testing.T) {
	err := kerrno.New("ibv_reg_dmabuf_mr", "length 0", syscall.EINVAL, ctx.ErrInvalidArgument)
	require.Equal(t, "ibv_reg_dmabuf_mr length 0: EINVAL (invalid argument)", err.Error())
	require.ErrorIs(t, err, syscall.EINVAL)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.NotErrorIs(t, err, ctx.ErrNotSupported)
	var c *kerrno.Cause
	require.True(t, errors.As(err, &c))
	require.Equal(t, "ibv_reg_dmabuf_mr length 0", c.What)

	bare := kerrno.New("ibv_open_device", "", syscall.ENODEV, ctx.ErrNoDevice)
	require.Equal(t, "ibv_open_device: ENODEV (no such device)", bare.Error())

	op := &ctx.OpError{Op: "register MR", Err: err}
	require.Equal(t, syscall.EINVAL, op.Errno())
	require.ErrorIs(t, op, ctx.ErrInvalidArgument)
}

// TestHasRawCap checks HasRawCap against the effective set in
// /proc/self/status (CapEff, bit 13: CAP_NET_RAW).
func TestHasRawCap(t *testing.T) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Skip("no /proc/self/status")
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			eff, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			require.NoError(t, err)
			require.Equal(t, eff&(1<<13) != 0, kerrno.HasRawCap())
			return
		}
	}
	t.Skip("no CapEff line")
}
