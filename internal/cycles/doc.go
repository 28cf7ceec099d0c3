// Package cycles reads the CPU's cycle counter and converts its ticks to
// time, for the benchmarks of mlx5kit.
//
// # Counters
//
//	amd64   the time-stamp counter: RDTSC, and RDTSCP where the CPU has it
//	arm64   the generic timer's virtual count, CNTVCT_EL0
//	others  nanoseconds of the monotonic clock
//
// Now reads the counter with no ordering; Start and Stop bracket a measured
// region the way Intel's benchmarking note recommends (LFENCE before RDTSC at
// the start, RDTSCP followed by LFENCE at the end), so that the work being
// measured cannot drift outside the pair.
//
// # Frequency
//
// Frequency reports how many counter ticks make a second and where that
// figure comes from: the CPU's own report through
// github.com/klauspost/cpuid/v2 when it has one and a short measurement
// agrees with it, otherwise a calibration against the monotonic clock (on
// arm64 the counter frequency register CNTFRQ_EL0, measured only where it
// reads 0). It also reports whether
// the counter is invariant, that is whether it ticks at a constant rate in
// every power state (CPUID leaf 0x80000007, EDX bit 8, on amd64). Ticks of a
// counter that is not invariant are not cycles of a fixed clock, and the
// benchmarks say so in their output.
package cycles
