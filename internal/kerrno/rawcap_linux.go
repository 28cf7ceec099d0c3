//go:build linux

package kerrno

import "golang.org/x/sys/unix"

// hasRawCap reads CAP_NET_RAW from the effective set (capget, version 3).
func hasRawCap() bool {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return false
	}
	return data[unix.CAP_NET_RAW/32].Effective&(1<<(unix.CAP_NET_RAW%32)) != 0
}
