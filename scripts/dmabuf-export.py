#!/usr/bin/env python3
"""Exports a buffer as a dma-buf and runs a command that inherits it.

The buffer is GPU memory from CUDA (cuMemAlloc, exported with
cuMemGetHandleForAddressRange, through the driver's libcuda.so.1) or
memory of a memfd exported by /dev/udmabuf. Every byte holds FILL. The
command runs with the descriptor open and MLX5KIT_TEST_DMABUF_FD,
MLX5KIT_TEST_DMABUF_SIZE and MLX5KIT_TEST_DMABUF_FILL naming it, which the
tests TestExternalDMABuf (package sim) and TestCgoProviderExternalDMABuf
(package cgo/emulate) read. The exit status is the command's; 77 when the
source is not there (no GPU, no dma-buf support, no /dev/udmabuf).

Usage: scripts/dmabuf-export.py cuda|udmabuf [--size N] [--fill B] -- command...
"""

import argparse
import ctypes
import fcntl
import os
import struct
import subprocess
import sys

UNAVAILABLE = 77


def unavailable(why):
    """Exits with UNAVAILABLE, saying why."""
    print(f"dmabuf-export: {why}", file=sys.stderr)
    sys.exit(UNAVAILABLE)


def cuda_buffer(size, fill):
    """Returns a dma-buf descriptor of size bytes of GPU memory."""
    try:
        cu = ctypes.CDLL("libcuda.so.1")
    except OSError as e:
        unavailable(f"no CUDA driver: {e}")

    def check(what, rc):
        if rc != 0:
            name = ctypes.c_char_p()
            cu.cuGetErrorName(rc, ctypes.byref(name))
            print(f"dmabuf-export: {what}: {name.value.decode() if name.value else rc}", file=sys.stderr)
            sys.exit(UNAVAILABLE if what in ("cuInit", "cuDeviceGet") else 1)

    check("cuInit", cu.cuInit(0))
    dev = ctypes.c_int()
    check("cuDeviceGet", cu.cuDeviceGet(ctypes.byref(dev), 0))
    supported = ctypes.c_int()
    # CU_DEVICE_ATTRIBUTE_DMA_BUF_SUPPORTED
    check("cuDeviceGetAttribute", cu.cuDeviceGetAttribute(ctypes.byref(supported), 124, dev))
    if not supported.value:
        unavailable("the GPU cannot export dma-bufs")
    context = ctypes.c_void_p()
    check("cuDevicePrimaryCtxRetain", cu.cuDevicePrimaryCtxRetain(ctypes.byref(context), dev))
    check("cuCtxSetCurrent", cu.cuCtxSetCurrent(context))
    ptr = ctypes.c_uint64()
    check("cuMemAlloc", cu.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(size)))
    check("cuMemsetD8", cu.cuMemsetD8_v2(ptr, ctypes.c_ubyte(fill), ctypes.c_size_t(size)))
    check("cuCtxSynchronize", cu.cuCtxSynchronize())
    fd = ctypes.c_int(-1)
    # CU_MEM_RANGE_HANDLE_TYPE_DMA_BUF_FD = 1
    check("cuMemGetHandleForAddressRange",
          cu.cuMemGetHandleForAddressRange(ctypes.byref(fd), ptr, ctypes.c_size_t(size), 1, ctypes.c_ulonglong(0)))
    return fd.value


def udmabuf_buffer(size, fill):
    """Returns a dma-buf descriptor of size bytes of a sealed memfd."""
    try:
        dev = os.open("/dev/udmabuf", os.O_RDWR)
    except OSError as e:
        unavailable(str(e))
    memfd = os.memfd_create("dmabuf-export", os.MFD_ALLOW_SEALING)
    os.ftruncate(memfd, size)
    os.pwrite(memfd, bytes([fill]) * size, 0)
    fcntl.fcntl(memfd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_SHRINK)
    # struct udmabuf_create { u32 memfd; u32 flags; u64 offset; u64 size; },
    # UDMABUF_CREATE = _IOW('u', 0x42, struct udmabuf_create), UDMABUF_FLAGS_CLOEXEC 0.
    fd = fcntl.ioctl(dev, 0x40187542, struct.pack("IIQQ", memfd, 0, 0, size))
    os.close(memfd)
    os.close(dev)
    return fd


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("source", choices=["cuda", "udmabuf"])
    p.add_argument("--size", type=int, default=2 << 20)
    p.add_argument("--fill", type=int, default=0x5A)
    p.add_argument("command", nargs=argparse.REMAINDER)
    a = p.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("no command")
    fd = cuda_buffer(a.size, a.fill) if a.source == "cuda" else udmabuf_buffer(a.size, a.fill)
    os.set_inheritable(fd, True)
    env = dict(os.environ, MLX5KIT_TEST_DMABUF_FD=str(fd), MLX5KIT_TEST_DMABUF_SIZE=str(a.size),
               MLX5KIT_TEST_DMABUF_FILL=str(a.fill))
    sys.exit(subprocess.run(cmd, env=env, pass_fds=(fd,)).returncode)


if __name__ == "__main__":
    main()
