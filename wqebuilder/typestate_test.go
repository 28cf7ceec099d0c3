package wqebuilder_test

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func goTool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to build with")
	}
	return p
}

// wrongOrders are WQEs built in an order the hardware does not accept; each
// must fail to compile.
var wrongOrders = map[string]string{
	"finish_without_op":    `q.Begin(0, 0).Finish()`,
	"sge_before_op":        `q.Begin(0, 0).SGE(1, 2, 3)`,
	"op_after_data":        `q.Begin(0, 0).Send().RdmaWrite(1, 2)`,
	"address_after_op":     `q.Begin(0, 0).Send().DC(&av, 1, 2)`,
	"address_twice":        `q.Begin(0, 0).DC(&av, 1, 2).DC(&av, 1, 2)`,
	"ud_then_rdma":         `q.Begin(0, 0).UD(&av, 1, 2).RdmaWrite(1, 2)`,
	"ud_then_atomic":       `q.Begin(0, 0).UD(&av, 1, 2).AtomicFA(1, 2, 3)`,
	"dc_then_ud":           `q.Begin(0, 0).DC(&av, 1, 2).UD(&av, 1, 2)`,
	"inline_on_read":       `q.Begin(0, 0).RdmaRead(1, 2).Inline(nil)`,
	"sge_after_inline":     `q.Begin(0, 0).Send().Inline(nil).SGE(1, 2, 3)`,
	"atomic_without_dest":  `q.Begin(0, 0).AtomicCS(1, 2, 3, 4).Finish()`,
	"sge_on_atomic":        `q.Begin(0, 0).AtomicFA(1, 2, 3).SGE(1, 2, 3)`,
	"inline_on_atomic":     `q.Begin(0, 0).MaskedCS64(1, 2, 3, 4, 5, 6).Result(1, 2).Inline(nil)`,
	"result_twice":         `q.Begin(0, 0).MaskedFA32(1, 2, 3, 4).Result(1, 2).Result(1, 2)`,
	"payload_on_nop":       `q.Begin(0, 0).Nop().SGE(1, 2, 3)`,
	"two_ops":              `q.Begin(0, 0).Nop().Send()`,
	"begin_on_stage":       `q.Begin(0, 0).Begin(0, 0)`,
	"read_with_finish_ops": `q.Begin(0, 0).RdmaRead(1, 2).SGE(1, 2, 3).RdmaWrite(1, 2)`,
}

// rightOrder compiles: it proves that the harness reports only the wrong
// orders.
const rightOrder = `q.Begin(0, 0).DC(&av, 1, 2).RdmaWriteImm(1, 2, 3).SGE(1, 2, 3).Inline(nil).Inline(nil).FinishBlueFlame()`

