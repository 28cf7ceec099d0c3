//go:build !linux

package kerrno

// hasRawCap: no uverbs kernel, no capability to hold.
func hasRawCap() bool { return false }
