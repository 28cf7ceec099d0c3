//go:build cgo && linux

#include "_cgo_export.h"

/* Runs when the library is loaded, after the Go runtime's own constructor
 * has started it: the call waits for the runtime's initialisation. */
__attribute__((constructor)) static void mk_emu_preload_start(void)
{
	(void)mk_emu_preload_wait();
}
