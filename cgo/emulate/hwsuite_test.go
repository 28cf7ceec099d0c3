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
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/devicetest"
)

// hardwareSuitePackages are the packages whose hardware tests (the ones
// `make hwtest` runs on a NIC) run on the emulated device. Their test
// binaries link the emulated kernel (an emulate_link_test.go, or the root
// package for the commands).
var hardwareSuitePackages = []string{
	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs",
	"github.com/mlx5kit/mlx5kit/internal/scenario",
	"github.com/mlx5kit/mlx5kit/internal/devicetest",
	"github.com/mlx5kit/mlx5kit/cmd/mlx5kit-devinfo",
	"github.com/mlx5kit/mlx5kit/cmd/mlx5kit-perf",
	"github.com/mlx5kit/mlx5kit/cmd/mlx5kit-pingpong",
}

// notYetOnTheEmulatedDevice are the hardware tests that may fail or skip
// on the emulated device, each with why; any other failure or skip fails
// TestHardwareSuitesOnEmulatedDevice. They run all the same, and an entry
// whose test passes, or does not run, fails it too, so that the list
// holds only what is still out of reach. A key is "package/Test" or
// "package/Test/sub" with the package's last path element; link names the
// link layer the entry is for ("" both). Every hardware test passes on the
// emulated device now: the list is empty.
var notYetOnTheEmulatedDevice = map[string]struct{ link, why string }{}

// hardwareRunProblem is a test the hardware run fails on, and why.
type hardwareRunProblem struct{ key, why string }

// checkHardwareRun compares the outcome of a hardware run on the given
// link layer with the list of known failures: it returns the known
// failures and skips (with why they are known), and the problems: a
// failure or skip not on the list, an entry whose test passed (the list
// is stale) and an entry whose test did not run (it names no test).
func checkHardwareRun(list map[string]struct{ link, why string }, link string,
	passed, failed, skipped map[string]bool) (known []string, problems []hardwareRunProblem) {
	applies := func(key string) (string, bool) {
		entry, ok := list[key]
		return entry.why, ok && (entry.link == "" || entry.link == link)
	}
	for _, set := range []map[string]bool{failed, skipped} {
		for key := range set {
			if why, ok := applies(key); ok {
				known = append(known, key+" ("+why+")")
				continue
			}
			problems = append(problems, hardwareRunProblem{key, key + " failed or skipped on the emulated device (" + link + ")"})
		}
	}
	for key := range list {
		if _, ok := applies(key); !ok {
			continue
		}
		switch {
		case passed[key]:
			problems = append(problems, hardwareRunProblem{key, key + " passes on the emulated device (" + link + "): remove it from notYetOnTheEmulatedDevice"})
		case !failed[key] && !skipped[key]:
			problems = append(problems, hardwareRunProblem{key, key + " did not run on the emulated device (" + link + "): notYetOnTheEmulatedDevice names no test"})
		}
	}
	sort.Strings(known)
	sort.Slice(problems, func(i, j int) bool { return problems[i].key < problems[j].key })
	return known, problems
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
			known, problems := checkHardwareRun(notYetOnTheEmulatedDevice, link, passed, failed, skipped)
			for _, k := range known {
				t.Logf("not yet on the emulated device: %s", k)
			}
			for _, p := range problems {
				t.Errorf("%s:\n%s", p.why, output[p.key])
			}
			t.Logf("%d hardware tests passed on the emulated device (%s)", len(passed), link)
		})
	}
}

// TestCheckHardwareRun checks the rule TestHardwareSuitesOnEmulatedDevice
// applies: an unlisted failure or skip, a listed test that passes and a
// listed test that did not run are each a problem; a listed failure on
// its link layer is known, and an entry for the other link layer is
// neither.
func TestCheckHardwareRun(t *testing.T) {
	list := map[string]struct{ link, why string }{
		"verbs/TestFails":     {"", "out of reach"},
		"verbs/TestPassesNow": {"", "was out of reach"},
		"verbs/TestRenamed":   {"", "names no test any more"},
		"verbs/TestRoCEOnly":  {"ethernet", "RoCE only"},
	}
	passed := map[string]bool{"verbs/TestPassesNow": true, "verbs/TestFine": true, "verbs/TestRoCEOnly": true}
	failed := map[string]bool{"verbs/TestFails": true, "verbs/TestNew": true}
	skipped := map[string]bool{"scenario/TestSkips": true}
	known, problems := checkHardwareRun(list, "infiniband", passed, failed, skipped)
	require.Equal(t, []string{"verbs/TestFails (out of reach)"}, known)
	var keys []string
	for _, p := range problems {
		keys = append(keys, p.key)
	}
	require.Equal(t, []string{"scenario/TestSkips", "verbs/TestNew", "verbs/TestPassesNow", "verbs/TestRenamed"}, keys)
	require.Contains(t, problems[2].why, "remove it from notYetOnTheEmulatedDevice")
	require.Contains(t, problems[3].why, "names no test")

	_, problems = checkHardwareRun(list, "ethernet", passed, failed, skipped)
	keys = keys[:0]
	for _, p := range problems {
		keys = append(keys, p.key)
	}
	require.Contains(t, keys, "verbs/TestRoCEOnly", "an entry for RoCE whose test passes on RoCE")

	known, problems = checkHardwareRun(map[string]struct{ link, why string }{}, "infiniband", passed, map[string]bool{}, map[string]bool{})
	require.Empty(t, known)
	require.Empty(t, problems, "every test passes and the list is empty")
}
