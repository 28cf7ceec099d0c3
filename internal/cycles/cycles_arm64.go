package cycles

// Now returns the generic timer's virtual count (CNTVCT_EL0), with no
// ordering against the instructions around it.
//
//go:noescape
func Now() uint64

// Start returns the virtual count after an ISB, so that earlier
// instructions are not measured after it. Use it at the start of a measured
// region.
//
//go:noescape
func Start() uint64

// Stop returns the virtual count between two ISBs. Use it at the end of a
// measured region.
//
//go:noescape
func Stop() uint64

//go:noescape
func counterFrequency() uint64

const counterName = "cntvct_el0"

// invariantTSC is true: the generic timer counts at the constant frequency
// in CNTFRQ_EL0 in every power state.
func invariantTSC() bool { return true }

// oneCounter is true: the generic timer is one counter for all processors.
func oneCounter() bool { return true }

func reportedHz() (hz float64, source string) {
	if f := counterFrequency(); f != 0 {
		return float64(f), "cntfrq_el0"
	}
	return 0, ""
}

// calibrate is false: CNTFRQ_EL0 is the counter's frequency by definition
// (where the firmware left it 0, Frequency measures the counter).
const calibrate = false
