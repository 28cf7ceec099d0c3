// Package bench holds the benchmarks of mlx5kit and their baselines in the
// same run: the same post + poll loop in C with rdma-core's mlx5dv helpers
// (the C floor), and through one cgo call per operation (what Go libraries
// that bind the C data path pay). docs/benchmarks.md has the results and
// how to read them.
//
// # Post + poll over plain memory
//
// Each iteration posts an RDMA_WRITE_IMM with one SGE, signaled, copies it
// to the BlueFlame register, lets a minimal completer standing in for the
// device write its requester CQE64, and polls that CQE. All of it runs over
// one anonymous mapping laid out as mlx5dv_init_obj hands out a QP and its
// CQ, so no NIC is needed and every variant touches the same memory:
//
//	BenchmarkPostPollC          the loop in C, a block of iterations per cgo call
//	BenchmarkPostPollCgoPerOp   one cgo call per post and one per poll
//	BenchmarkPostPoll           wqebuilder + blueflame + monocq
//	BenchmarkPostPollHandWritten the WQE written by hand, blueflame, monocq
//	BenchmarkPostPollSplit      builder and poller costs placed
//	BenchmarkPollDispatch       monocq's inlined poll against a hand-written
//	                            loop and an interface callback, per CQE
//
// The ratios (xC-floor, x-faster-than-cgo, x-hand-written, ...) compare the
// fastest of many interleaved blocks of 1000 iterations, which repeat to
// about 1% on a busy machine where ns/op does not.
//
// # Ping-pong and throughput
//
// BenchmarkPingpong measures round trips at queue depth 1 (RC
// RDMA_WRITE_IMM, RC SEND, RC RDMA_READ, DC RDMA_WRITE_IMM, UD SEND; 8 B to
// 4 KiB) with p50, p99 and p99.9 and the cycles spent in posts and polls;
// BenchmarkThroughput streams RC RDMA_WRITEs at depth 64 with batched
// doorbells and selective signaling. Both run on the first mlx5 device when
// one opens and on the software HCA otherwise; the "provider:" line of the
// output says which.
//
// # Output and environment
//
// Every benchmark reports ns/op, cycles/op (ticks of the counter of package
// internal/cycles: the TSC on amd64) and allocs/op. Before the first
// benchmark line the test binary prints the counter, whether it is
// invariant and its frequency.
//
//	MLX5KIT_PROVIDER   mlx5 (require hardware) or sim
//	MLX5KIT_DEVICE     the mlx5 device to open (default: the first)
//	MLX5KIT_CPUS       pin the benchmark goroutine to the first CPU listed
//	MLX5KIT_HIST_DIR   write each ping-pong's histogram there (text, SVG)
//
// The C baselines need cgo; without it they skip and the package still
// builds and tests.
package bench
