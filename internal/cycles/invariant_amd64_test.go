package cycles

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The kernel sets the nonstop_tsc flag from the same CPUID bit that
// invariantTSC reads; the two must agree.
func TestInvariantMatchesKernel(t *testing.T) {
	b, err := os.ReadFile("/proc/cpuinfo")
	if err != nil {
		t.Skip("no /proc/cpuinfo:", err)
	}
	var flags string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "flags") {
			flags = " " + line + " "
			break
		}
	}
	if flags == "" {
		t.Skip("no flags line in /proc/cpuinfo")
	}
	require.Equal(t, strings.Contains(flags, " nonstop_tsc "), invariantTSC())
}
