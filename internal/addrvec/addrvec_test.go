package addrvec_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
)

// TestAddressValidate checks every field of Address against the width of
// its place in the address vector: the largest value that fits passes, one
// more is refused with an error naming the field and wrapping
// ctx.ErrInvalidArgument, and an address that passes encodes without losing bits.
func TestAddressValidate(t *testing.T) {
	for _, c := range []struct {
		name    string
		ok, bad addrvec.Address
	}{
		{"SL", addrvec.Address{SL: 15}, addrvec.Address{SL: 16}},
		{"SL", addrvec.Address{RoCE: true, SL: 7}, addrvec.Address{RoCE: true, SL: 8}},
		{"SL", addrvec.Address{SL: 15}, addrvec.Address{SL: 200}},
		{"StaticRate", addrvec.Address{StaticRate: 15}, addrvec.Address{StaticRate: 16}},
		{"SrcPathBits", addrvec.Address{SrcPathBits: 127}, addrvec.Address{SrcPathBits: 128}},
		{"FlowLabel", addrvec.Address{Global: true, FlowLabel: 1<<20 - 1}, addrvec.Address{Global: true, FlowLabel: 1 << 20}},
	} {
		require.NoError(t, c.ok.Validate(), c.name)
		err := c.bad.Validate()
		require.Error(t, err, c.name)
		require.True(t, errors.Is(err, ctx.ErrInvalidArgument), "%s: %v", c.name, err)
		require.Contains(t, err.Error(), c.name)
		// The largest value that fits survives the encoding: a refused
		// address is one AV would have truncated.
		require.NotEqual(t, c.ok.AV(), addrvec.Address{RoCE: c.ok.RoCE, Global: c.ok.Global}.AV(), c.name)
	}
}
