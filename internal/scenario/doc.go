// Package scenario holds the end-to-end scenarios of mlx5kit, written once
// and run on whatever device a *ctx.Context was opened on: the software HCA
// in every `go test` run, and the first mlx5 device in the hardware suite
// (`make hwtest`, tests named TestHardware…).
//
// Each scenario builds what it needs on the one Context it is given (a
// protection domain, two registered buffers, two completion queues, two
// queue pairs connected to each other in loopback), runs a few operations
// through the public data plane (packages rc, dc, ud over wqebuilder and
// monocq), checks every payload byte for byte and every completion field
// that the operation defines, and closes what it created. A scenario returns
// nil when everything was as expected, ErrSkip when the device lacks a
// feature the scenario needs (DC on a device without it), and otherwise an
// error that says what differed.
//
// # Addressing
//
// On InfiniBand the two queue pairs reach each other by the port's LID. On
// RoCE (Ethernet link layer) they need a GID: Options.GID names the entry,
// and left unset the queue pairs choose one (ctx.ChooseGID: a RoCE v2 GID,
// IPv4-mapped first). FromEnv reads MLX5KIT_GID_INDEX for it.
//
// # Progress
//
// On hardware and on a software HCA in engine mode the device makes progress
// by itself. A software HCA in manual mode does nothing until it is stepped:
// Options.Progress, when set, is called each time a scenario waits, and a
// test passes the Fabric's RunUntilIdle there.
package scenario
