package bench

import "testing"

// cFloorLoop returns the C floor as a loop over its own ring memory, or nil
// without cgo.
func cFloorLoop(tb testing.TB) loop { return cLoop(tb, (*cFloor).run) }

// cFloorPostCallLoop returns the C floor with its post called out of line
// (floor_run_post_call), or nil without cgo.
func cFloorPostCallLoop(tb testing.TB) loop { return cLoop(tb, (*cFloor).runPostCall) }

// cLoop returns run, one of the C floor's loops, over its own ring memory,
// or nil without cgo.
func cLoop(tb testing.TB, run func(*cFloor, uint64) (uint64, error)) loop {
	if !haveCFloor {
		return nil
	}
	m := newTestMemory(tb)
	f := newTestFloor(tb, m)
	return func(n int) bool {
		_, err := run(f, uint64(n))
		return err == nil
	}
}

// cgoPerOpLoop returns the cgo-per-operation loop over its own ring memory,
// or nil without cgo.
func cgoPerOpLoop(tb testing.TB) loop {
	if !haveCFloor {
		return nil
	}
	m := newTestMemory(tb)
	f := newTestFloor(tb, m)
	comp := newCompleter(m)
	var next uint64
	return func(n int) bool {
		for i := 0; i < n; i++ {
			if f.post(next) != nil {
				return false
			}
			comp.complete()
			id, err := f.poll()
			if err != nil || id != next {
				return false
			}
			next++
		}
		return true
	}
}

// cBaselines returns the C floor and cgo-per-operation loops as baselines
// for runWithBaselines: the benchmarked loop's cost relative to the C floor
// ("xC-floor", target at most 1.2) and how many times faster it is than
// cgo per operation ("x-faster-than-cgo", target at least 3). Without cgo
// there are none.
func cBaselines(tb testing.TB) []baseline {
	if !haveCFloor {
		return nil
	}
	return []baseline{
		{name: "xC-floor", run: cFloorLoop(tb)},
		{name: "x-faster-than-cgo", run: cgoPerOpLoop(tb), faster: true},
	}
}

// BenchmarkPostPollC is the C floor: post RDMA_WRITE_IMM with one SGE and
// BlueFlame, complete, poll, written in C with rdma-core's mlx5dv helpers
// and looping inside C, so one cgo call serves a block of iterations.
func BenchmarkPostPollC(b *testing.B) {
	if !haveCFloor {
		b.Skip("the C floor needs cgo")
	}
	runWithBaselines(b, cFloorLoop(b))
}

// BenchmarkPostPollCgoPerOp is what a Go library that binds the C data path
// pays: the same post and poll as the C floor, one cgo call each, with the
// completer in Go between them.
func BenchmarkPostPollCgoPerOp(b *testing.B) {
	if !haveCFloor {
		b.Skip("the C baselines need cgo")
	}
	runWithBaselines(b, cgoPerOpLoop(b))
}
