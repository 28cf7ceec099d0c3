//go:build !amd64 && !arm64

package cycles

import "time"

// base is the origin of the nanosecond counter on architectures without a
// cycle counter here.
var base = time.Now()

// Now returns nanoseconds of the monotonic clock since program start.
func Now() uint64 { return uint64(time.Since(base)) }

// Start returns the same counter as Now.
func Start() uint64 { return Now() }

// Stop returns the same counter as Now.
func Stop() uint64 { return Now() }

const counterName = "monotonic-ns"

// invariantTSC is true: the monotonic clock has a constant rate.
func invariantTSC() bool { return true }

// oneCounter is true: the monotonic clock is one for all processors.
func oneCounter() bool { return true }

func reportedHz() (hz float64, source string) { return 1e9, "monotonic clock" }

const calibrate = false
