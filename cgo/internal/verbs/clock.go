//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"fmt"
	"syscall"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// ClockInfo returns a snapshot of the device clock that CQE timestamps
// count in, from the clock info page the kernel maps into the process and
// updates (mlx5dv_get_clock_info: a lock-free read that retries while the
// kernel's update flag is set in the page's sign word, or the sign changed
// under the read). A kernel or device without the page gives EINVAL,
// reported as ctx.ErrNotSupported; EBUSY means the kernel was updating the
// page for the whole read.
func (d *Device) ClockInfo() (ctx.ClockInfo, error) {
	const verb = "mlx5dv_get_clock_info"
	if err := d.use(verb); err != nil {
		return ctx.ClockInfo{}, err
	}
	defer d.mu.Unlock()
	var ci C.struct_mlx5dv_clock_info
	ret := int(C.mlx5dv_get_clock_info(d.c, &ci))
	switch {
	case ret == int(syscall.EINVAL) || ret == int(syscall.EOPNOTSUPP):
		return ctx.ClockInfo{}, &VerbError{Verb: verb, Detail: fmt.Sprintf("%q: no clock info page", d.name),
			Errno: syscall.Errno(ret), Sentinel: ctx.ErrNotSupported}
	case ret != 0:
		return ctx.ClockInfo{}, retError(verb, fmt.Sprintf("%q", d.name), ret, nil)
	}
	return clockInfoOf(&ci), nil
}

// clockInfoOf converts struct mlx5dv_clock_info.
func clockInfoOf(ci *C.struct_mlx5dv_clock_info) ctx.ClockInfo {
	return ctx.ClockInfo{
		Nanoseconds: uint64(ci.nsec),
		LastCycles:  uint64(ci.last_cycles),
		Frac:        uint64(ci.frac),
		Mult:        uint32(ci.mult),
		Shift:       uint32(ci.shift),
		Mask:        uint64(ci.mask),
	}
}
