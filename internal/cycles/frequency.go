package cycles

import (
	"fmt"
	"math"
	"runtime"
	"sort"
	"sync"
	"time"
)

// Info describes the counter that Now, Start and Stop read.
type Info struct {
	// Counter names the instruction or register read: "rdtsc",
	// "cntvct_el0" or "monotonic-ns".
	Counter string
	// Hz is the number of counter ticks per second.
	Hz float64
	// Source says where Hz comes from: "cpuid" (the CPU's own report,
	// confirmed by a measurement), "calibrated" (measured against the
	// monotonic clock), "cntfrq_el0" or "monotonic clock".
	Source string
	// ReportedHz is what the CPU reported about itself, 0 if nothing. It
	// differs from Hz when a measurement contradicted the report.
	ReportedHz float64
	// Invariant reports whether the counter ticks at a constant rate in
	// every power state, so that ticks convert to time with one factor.
	Invariant bool
}

// String renders the info on one line, for benchmark logs.
func (i Info) String() string {
	s := fmt.Sprintf("counter=%s freq=%.4gGHz source=%s invariant=%t", i.Counter, i.Hz/1e9, i.Source, i.Invariant)
	if i.ReportedHz != 0 && i.ReportedHz != i.Hz {
		s += fmt.Sprintf(" (cpu reported %.4gGHz)", i.ReportedHz/1e9)
	}
	return s
}

// Nanoseconds converts a number of ticks to nanoseconds.
func (i Info) Nanoseconds(ticks float64) float64 { return ticks * 1e9 / i.Hz }

// Ticks converts a duration to a number of counter ticks.
func (i Info) Ticks(d time.Duration) float64 { return d.Seconds() * i.Hz }

// agreement is the largest relative difference between the frequency the
// CPU reports and a measurement for the report to be used. Leaf 0x16 of
// CPUID gives the base frequency, which is the TSC frequency on most but not
// all processors.
const agreement = 0.02

var (
	infoOnce sync.Once
	info     Info
)

// Synchronized reports, without measuring anything, whether readings of
// the counter on different processors can be compared: it ticks at a
// constant rate in every power state and all processors' counters agree.
// On amd64 that is the invariant-TSC flag and a kernel that keeps time
// with the TSC (Linux clocksource "tsc", which the kernel gives up where
// the processors' counters disagree); the arm64 generic timer and the
// monotonic clock are one counter for all.
func Synchronized() bool { return synchronized() }

var synchronized = sync.OnceValue(func() bool { return invariantTSC() && oneCounter() })

// Frequency returns the counter description. The first call may take about
// 30 ms to measure the frequency; later calls return the same value.
func Frequency() Info {
	infoOnce.Do(func() { info = detect() })
	return info
}

func detect() Info {
	reported, source := reportedHz()
	return choose(reported, source, calibrate, func() float64 { return Calibrate(10*time.Millisecond, 3) })
}

// choose returns the counter description for the frequency reported by
// source (0 if none) and the one measure returns. Without check the
// report is used as it is, unless there is none (CNTFRQ_EL0 left 0 by the
// firmware): then, as where the report and the measurement disagree, the
// measurement is used.
func choose(reported float64, source string, check bool, measure func() float64) Info {
	i := Info{Counter: counterName, Invariant: invariantTSC(), ReportedHz: reported}
	if !check && reported > 0 {
		i.Hz, i.Source = reported, source
		return i
	}
	measured := measure()
	if reported > 0 && math.Abs(reported-measured)/measured <= agreement {
		i.Hz, i.Source = reported, source
		return i
	}
	i.Hz, i.Source = measured, "calibrated"
	return i
}

// Calibrate measures the counter against the monotonic clock: rounds
// windows of length window each, returning the median rate in ticks per
// second. The calling goroutine stays on one OS thread while it measures.
func Calibrate(window time.Duration, rounds int) float64 {
	if rounds < 1 {
		rounds = 1
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	rates := make([]float64, rounds)
	for r := range rates {
		t0 := time.Now()
		c0 := Start()
		for time.Since(t0) < window {
		}
		c1 := Stop()
		elapsed := time.Since(t0)
		rates[r] = float64(c1-c0) / elapsed.Seconds()
	}
	sort.Float64s(rates)
	return rates[len(rates)/2]
}
