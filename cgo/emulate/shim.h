/*
 * The interposed C library entry points of the emulated uverbs kernel.
 * shim.c defines open, openat, stat, ioctl, write, mmap, munmap, close and
 * socket (and their 64-bit-offset twins and the fortified __open_2 and
 * __openat_2), dup2, dup3, close_range and closefrom; each forwards to the
 * C library unless the emulation is on and the call concerns an emulated
 * uverbs device node, descriptor or mapping. The Go side (emulate.go)
 * decides.
 */
#ifndef MLX5KIT_EMULATE_SHIM_H
#define MLX5KIT_EMULATE_SHIM_H

#include <stdint.h>
#include <sys/types.h>

/* Descriptors the emulation can own: numbers below this bound. */
#ifndef MK_EMU_MAX_FDS /* a build may lower it (CGO_CFLAGS=-DMK_EMU_MAX_FDS=4096) */
#define MK_EMU_MAX_FDS 65536
#endif

/* What an emulated descriptor is (mk_emu_fd_kind). */
enum {
	MK_EMU_FD_NONE = 0,
	MK_EMU_FD_UVERBS = 1, /* an open /dev/infiniband/uverbsN */
	MK_EMU_FD_EVENT = 2,  /* an event file (async events) */
	/* or'ed in a forked child: a descriptor of the parent's, which the
	 * child closes without calling into Go */
	MK_EMU_FD_INHERITED = 0x80,
};

/* The directory prefix of the device nodes the emulation answers for. */
#define MK_EMU_DEV_PREFIX "/dev/infiniband/"

void mk_emu_set_on(int on);
int mk_emu_is_on(void);
void mk_emu_mark_fd(int fd, int kind);
void mk_emu_protect_fd(int fd);
void mk_emu_hide_fd(int fd, int hide);
int mk_emu_fd_kind(int fd);
void mk_emu_map_add(uintptr_t addr);
void mk_emu_map_del(uintptr_t addr);

#endif
