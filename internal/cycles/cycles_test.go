package cycles

import (
	"math"
	"os"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestCounterAdvances(t *testing.T) {
	a := Start()
	time.Sleep(2 * time.Millisecond)
	b := Stop()
	require.Greater(t, b, a, "the counter must advance across a sleep")
	c := Now()
	require.GreaterOrEqual(t, c, b)
}

func TestFrequencyMatchesMonotonicClock(t *testing.T) {
	f := Frequency()
	t.Log(f)
	require.Equal(t, counterName, f.Counter)
	require.Greater(t, f.Hz, 1e6, "a counter slower than 1 MHz cannot time a post")
	require.Less(t, f.Hz, 1e11)
	require.NotEmpty(t, f.Source)

	// Time a 50 ms window with the counter and with the clock: they must
	// agree within 5% (the window absorbs scheduling noise on a busy
	// machine; the check is about the scale factor, not about speed).
	t0 := time.Now()
	c0 := Start()
	time.Sleep(50 * time.Millisecond)
	c1 := Stop()
	wall := time.Since(t0)
	got := f.Nanoseconds(float64(c1 - c0))
	require.InEpsilon(t, float64(wall.Nanoseconds()), got, 0.05)
}

func TestConversionsInvert(t *testing.T) {
	i := Info{Hz: 2.5e9}
	require.InDelta(t, 2500.0, i.Ticks(time.Microsecond), 1e-6)
	require.InDelta(t, 1000.0, i.Nanoseconds(2500), 1e-9)
	require.Contains(t, i.String(), "freq=2.5GHz")
}

func TestCalibrateIsStable(t *testing.T) {
	a := Calibrate(5*time.Millisecond, 3)
	b := Calibrate(5*time.Millisecond, 3)
	require.False(t, math.IsNaN(a) || math.IsInf(a, 0))
	require.InEpsilon(t, a, b, 0.05, "two calibrations of the same counter differ")
}

func TestNowDoesNotAllocate(t *testing.T) {
	var sink uint64
	n := testing.AllocsPerRun(100, func() { sink += Now() + Start() + Stop() })
	require.Zero(t, n)
	_ = sink
}

func BenchmarkNow(b *testing.B) {
	var s uint64
	for b.Loop() {
		s += Now()
	}
	_ = s
}

func BenchmarkStartStop(b *testing.B) {
	var s uint64
	for b.Loop() {
		s += Stop() - Start()
	}
	_ = s
}

// TestSynchronizedNeedsInvariant: a counter whose processors' readings can
// be compared ticks at a constant rate (what Frequency reports), and where
// the kernel keeps time with another clocksource the TSC is not trusted.
func TestSynchronizedNeedsInvariant(t *testing.T) {
	if Synchronized() {
		require.True(t, Frequency().Invariant)
	}
	if runtime.GOARCH == "amd64" {
		b, err := os.ReadFile("/sys/devices/system/clocksource/clocksource0/current_clocksource")
		if err != nil || strings.TrimSpace(string(b)) != "tsc" {
			require.False(t, Synchronized(), "clocksource %q", b)
		}
	}
}

// TestChooseMeasuresWithoutReport: a counter whose frequency register
// reads 0 (CNTFRQ_EL0 left unset by the firmware) is measured, not given a
// frequency of 0 that turns every conversion into an infinity.
func TestChooseMeasuresWithoutReport(t *testing.T) {
	measured := 0
	measure := func() float64 { measured++; return 54e6 }
	i := choose(0, "cntfrq_el0", false, measure)
	require.Equal(t, 1, measured)
	require.Equal(t, 54e6, i.Hz)
	require.Equal(t, "calibrated", i.Source)
	require.Zero(t, i.ReportedHz)
	require.InDelta(t, 1000.0, i.Nanoseconds(54), 1e-9)

	i = choose(25e6, "cntfrq_el0", false, measure)
	require.Equal(t, 1, measured, "a frequency register that is set is not measured")
	require.Equal(t, 25e6, i.Hz)
	require.Equal(t, "cntfrq_el0", i.Source)
}
