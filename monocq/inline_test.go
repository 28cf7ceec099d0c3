package monocq

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// goTool finds the go command that runs the tests.
func goTool(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("go"); err == nil {
		return p
	}
	if root := os.Getenv("GOROOT"); root != "" {
		return filepath.Join(root, "bin", "go")
	}
	t.Fatal("the go command is not on PATH and GOROOT is unset: cannot check inlining")
	return ""
}

// buildInlineCheck compiles testdata/inlinecheck with the given -gcflags and
// returns the compiler's output.
func buildInlineCheck(t *testing.T, gcflags string, args ...string) string {
	t.Helper()
	args = append(append([]string{"build", "-gcflags=" + gcflags}, args...), "-o", os.DevNull, "./testdata/inlinecheck")
	cmd := exec.Command(goTool(t), args...)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

// TestInlining proves that each polling form compiles to one loop with the
// caller's per-CQE code inside: the compiler reports every call on the
// per-CQE path as inlined, and the generated code of the three user
// functions calls nothing but (*CQ).Ready (plus the runtime's stack-growth
// and bounds-failure paths).
func TestInlining(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program twice; skipped with -short")
	}
	m := buildInlineCheck(t, "-m")
	for _, want := range []string{
		// the cursor
		`inlining call to monocq\.\(\*CQ\)\.Next`,
		`inlining call to monocq\.\(\*CQ\)\.Release`,
		`inlining call to monocq\.\(\*CQE\)\.QPN`,
		`inlining call to monocq\.\(\*CQE\)\.ByteCount`,
		`inlining call to monocq\.\(\*Table\[.*\]\)\.Lookup`,
		// Poll with a function literal: Poll, its closure, the literal
		`inlining call to monocq\.\(\*CQ\)\.Poll\n`,
		`inlining call to PollLiteral\.\(\*CQ\)\.Poll\.func\d+\n`,
		`inlining call to PollLiteral\.func1\n`,
		// range over All: All, the iterator closure, the loop body
		`inlining call to monocq\.\(\*CQ\)\.All\n`,
		`inlining call to RangeAll\.\(\*CQ\)\.All\.func1\n`,
		`inlining call to RangeAll-range1\n`,
	} {
		require.Regexp(t, regexp.MustCompile(want), m)
	}
	for _, line := range strings.Split(m, "\n") {
		if strings.Contains(line, "inlining call to") && (strings.Contains(line, "Poll") || strings.Contains(line, "All") || strings.Contains(line, "range1")) {
			t.Log(line)
		}
	}

	calls := map[string][]string{}
	fn := ""
	textRE := regexp.MustCompile(`^(\S+) STEXT`)
	callRE := regexp.MustCompile(`\tCALL\t(\S+)\(SB\)`)
	for _, line := range strings.Split(buildInlineCheck(t, "-S"), "\n") {
		if mm := textRE.FindStringSubmatch(line); mm != nil {
			fn = mm[1]
		} else if mm := callRE.FindStringSubmatch(line); mm != nil {
			calls[fn] = append(calls[fn], mm[1])
		}
	}
	for _, f := range []string{"main.Cursor", "main.PollLiteral", "main.PollOne", "main.RangeAll"} {
		require.Contains(t, calls, f, "no code for %s", f)
		require.Contains(t, calls[f], "github.com/mlx5kit/mlx5kit/monocq.(*CQ).Ready", f)
		for _, c := range calls[f] {
			ok := c == "github.com/mlx5kit/mlx5kit/monocq.(*CQ).Ready" ||
				strings.HasPrefix(c, "runtime.morestack") || strings.HasPrefix(c, "runtime.panic")
			require.True(t, ok, "%s calls %s", f, c)
		}
		t.Logf("%s calls %v", f, slices.Compact(calls[f]))
	}
}

// functionText returns the assembly listing of each function of the
// inlinecheck program, compiled with the given extra build arguments.
func functionText(t *testing.T, args ...string) map[string]string {
	t.Helper()
	text := map[string]string{}
	fn := ""
	textRE := regexp.MustCompile(`^(\S+) STEXT`)
	for _, line := range strings.Split(buildInlineCheck(t, "-S", args...), "\n") {
		if mm := textRE.FindStringSubmatch(line); mm != nil {
			fn = mm[1]
		}
		text[fn] += line + "\n"
	}
	return text
}

// On amd64 the one-CQE poll orders its CQE reads with the atomic load of the
// owner word alone (no fence instruction, no call); built with the tag
// mlx5kit_lfence it calls blueflame.ReadBarrier, rdma-core's lfence.
func TestPollOneOwnershipOrdering(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program twice; skipped with -short")
	}
	if runtime.GOARCH != "amd64" {
		t.Skip("the ownership ordering without an instruction is amd64's")
	}
	const readBarrier = "github.com/mlx5kit/mlx5kit/blueflame.ReadBarrier"
	def := functionText(t)["main.PollOne"]
	require.NotEmpty(t, def, "no code for main.PollOne")
	require.NotContains(t, def, "LFENCE")
	require.NotContains(t, def, readBarrier)
	require.Contains(t, def, "monocq.(*CQ).Ready", "the slow path is still there")

	fenced := functionText(t, "-tags", "mlx5kit_lfence")["main.PollOne"]
	require.Contains(t, fenced, "CALL\t"+readBarrier)
}
