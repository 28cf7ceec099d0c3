// Package perftool holds what the measuring commands (mlx5kit-perf and
// mlx5kit-pingpong) have in common: the flags that pick a device, a port
// and a peer; opening the device and saying when it is the software HCA;
// one RC end (a queue pair with its own CQ, a registered buffer of two
// areas and the busy-polling waits on it); the TCP side that swaps
// endpoints and keeps the two ends in step; and the latency loop and its
// summary in microseconds.
//
// It owns no table format: each command prints its own columns. It must
// not be imported by the library packages, only by commands and their
// tests.
//
// The waits (Await, Drain, Idle) and Post allocate nothing: they are the
// commands' measured loops.
package perftool
