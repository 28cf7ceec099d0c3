// Package dvcheck exposes, for tests, what rdma-core's infiniband/mlx5dv.h
// says about the formats mlx5kit speaks: the offsetof and sizeof of every
// struct the kit uses, the values of the enums, and the results of
// mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg and mlx5dv_set_dgram_seg. Its
// tests check package internal/prm against them: offsets and constants one
// by one, and the prm segment encoders byte for byte over random inputs.
//
// Everything is compiled from the header alone (the set functions are
// static inline), so no rdma-core library is linked. The package needs cgo
// and the header (libibverbs-dev on Debian and Ubuntu, rdma-core-devel on
// Fedora); with CGO_ENABLED=0 it is this file only and has no API. Cgo is
// not allowed in _test.go files, which is why these functions live in a
// package of their own.
package dvcheck
