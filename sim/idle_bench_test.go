package sim

import "testing"

// BenchmarkIdleEmpty measures one Context.Idle with nothing to do, on a
// Fabric with an RC pair (the cost of every empty poll of a polling loop,
// and how long a message waits on average for the round that reads it).
func BenchmarkIdleEmpty(b *testing.B) {
	e, _, _ := idlePair(b)
	holdEngine(b, e.f)
	b.ReportAllocs()
	for b.Loop() {
		e.c.Idle()
	}
}
