package toolproc

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

const envArgs = "MLX5KIT_TOOLPROC_TEST_ARGS"

func TestToolChild(t *testing.T) {
	Child(t, envArgs, func(args []string) int {
		fmt.Printf("args %q env %s\n", args, os.Getenv("EXTRA"))
		return len(args)
	})
}

// TestStart runs TestToolChild in a child process and checks its
// arguments, environment, output and exit status.
func TestStart(t *testing.T) {
	if os.Getenv("MLX5KIT_EMULATED") != "" {
		t.Skip("a test binary for another CPU cannot re-execute itself under qemu-user")
	}
	cmd, out := Start(t, envArgs, []string{"EXTRA=yes"}, "-a", "b c")
	err := cmd.Wait()
	require.Error(t, err, "the child exits with the number of its arguments")
	require.Equal(t, 2, cmd.ProcessState.ExitCode())
	require.True(t, strings.HasPrefix(out.String(), `args ["-a" "b c"] env yes`), out.String())
}
