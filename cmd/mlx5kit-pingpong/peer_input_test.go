package main

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestUpperBoundsNamed: -iters and -warmup above their bound are
// refused with a message that names the bound, not "want at least 1"
// for 3000000000.
func TestUpperBoundsNamed(t *testing.T) {
	for _, args := range [][]string{{"-iters", "3000000000"}, {"-warmup", "3000000000"}} {
		var out, errOut bytes.Buffer
		require.Equal(t, 2, run(args, &out, &errOut), "%q", args)
		require.Contains(t, errOut.String(), "2147483648", "%q", args)
	}
}
