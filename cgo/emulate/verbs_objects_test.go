//go:build cgo && linux

package emulate_test

import (
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
)

// TestVerbsObjectsUnderPreload compiles testdata/verbs_objects.c, a C
// program calling ibv_alloc_pd, ibv_reg_mr, ibv_create_comp_channel,
// ibv_create_cq, mlx5dv_init_obj and their destroy verbs directly, and
// runs it with the emulation preloaded, over both ABIs.
func TestVerbsObjectsUnderPreload(t *testing.T) {
	prog, lib := cProgram(t, "verbs_objects", "-lmlx5")

	for _, abi := range []string{"", emulate.ABIWrite} {
		t.Run("abi="+abi, func(t *testing.T) {
			out := runPreloaded(t, prog, lib, abi, "")
			s := out
			require.Regexp(t, `pd handle \d+\n`, s)
			m := regexp.MustCompile(`mr lkey (0x[0-9a-f]+) rkey (0x[0-9a-f]+) length 65536\n`).FindStringSubmatch(s)
			require.NotNil(t, m, "%s", s)
			require.Equal(t, m[1], m[2], "the model's MRs have one key for both")
			require.Contains(t, s, "reg_mr remote write alone: Invalid argument\n")
			require.Contains(t, s, "dealloc_pd with an mr: Device or resource busy\n")
			c := regexp.MustCompile(`cq cqe (\d+) cqn (0x[0-9a-f]+) cqe_cnt (\d+) cqe_size (\d+)\n`).FindStringSubmatch(s)
			require.NotNil(t, c, "%s", s)
			require.Equal(t, "127", c[1], "100 entries rounded up, less one")
			require.Equal(t, "128", c[3])
			require.Equal(t, "64", c[4])
			cqn, err := strconv.ParseUint(c[2], 0, 32)
			require.NoError(t, err)
			require.NotZero(t, cqn)
			require.Contains(t, s, "create_cq vector 1000: Invalid argument\n")
			require.Contains(t, s, "done\n")
		})
	}
}
