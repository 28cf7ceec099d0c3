//go:build !cgo || !linux

package emulate

import "github.com/mlx5kit/mlx5kit/sim"

// Enable returns ErrUnavailable.
func Enable() error { return ErrUnavailable }

// Enabled reports false.
func Enabled() bool { return false }

// Fabric returns nil.
func Fabric() *sim.Fabric { return nil }

// SysfsPath returns "".
func SysfsPath() string { return "" }
