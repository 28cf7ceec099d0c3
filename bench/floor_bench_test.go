package bench

import "testing"

// BenchmarkPostPollC is the C floor: post RDMA_WRITE_IMM with one SGE and
// BlueFlame, complete, poll, written in C with rdma-core's mlx5dv helpers
// and looping inside C, so one cgo call serves all b.N iterations.
func BenchmarkPostPollC(b *testing.B) {
	m := newTestMemory(b)
	f := newTestFloor(b, m)
	mt := startMeter(b)
	sum, err := f.run(uint64(b.N))
	mt.stop()
	if err != nil {
		b.Fatal(err)
	}
	if want := uint64(b.N) * uint64(b.N-1) / 2; sum != want {
		b.Fatalf("wr_id sum %d, want %d", sum, want)
	}
}

// BenchmarkPostPollCgoPerOp is what a Go library that binds the C data path
// pays: the same post and poll as the C floor, one cgo call each, with the
// completer in Go between them.
func BenchmarkPostPollCgoPerOp(b *testing.B) {
	m := newTestMemory(b)
	f := newTestFloor(b, m)
	comp := newCompleter(m)
	mt := startMeter(b)
	for i := 0; i < b.N; i++ {
		if err := f.post(uint64(i)); err != nil {
			b.Fatal(err)
		}
		comp.complete()
		id, err := f.poll()
		if err != nil || id != uint64(i) {
			b.Fatalf("poll %d: wr_id %d, %v", i, id, err)
		}
	}
	mt.stop()
}
