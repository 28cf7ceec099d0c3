//go:build cgo && linux

package emulate_test

import (
	"bufio"
	"bytes"
	"encoding/json"
	"go/build"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/devicetest"
	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
)

// hardwareSuitePackages are the packages whose hardware tests (the ones
// `make hwtest` runs on a NIC) run on the emulated device. Their test
// binaries link the emulated kernel (an emulate_link_test.go, or the root
// package for the commands).
var hardwareSuitePackages = []string{
	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs",
	"github.com/mlx5kit/mlx5kit/internal/scenario",
	"github.com/mlx5kit/mlx5kit/cmd/mlx5kit-devinfo",
	"github.com/mlx5kit/mlx5kit/cmd/mlx5kit-perf",
	"github.com/mlx5kit/mlx5kit/cmd/mlx5kit-pingpong",
}

// notYetOnTheEmulatedDevice are the hardware tests that may fail or skip
// on the emulated device, each with why; any other failure or skip fails
// TestHardwareSuitesOnEmulatedDevice. They run all the same: an entry
// whose test passes is reported, so that the list shrinks as the
// emulated kernel grows. A key is "package/Test" or "package/Test/sub"
// with the package's last path element; link names the link layer the
// entry is for ("" both).
var notYetOnTheEmulatedDevice = map[string]struct{ link, why string }{
	"verbs/TestHardwareObjects":                         {"", "SRQs: the emulated kernel has no CREATE_SRQ yet"},
	"scenario/TestHardwareScenarios/SRQ":                {"", "SRQs: the emulated kernel has no CREATE_SRQ yet"},
	"scenario/TestHardwareScenarios":                    {"", "fails with its SRQ subtest"},
	"scenario/TestHardwareScenarios/DC":                 {"", "DC: the emulated kernel creates no DCI or DCT yet, so the device reports no DC"},
	"verbs/TestHardwareKernelAgreesWithTransitionTable": {"", "needs DC (DCI and DCT through the emulated kernel)"},
	"verbs/TestHardwareDeviceQueries":                   {"ethernet", "RoCE GIDs have no network device on the model (ifindex 0)"},
}

// goEvent is one line of `go test -json`.
type goEvent struct {
	Action  string
	Package string
	Test    string
	Output  string
}

// TestHardwareSuitesOnEmulatedDevice runs the hardware tests of the cgo
// provider, the scenario suite of internal/scenario and the commands'
// hardware tests — what `make hwtest` runs on a NIC — through
// rdma-core's libmlx5 on the emulated device, in child `go test`
// processes switched on by MLX5KIT_EMULATE=1 and MLX5KIT_PROVIDER=mlx5,
// with MLX5KIT_REQUIRE_DEVICE=1 so that a missing device fails instead of
// skipping, for InfiniBand and RoCE ports. Every test must pass except
// the ones notYetOnTheEmulatedDevice lists.
func TestHardwareSuitesOnEmulatedDevice(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs five test binaries; the full run (make test) does")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		goTool = filepath.Join(build.Default.GOROOT, "bin", "go")
	}
	for _, link := range []string{"infiniband", "ethernet"} {
		t.Run(link, func(t *testing.T) {
			args := append([]string{"test", "-json", "-count=1", "-run", "Hardware|Integration"}, hardwareSuitePackages...)
			cmd := exec.Command(goTool, args...)
			cmd.Env = append(os.Environ(), emulate.EnvEmulate+"=1", ctx.EnvProvider+"=mlx5",
				devicetest.EnvRequireDevice+"=1", emulate.EnvLink+"="+link, emulate.EnvABI+"=")
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			out, _ := cmd.Output() // a failing test exits 1; the events say which
			passed, failed, skipped := map[string]bool{}, map[string]bool{}, map[string]bool{}
			output := map[string]*strings.Builder{}
			sc := bufio.NewScanner(bytes.NewReader(out))
			sc.Buffer(make([]byte, 1<<20), 1<<24)
			for sc.Scan() {
				var e goEvent
				if json.Unmarshal(sc.Bytes(), &e) != nil || e.Test == "" {
					continue
				}
				key := filepath.Base(e.Package) + "/" + e.Test
				switch e.Action {
				case "pass":
					passed[key] = true
				case "fail":
					failed[key] = true
				case "skip":
					skipped[key] = true
				case "output":
					if output[key] == nil {
						output[key] = &strings.Builder{}
					}
					output[key].WriteString(e.Output)
				}
			}
			require.NotEmpty(t, passed, "no hardware test ran: %s\n%s", stderr.String(), out)
			for _, want := range []string{"verbs/TestHardwareRDMAWriteLoopback", "scenario/TestHardwareScenarios/RCWrite",
				"scenario/TestHardwareScenarios/UD", "mlx5kit-pingpong/TestHardwarePingPong"} {
				require.True(t, passed[want], "%s passes on the emulated device:\n%s", want, output[want])
			}
			for _, set := range []map[string]bool{failed, skipped} {
				for key := range set {
					entry, known := notYetOnTheEmulatedDevice[key]
					if known && (entry.link == "" || entry.link == link) {
						t.Logf("not yet on the emulated device: %s (%s)", key, entry.why)
						continue
					}
					t.Errorf("%s failed or skipped on the emulated device:\n%s", key, output[key])
				}
			}
			for key, entry := range notYetOnTheEmulatedDevice {
				if passed[key] && (entry.link == "" || entry.link == link) {
					t.Logf("%s passes now on the emulated device: remove it from notYetOnTheEmulatedDevice", key)
				}
			}
			t.Logf("%d hardware tests passed on the emulated device (%s)", len(passed), link)
		})
	}
}
