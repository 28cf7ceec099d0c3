//go:build cgo && mlx5kit_lfence

package bench

// With the tag mlx5kit_lfence the Go poller issues rdma-core's lfence after
// a CQE's ownership check, and so does the C floor.

// #cgo CFLAGS: -DFLOOR_LFENCE
import "C"
