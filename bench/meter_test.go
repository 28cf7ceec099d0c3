package bench

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
)

// TestMain prints, before any benchmark line, what the cycle counts are
// counted in: the counter and whether it is invariant as "key: value" lines
// that benchstat keeps as configuration, the frequency as a plain line, and
// the CQE read ordering both the Go and the C loops use.
func TestMain(m *testing.M) {
	flag.Parse()
	if f := flag.Lookup("test.bench"); f != nil && f.Value.String() != "" {
		info := cycles.Frequency()
		fmt.Printf("counter: %s\n", info.Counter)
		// Not a "key: value" line: a calibrated frequency differs from
		// run to run, and benchstat would split the results by it.
		fmt.Printf("counter frequency %.2f MHz (%s)\n", info.Hz/1e6, info.Source)
		fmt.Printf("counter-invariant: %t\n", info.Invariant)
		// How a CQE's reads are ordered after its ownership check, in the
		// Go poller and in the C floor alike (-tags mlx5kit_lfence for
		// rdma-core's lfence on amd64).
		fmt.Printf("cqe-read-order: %s\n", blueflame.OwnershipOrdering())
	}
	code := m.Run()
	if env != nil {
		if err := env.close(); err != nil {
			fmt.Fprintln(os.Stderr, "bench: close:", err)
			code = 1
		}
	}
	os.Exit(code)
}
