// Package bench holds the ping-pong and throughput benchmarks of mlx5kit and
// their baselines (the same loop in C with rdma-core's mlx5dv helpers, and
// through one cgo call per operation).
//
// It is being built; until this comment changes the package holds no
// benchmarks.
package bench
