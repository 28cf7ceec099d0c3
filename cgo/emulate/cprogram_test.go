//go:build cgo && linux

package emulate_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
)

// cProgram compiles testdata/<name>.c against libibverbs and the extra
// libraries given (-lmlx5), and builds the preload library, both into a
// temporary directory; it skips the test where there is no C compiler.
func cProgram(t *testing.T, name string, libs ...string) (prog, lib string) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	prog = filepath.Join(dir, name)
	args := append([]string{"-o", prog, "testdata/" + name + ".c", "-libverbs"}, libs...)
	out, err := exec.Command(cc, args...).CombinedOutput()
	require.NoError(t, err, "cc: %s", out)
	return prog, preloadLibrary(t, dir)
}

// runEachPreloaded runs prog with the emulation preloaded from lib over
// both ABIs on InfiniBand and the ioctl ABI on RoCE, one subtest each,
// and checks each output with check.
func runEachPreloaded(t *testing.T, prog, lib string, check func(t *testing.T, out string)) {
	t.Helper()
	for _, c := range []struct{ abi, link string }{{"", "infiniband"}, {emulate.ABIWrite, "infiniband"}, {"", "ethernet"}} {
		t.Run("abi="+c.abi+",link="+c.link, func(t *testing.T) {
			check(t, runPreloaded(t, prog, lib, c.abi, c.link))
		})
	}
}

// runPreloaded runs prog with the emulation preloaded from lib, over the
// ABI (emulate.ABIWrite, or "" for the ioctl methods) and link layer ("",
// "infiniband" or "ethernet") given, and returns its output; the test fails
// when prog does.
func runPreloaded(t *testing.T, prog, lib, abi, link string) string {
	t.Helper()
	cmd := exec.Command(prog)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, emulate.EnvEmulate+"=1", emulate.EnvABI+"="+abi, emulate.EnvLink+"="+link)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}
