package rc_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
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
func buildInlineCheck(t *testing.T, gcflags string) string {
	t.Helper()
	return buildProgram(t, "./testdata/inlinecheck", gcflags)
}

// buildProgram compiles the program in dir with the given -gcflags and
// returns the compiler's output.
func buildProgram(t *testing.T, dir, gcflags string) string {
	t.Helper()
	cmd := exec.Command(goTool(t), "build", "-gcflags="+gcflags, "-o", os.DevNull, dir)
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	return string(out)
}

const mod = "github.com/mlx5kit/mlx5kit/"

// TestInlining proves what a program that imports rc, dc, ud, transport
// and wqebuilder gets: the Poller's Poll, the function literal given to it
// (with the Completion's methods it calls) and monocq's batch iteration
// are compiled into the caller's function, which then calls only monocq's
// Ready (once per non-empty batch) and, for any CQE but a successful send
// or receive completion (which CompleteSend and CompleteRecv retire
// inline), the queue's Complete (or Unknown, for a QPN no queue was added
// for); a post, from the transport's state check to Finish, is compiled
// into the caller whole, with a call only on the path that refuses a QP
// that is not ready; so is a receive post, one buffer or staged, on a QP
// or an SRQ, but for its store barrier.
func TestInlining(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program twice; skipped with -short")
	}
	m := buildInlineCheck(t, "-m")
	for _, want := range []string{
		`inlining call to rc\.\(\*QP\)\.Post\n`,
		`inlining call to transport\.\(\*Queue\)\.PostRecv\n`,
		`inlining call to transport\.\(\*Queue\)\.BeginRecv\n`,
		`inlining call to transport\.\(\*SharedReceiveQueue\)\.BeginRecv\n`,
		`inlining call to transport\.RecvStage\.SGE\n`,
		`inlining call to transport\.RecvStage\.FinishDoorbell\n`,
		`inlining call to PostRecvStaged\.RecvStage\.FinishDoorbell\.RecvStage\.finish\.func\d+\n`,
		`inlining call to PostSRQStaged\.RecvStage\.FinishDoorbell\.RecvStage\.finish\.func\d+\n`,
		`inlining call to dc\.\(\*DCI\)\.Post\n`,
		`inlining call to ud\.\(\*QP\)\.Post\n`,
		`inlining call to PostWrite\.\(\*QP\)\.Post\.func\d+\n`,
		`inlining call to PostWrite\.DataStage\.Finish\.wqe\.finish\.func\d+\n`,
		`inlining call to transport\.\(\*Poller\)\.Poll\n`,
		`inlining call to PollRC\.func1\n`,
		`inlining call to PollDC\.func1\n`,
		`inlining call to transport\.\(\*Completion\)\.IsError\n`,
		`inlining call to transport\.\(\*Completion\)\.Err\n`,
		`inlining call to PollUD\.func1\n`,
		`inlining call to PollRC\.\(\*Poller\)\.Poll\.func\d+\n`,
		`inlining call to monocq\.\(\*CQ\)\.All\n`,
		`inlining call to transport\.\(\*Poller\)\.ring\n`,
		`inlining call to transport\.\(\*Queue\)\.CompleteSend\n`,
		`inlining call to transport\.\(\*Queue\)\.CompleteRecv\n`,
		`inlining call to monocq\.\(\*Table\[go\.shape\.[0-9a-f]+\]\)\.Lookup\n`,
		`inlining call to wqebuilder\.OpStage\.RdmaWrite\n`,
		`inlining call to wqebuilder\.DatagramStage\.Send\n`,
	} {
		require.Regexp(t, regexp.MustCompile(want), m)
	}

	calls := callsOf(buildInlineCheck(t, "-S"))
	only := func(f, once string, allowed ...string) {
		t.Helper()
		onlyCalls(t, calls, f, once, allowed...)
	}
	// A poll calls Ready for a batch, Complete for a CQE that is not a
	// successful send or plain receive, unknown for an unknown QPN and
	// reapRing after a close or on a Poller that counts or reads
	// timestamps, and then count and countPoll (cold paths).
	for _, f := range []string{"main.PollRC", "main.PollDC", "main.PollUD"} {
		only(f, "", "monocq.(*CQ).Ready", "transport.(*Queue).Complete", "transport.(*Poller).unknown",
			"transport.(*Poller).reapRing", "transport.(*Poller).count", "transport.(*Poller).countPoll")
	}
	// A post calls nothing but the refusal of a QP that is not ready, the
	// error of a refused WQE and the counting of a queue that counts (cold
	// paths) and the runtime's stack growth:
	// the state check, Begin, the address, the operation, the data and
	// Finish are all inline.
	for _, f := range []string{"main.PostWrite", "main.PostDC", "main.PostUD"} {
		only(f, "internal/transport/newqp.Refuse", "wqebuilder.wqe.finishFlagged")
	}
	// A receive post, one buffer with PostRecv or two through the stages on
	// the QP's own receive queue or an SRQ, calls the store barrier before
	// the doorbell record (an empty assembly function on amd64) and, only
	// when the post cannot go ahead, the function that says why.
	only("main.PostRecv", "blueflame.StoreBarrier", "transport.RecvStage.error")
	only("main.PostRecvStaged", "blueflame.StoreBarrier", "transport.RecvStage.error")
	only("main.PostSRQStaged", "blueflame.StoreBarrier", "transport.RecvStage.error")
}

