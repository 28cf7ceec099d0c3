package cycles

import (
	"os"
	"strings"

	"github.com/klauspost/cpuid/v2"
)

// hasRDTSCP is read by Stop: RDTSCP when the CPU has it, LFENCE; RDTSC;
// LFENCE otherwise.
//
//lint:ignore U1000 read by Stop in cycles_amd64.s
var hasRDTSCP = cpuid.CPU.Has(cpuid.RDTSCP)

// Now returns the time-stamp counter (RDTSC), with no ordering against the
// instructions around it.
//
//go:noescape
func Now() uint64

// Start returns the time-stamp counter after every earlier instruction has
// completed (LFENCE; RDTSC). Use it at the start of a measured region.
//
//go:noescape
func Start() uint64

// Stop returns the time-stamp counter after every earlier instruction has
// completed and before any later one starts (RDTSCP; LFENCE). Use it at the
// end of a measured region.
//
//go:noescape
func Stop() uint64

//go:noescape
func cpuidLeaf(leaf, subleaf uint32) (eax, ebx, ecx, edx uint32)

const counterName = "rdtsc"

// oneCounter reports whether the kernel keeps time with the TSC (Linux's
// current clocksource is "tsc"), which it does only where the TSCs of all
// processors agree.
func oneCounter() bool {
	b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
	return err == nil && strings.TrimSpace(string(b)) == "tsc"
}

// invariantTSC reports CPUID.80000007H:EDX[8], the invariant TSC bit.
func invariantTSC() bool {
	maxExt, _, _, _ := cpuidLeaf(0x80000000, 0)
	if maxExt < 0x80000007 {
		return false
	}
	_, _, _, edx := cpuidLeaf(0x80000007, 0)
	return edx&(1<<8) != 0
}

// reportedHz is the frequency the CPU reports for itself, 0 when it does
// not. cpuid/v2 reads CPUID leaves 0x15 and 0x16, then the brand string.
func reportedHz() (hz float64, source string) {
	if cpuid.CPU.Hz > 0 {
		return float64(cpuid.CPU.Hz), "cpuid"
	}
	return 0, ""
}

// calibrate reports whether the counter needs a measurement against the
// monotonic clock.
const calibrate = true
