package ctx_test

import (
	"fmt"
	"log"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// Converting raw CQE timestamps with a clock snapshot: here a recorded one
// of a 156.25 MHz clock (6.4 ns a cycle); Context.Clock reads the device's.
// Mult is rounded down, as the kernel's is: a millisecond of cycles reads a
// nanosecond short.
func ExampleNewClock() {
	const shift = 20
	at := time.Date(2026, 11, 26, 3, 0, 0, 0, time.UTC)
	k, err := ctx.NewClock(ctx.ClockInfo{
		Nanoseconds: uint64(at.UnixNano()),
		LastCycles:  1_000_000,
		Mult:        32 << shift / 5, // 6.4 ns × 2^shift
		Shift:       shift,
		Mask:        1<<41 - 1,
	})
	if err != nil {
		log.Fatal(err)
	}
	for _, raw := range []uint64{1_000_000, 1_000_010, 1_156_250, 999_990} {
		fmt.Println(raw, k.ToTime(raw).Sub(at))
	}
	// Output:
	// 1000000 0s
	// 1000010 63ns
	// 1156250 999.999µs
	// 999990 -63ns
}