// TestInliningWithoutTransport proves that a program that imports only rc
// and wqebuilder (not transport, whose Queue the QP embeds) gets its posts
// and receive posts compiled in as a program that imports transport does:
// the bodies of transport's methods reach it through rc, so rc, dc and ud
// need no copy of them.
func TestInliningWithoutTransport(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a program twice; skipped with -short")
	}
	const dir = "./testdata/rconly"
	src, err := os.ReadFile(filepath.Join(dir, "main.go"))
	require.NoError(t, err)
	require.NotContains(t, string(src), `mlx5kit/transport"`, "the program must not import transport")
	m := buildProgram(t, dir, "-m")
	for _, want := range []string{
		`inlining call to rc\.\(\*QP\)\.Post\n`,
		`inlining call to transport\.\(\*Queue\)\.PostRecv\n`,
		`inlining call to transport\.\(\*Queue\)\.BeginRecv\n`,
		`inlining call to transport\.RecvStage\.SGE\n`,
		`inlining call to transport\.RecvStage\.FinishDoorbell\n`,
		`inlining call to PostRecvStaged\.RecvStage\.FinishDoorbell\.RecvStage\.finish\.func\d+\n`,
		`inlining call to wqebuilder\.OpStage\.RdmaWrite\n`,
	} {
		require.Regexp(t, regexp.MustCompile(want), m)
	}
	calls := callsOf(buildProgram(t, dir, "-S"))
	onlyCalls(t, calls, "main.PostWrite", "internal/transport/newqp.Refuse", "wqebuilder.wqe.finishFlagged")
	onlyCalls(t, calls, "main.PostRecv", "blueflame.StoreBarrier", "transport.RecvStage.error")
	onlyCalls(t, calls, "main.PostRecvStaged", "blueflame.StoreBarrier", "transport.RecvStage.error")
}

// callsOf returns the functions each function of a -gcflags=-S listing
// calls.
func callsOf(listing string) map[string][]string {
	calls := map[string][]string{}
	fn := ""
	textRE := regexp.MustCompile(`^(\S+) STEXT`)
	callRE := regexp.MustCompile(`\tCALL\t(\S+)\(SB\)`)
	for _, line := range strings.Split(listing, "\n") {
		if mm := textRE.FindStringSubmatch(line); mm != nil {
			fn = mm[1]
		} else if mm := callRE.FindStringSubmatch(line); mm != nil {
			calls[fn] = append(calls[fn], mm[1])
		}
	}
	return calls
}

// onlyCalls requires that f calls nothing but the runtime, the functions
// allowed (each name relative to the module) and once, exactly once when it
// is given.
func onlyCalls(t *testing.T, calls map[string][]string, f, once string, allowed ...string) {
	t.Helper()
	require.Contains(t, calls, f, "no code for %s", f)
	n := 0
	for _, c := range calls[f] {
		switch {
		case once != "" && c == mod+once:
			n++
		case runtimeOK(c) || slices.Contains(allowed, strings.TrimPrefix(c, mod)):
		default:
			t.Errorf("%s calls %s", f, c)
		}
	}
	if once != "" {
		require.Equal(t, 1, n, "%s calls %s once: %v", f, once, calls[f])
	}
	t.Logf("%s calls %v", f, slices.Compact(calls[f]))
}

// runtimeOK reports whether c is the runtime's stack growth, a panic, or
// the slow path of the GC write barrier (taken only while the collector
// marks).
func runtimeOK(c string) bool {
	return strings.HasPrefix(c, "runtime.morestack") || strings.HasPrefix(c, "runtime.panic") ||
		strings.HasPrefix(c, "runtime.gcWriteBarrier")
}
