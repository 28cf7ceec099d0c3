//go:build cgo && linux

package emulate

/*
#include "uverbs_abi.h"
*/
import "C"

import (
	"encoding/binary"
	"fmt"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// envDebug set to "1" makes the emulated kernel write a line to standard
// error for each command it refuses, naming the command and the errno.
const envDebug = "MLX5KIT_EMULATE_DEBUG"

var debugOn = os.Getenv(envDebug) == "1"

// commandName names the ioctl method or write command at arg, for the
// debug log.
func commandName(ioctl bool, arg uintptr) string {
	if ioctl {
		var hdr [C.mk_ioctl_hdr_size]byte
		if copyIn(hdr[:], arg) != 0 {
			return "ioctl (unreadable header)"
		}
		ne := binary.NativeEndian
		key := methodKey{ne.Uint16(hdr[C.mk_ioctl_hdr_off_object:]), ne.Uint16(hdr[C.mk_ioctl_hdr_off_method:])}
		if m := ioctlMethods[key]; m != nil {
			return "ioctl " + m.name
		}
		return fmt.Sprintf("ioctl object %#x method %#x (not implemented)", key.object, key.method)
	}
	var hdr [4]byte
	if copyIn(hdr[:], arg) != 0 {
		return "write (unreadable header)"
	}
	command := binary.NativeEndian.Uint32(hdr[:])
	index := command & C.IB_USER_VERBS_CMD_COMMAND_MASK
	table := writeCmds
	prefix := "write "
	if command&C.IB_USER_VERBS_CMD_FLAG_EXTENDED != 0 {
		table, prefix = writeExCmds, "write extended "
	}
	if c := table[index]; c != nil {
		return prefix + c.name
	}
	return fmt.Sprintf("%scommand %d (not implemented)", prefix, index)
}

// logRefusal writes the debug line for a refused command.
func logRefusal(ioctl bool, arg uintptr, en syscall.Errno) {
	if !debugOn || en == 0 {
		return
	}
	fmt.Fprintf(os.Stderr, "mlx5kit emulate: %s: %s (%s)\n", commandName(ioctl, arg), unix.ErrnoName(en), en.Error())
}
