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

// TestAsyncEventsUnderPreload compiles testdata/async_events.c and runs it
// with the emulation preloaded over both ABIs and both link layers:
// ibv_get_async_event returns an SRQ limit reached (once, the limit then
// reading 0), a CQ error and the QP fatal error of a CQ overrun, and a
// last WQE reached, each naming its object; a QP destroyed with its event
// unread takes the event with it, and every destroy after acknowledged
// events returns (libibverbs waits for as many acknowledgements as the
// destroy response reports).
func TestAsyncEventsUnderPreload(t *testing.T) {
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	prog := filepath.Join(dir, "async_events")
	out, err := exec.Command(cc, "-o", prog, "testdata/async_events.c", "-libverbs").CombinedOutput()
	require.NoError(t, err, "cc: %s", out)
	lib := preloadLibrary(t, dir)

	for _, abi := range []string{"", emulate.ABIWrite} {
		for _, link := range []string{"infiniband", "ethernet"} {
			t.Run("abi="+abi+",link="+link, func(t *testing.T) {
				cmd := exec.Command(prog)
				cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, emulate.EnvEmulate+"=1", emulate.EnvABI+"="+abi, emulate.EnvLink+"="+link)
				out, err := cmd.CombinedOutput()
				require.NoError(t, err, "%s", out)
				require.Equal(t, "async fd readable: 0\n"+
					"srq limit armed: 3\n"+
					"one below four: readable 0\n"+
					"event SRQ limit reached: srq\n"+
					"srq limit after the event: 0\n"+
					"disarmed: readable 0\n"+
					"event CQ error: send cq\n"+
					"event local work queue catastrophic error: qp a\n"+
					"event last WQE reached: qp b\n"+
					"after destroying qc: readable 0\n"+
					"done\n", string(out))
			})
		}
	}
}