// TestWrongOrderDoesNotCompile writes one small file per wrong order into a
// temporary package inside the module (its name starts with "_", so ./...
// patterns never see it), compiles it once with every error reported
// (-gcflags=-e), and requires an error in each file but the control.
func TestWrongOrderDoesNotCompile(t *testing.T) {
	goCmd := goTool(t)
	dir, err := os.MkdirTemp(".", "_typestate")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	write := func(name, expr string) {
		src := fmt.Sprintf(`package typestate

import "github.com/mlx5kit/mlx5kit/wqebuilder"

var _ = func(q *wqebuilder.SendQueue, av [48]byte) any {
	return %s
}
`, expr)
		require.NoError(t, os.WriteFile(filepath.Join(dir, name+".go"), []byte(src), 0o644))
	}
	for name, expr := range wrongOrders {
		write(name, expr)
	}
	write("control", rightOrder)

	cmd := exec.Command(goCmd, "build", "-gcflags=-e", "-o", os.DevNull, "./"+filepath.Base(dir))
	out, err := cmd.CombinedOutput()
	require.Error(t, err, "the wrong orders compiled:\n%s", out)
	failed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)([a-z_]+)\.go:\d+:\d+: `).FindAllStringSubmatch(string(out), -1) {
		failed[m[1]] = true
	}
	for name := range wrongOrders {
		require.True(t, failed[name], "%s compiled: %s\n%s", name, wrongOrders[name], out)
	}
	require.False(t, failed["control"], "the right order does not compile:\n%s", out)
}

// TestStageMethodsInline requires the compiler to report every stage method,
// Begin, Complete and the small helpers they use as inlinable, so that a
// post compiles to straight-line code. FinishBlueFlame and Inline are
// inlinable wrappers around one call (the doorbell, the inline copy).
func TestStageMethodsInline(t *testing.T) {
	goCmd := goTool(t)
	out, err := exec.Command(goCmd, "build", "-gcflags=-m", "-o", os.DevNull, ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	inlinable := map[string]bool{}
	for _, m := range regexp.MustCompile(`can inline (\S+)`).FindAllStringSubmatch(string(out), -1) {
		inlinable[m[1]] = true
	}

	// Every method declared on a stage type, from the package source.
	stages := map[string]bool{"CtrlStage": true, "OpStage": true, "DatagramStage": true, "DataStage": true,
		"ScatterStage": true, "InlineStage": true, "AtomicStage": true, "FinishStage": true}
	fset := token.NewFileSet()
	names, err := filepath.Glob("*.go")
	require.NoError(t, err)
	var want []string
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, 0)
		require.NoError(t, err)
		for _, d := range f.Decls {
			fn, ok := d.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || !fn.Name.IsExported() {
				continue
			}
			recv := fn.Recv.List[0].Type
			if id, ok := recv.(*ast.Ident); ok && stages[id.Name] {
				want = append(want, id.Name+"."+fn.Name.Name)
			}
		}
	}
	want = append(want, "(*SendQueue).Begin", "(*SendQueue).Complete")
	sort.Strings(want)
	require.Greater(t, len(want), 30)
	var missing []string
	for _, name := range want {
		if !inlinable[name] {
			missing = append(missing, name)
		}
	}
	require.Empty(t, missing, "not inlinable (go build -gcflags=-m -m ./wqebuilder/ shows the cost)")
}

// TestFinishBlueFlameInlinesAtCallSite compiles a post with FinishBlueFlame
// in a temporary package inside the module and requires the compiler to
// inline the whole of it, closure included: the generated code of the
// posting function calls only the BlueFlame assembly, the error of a
// refused WQE (a cold path) and the runtime's stack growth.
func TestFinishBlueFlameInlinesAtCallSite(t *testing.T) {
	requireInlinesAtCallSite(t, "FinishBlueFlame", []string{
		`inlining call to blueflame\.\(\*SendDoorbell\)\.Post\n`,
	}, []string{"github.com/mlx5kit/mlx5kit/blueflame.post", flaggedFunc, "runtime.morestack_noctxt"})
}

// flaggedFunc is the one call of a Finish that is not inlined: the error
// of a refused WQE, or the finish of a counting queue's.
const flaggedFunc = "github.com/mlx5kit/mlx5kit/wqebuilder.wqe.finishFlagged"

// TestFinishInlinesAtCallSite: a WQE finished with Finish (as batches are)
// compiles into the posting function with no call but the one for a WQE
// refused or counted.
func TestFinishInlinesAtCallSite(t *testing.T) {
	requireInlinesAtCallSite(t, "Finish", nil, []string{flaggedFunc, "runtime.morestack_noctxt"})
}

// requireInlinesAtCallSite builds Begin → RdmaWriteImm → SGE → finisher in
// a temporary package and requires the -m lines of the finishing chain plus
// extra, and exactly the calls wantCalls in the posting function's code.
func requireInlinesAtCallSite(t *testing.T, finisher string, extra, wantCalls []string) {
	goCmd := goTool(t)
	dir, err := os.MkdirTemp(".", "_inlinepost")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(dir) })
	src := `package inlinepost

import "github.com/mlx5kit/mlx5kit/wqebuilder"

func Post(q *wqebuilder.SendQueue, wrid uint64) error {
	return q.Begin(wrid, wqebuilder.Signaled).RdmaWriteImm(0x1000, 1, 2).SGE(0x2000, 8, 3).` + finisher + `()
}
`
	require.NoError(t, os.WriteFile(filepath.Join(dir, "post.go"), []byte(src), 0o644))
	build := func(gcflags string) string {
		cmd := exec.Command(goCmd, "build", "-gcflags="+gcflags, "-o", os.DevNull, "./"+filepath.Base(dir))
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
		return string(out)
	}
	m := build("-m")
	for _, want := range append([]string{
		`inlining call to wqebuilder\.DataStage\.` + finisher + `\n`,
		`inlining call to Post\.DataStage\.` + finisher + `\.wqe\.finish\.func\d+\n`,
		`inlining call to wqebuilder\.wqe\.refused\n`,
		`inlining call to wqebuilder\.wqe\.commit\n`,
	}, extra...) {
		require.Regexp(t, regexp.MustCompile(want), m)
	}
	var calls []string
	in := false
	for _, line := range strings.Split(build("-S"), "\n") {
		if strings.Contains(line, " STEXT") {
			in = strings.HasPrefix(line, "github.com/mlx5kit/mlx5kit/wqebuilder/"+filepath.Base(dir)+".Post ")
		}
		if mm := regexp.MustCompile(`\tCALL\t(\S+)\(SB\)`).FindStringSubmatch(line); in && mm != nil {
			calls = append(calls, mm[1])
		}
	}
	slices.Sort(calls)
	calls = slices.Compact(calls)
	require.Equal(t, wantCalls, calls)
}
