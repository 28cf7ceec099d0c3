// Package bench holds the benchmarks of mlx5kit and their baselines in the
// same run: the same post + poll loop in C with rdma-core's mlx5dv helpers
// (the C floor), and through one cgo call per operation (what Go libraries
// that bind the C data path pay).
//
// # The post + poll benchmarks
//
// Each iteration posts an RDMA_WRITE_IMM with one SGE, signaled, copies it
// to the BlueFlame register, lets a minimal completer standing in for the
// device write its requester CQE64, and polls that CQE. All of it runs over
// one anonymous mapping laid out as mlx5dv_init_obj hands out a QP and its
// CQ (queueMemory), so no NIC is needed and every variant touches the same
// memory:
//
//	BenchmarkPostPollC          the loop in C, n iterations in one cgo call
//	BenchmarkPostPollCgoPerOp   one cgo call per post and one per poll
//
// Every benchmark reports ns/op, cycles/op (ticks of the counter of package
// internal/cycles: the TSC on amd64) and allocs/op. Before the first
// benchmark line the test binary prints the counter, its frequency and
// whether it is invariant, as "key: value" lines that benchstat keeps.
//
// The C baselines need cgo; without it they skip and the package still
// builds and tests.
//
// # Running
//
//	go test -run '^$' -bench . -count 10 ./bench | tee new.txt
//	taskset -c 1 go test -run '^$' -bench PostPoll ./bench
//
// MLX5KIT_CPUS chooses the CPUs that pinned benchmarks use (see package
// internal/affinity).
package bench
