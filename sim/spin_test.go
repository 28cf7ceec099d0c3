package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSpinChoice: an engine runs bursts of empty rounds only with four
// processors and four CPUs or more, unless MLX5KIT_SIM_SPIN says "0"
// (never) or "1" (always).
func TestSpinChoice(t *testing.T) {
	for _, c := range []struct {
		setting     string
		procs, cpus int
		want        bool
	}{
		{"", 1, 16, false},
		{"", 2, 16, false},
		{"", 4, 2, false}, // GOMAXPROCS above the machine's CPUs
		{"", 4, 4, true},
		{"", 16, 16, true},
		{"0", 16, 16, false},
		{"1", 2, 2, true},
		{"yes", 2, 16, false},
		{"yes", 8, 16, true},
	} {
		require.Equal(t, c.want, spinChoice(c.setting, c.procs, c.cpus), "%q, GOMAXPROCS %d, %d CPUs", c.setting, c.procs, c.cpus)
	}
}
