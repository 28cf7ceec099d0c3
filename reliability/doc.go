// Package reliability holds the tests that prove the promises of
// docs/reliability.md across packages: a soak of random operations on RC,
// DC and UD over the software HCA with injected faults, checked against a
// reference model of completions and memory; misuse of the API (closed,
// unconnected and errored queue pairs, overfilled rings, oversized WQEs,
// SGEs outside their region, double Close, use after Close, every method
// of a zero value); random sequences of public calls across the layers,
// channels and Notifiers included, with closes from other goroutines and
// a check that no goroutine outlives them; completion
// anomalies (CQ overrun, unknown QPN, unknown syndrome); guard pages around
// the rings; and the threading model under the race detector.
//
// The package has no API: everything is in its tests.
//
// # Environment
//
// MLX5KIT_SOAK sets the size of the soak: "full" runs 1,000,000 send work
// requests (make soak), a number runs that many; unset, go test runs 60,000
// (6,000 with -short). MLX5KIT_SOAK_SEED picks the seed (default 1); the
// soak prints it with its counts so that a failure can be replayed.
//
// MLX5KIT_APISEQ_SEED picks the seed of TestAPISequenceRandom (default 1),
// MLX5KIT_APISEQ_PROGRAM runs the one program it names in hex (as a
// failure logs it), and MLX5KIT_APISEQ_TRACE=1 logs each call of a
// program with its error.
package reliability
