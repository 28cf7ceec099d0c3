//go:build cgo && linux

/*
 * The interposer: definitions of C library functions that the dynamic
 * linker prefers to the C library's own, in a Go executable (which exports
 * them) and in the preload library. Every one forwards to the next
 * definition (dlsym RTLD_NEXT, resolved once) unless the emulation is on
 * and the call names an emulated device node, descriptor or mapping; then
 * the Go side (the mk_emu_go_* exports) answers as the kernel would. With
 * the emulation off a call costs one predictable branch.
 */
#undef _FORTIFY_SOURCE
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>
#include <linux/netlink.h>

#include "shim.h"
#include "_cgo_export.h"

static int mk_emu_on;
static unsigned char mk_emu_fds[MK_EMU_MAX_FDS];

void mk_emu_set_on(int on) { __atomic_store_n(&mk_emu_on, on, __ATOMIC_RELEASE); }
int mk_emu_is_on(void) { return __atomic_load_n(&mk_emu_on, __ATOMIC_ACQUIRE); }

void mk_emu_mark_fd(int fd, int kind)
{
	if (fd >= 0 && fd < MK_EMU_MAX_FDS)
		__atomic_store_n(&mk_emu_fds[fd], (unsigned char)kind, __ATOMIC_RELEASE);
}

int mk_emu_fd_kind(int fd)
{
	if (fd < 0 || fd >= MK_EMU_MAX_FDS)
		return MK_EMU_FD_NONE;
	return __atomic_load_n(&mk_emu_fds[fd], __ATOMIC_ACQUIRE);
}

static inline int emu_on(void) { return __builtin_expect(__atomic_load_n(&mk_emu_on, __ATOMIC_RELAXED), 0); }

static inline int emu_fd(int fd)
{
	return emu_on() && fd >= 0 && fd < MK_EMU_MAX_FDS &&
	       __atomic_load_n(&mk_emu_fds[fd], __ATOMIC_ACQUIRE) != MK_EMU_FD_NONE;
}

/* The name is the program's and may not be readable: it is read as the
 * kernel reads it, so that a bad address gets the C library's EFAULT
 * rather than a fault here. A name shorter than the prefix never matches. */
static inline int emu_path(const char *path)
{
	char head[sizeof(MK_EMU_DEV_PREFIX) - 1];
	struct iovec local = { head, sizeof(head) }, remote = { (void *)path, sizeof(head) };

	if (!emu_on() || path == NULL)
		return 0;
	if (process_vm_readv(getpid(), &local, 1, &remote, 1, 0) != (ssize_t)sizeof(head))
		return 0;
	return memcmp(head, MK_EMU_DEV_PREFIX, sizeof(head)) == 0;
}

/* The next definitions, resolved on first use. */
#define REAL(name) real_##name
#define DECLARE_REAL(ret, name, args) static ret(*real_##name) args
DECLARE_REAL(int, open, (const char *, int, ...));
DECLARE_REAL(int, open64, (const char *, int, ...));
DECLARE_REAL(int, openat, (int, const char *, int, ...));
DECLARE_REAL(int, openat64, (int, const char *, int, ...));
DECLARE_REAL(int, stat, (const char *, struct stat *));
DECLARE_REAL(int, stat64, (const char *, struct stat64 *));
DECLARE_REAL(int, ioctl, (int, unsigned long, ...));
DECLARE_REAL(ssize_t, write, (int, const void *, size_t));
DECLARE_REAL(void *, mmap, (void *, size_t, int, int, int, off_t));
DECLARE_REAL(void *, mmap64, (void *, size_t, int, int, int, off64_t));
DECLARE_REAL(int, munmap, (void *, size_t));
DECLARE_REAL(int, close, (int));
DECLARE_REAL(int, socket, (int, int, int));
DECLARE_REAL(int, __open_2, (const char *, int));
DECLARE_REAL(int, __open64_2, (const char *, int));
DECLARE_REAL(int, __openat_2, (int, const char *, int));
DECLARE_REAL(int, __openat64_2, (int, const char *, int));
DECLARE_REAL(int, dup2, (int, int));
DECLARE_REAL(int, dup3, (int, int, int));
#if __GLIBC_PREREQ(2, 34)
DECLARE_REAL(int, close_range, (unsigned int, unsigned int, int));
DECLARE_REAL(void, closefrom, (int));
#endif

#define RESOLVE(name)                                                          \
	do {                                                                   \
		if (__builtin_expect(real_##name == NULL, 0))                  \
			*(void **)&real_##name = dlsym(RTLD_NEXT, #name);      \
	} while (0)

static char emu_maps_lock;
static int emu_maps_end, emu_maps_overflow;

/* The write ends of the event files' pipes and the clock info page's
 * memory file, which the model holds under numbers the program never sees
 * (mk_emu_hide_fd): closefrom and close_range leave them open.
 * emu_hidden_n counts them. */
static unsigned char emu_hidden[MK_EMU_MAX_FDS];
static int emu_hidden_n;

void mk_emu_hide_fd(int fd, int hide)
{
	unsigned char was;

	if (fd < 0 || fd >= MK_EMU_MAX_FDS)
		return;
	was = __atomic_exchange_n(&emu_hidden[fd], (unsigned char)(hide != 0), __ATOMIC_ACQ_REL);
	if (was != (hide != 0))
		__atomic_add_fetch(&emu_hidden_n, hide ? 1 : -1, __ATOMIC_ACQ_REL);
}

/*
 * The process the tables describe: set when the library loads and in a
 * forked child. A child made with vfork (or clone with CLONE_VM) has
 * another id and shares the parent's memory, the tables and the Go side's
 * kernel among it, with a copy of its descriptor table: its close (dup2,
 * close_range, closefrom) of a copy of an emulated descriptor closes that
 * copy and changes nothing of the parent's, as the kernel drops only the
 * child's reference.
 */
static pid_t emu_pid;

static inline int emu_foreign(void) { return getpid() != __atomic_load_n(&emu_pid, __ATOMIC_RELAXED); }

/*
 * A forked child has none of the Go runtime's threads: a call into Go that
 * waits for one (closing a context stops the model's engine) never
 * returns. The child closes the descriptors it inherits (and unmaps the
 * mappings) without calling into Go: they are its plain descriptors of the
 * backing device and pipes, and the parent's context stays the parent's.
 */
static void mk_emu_atfork_child(void)
{
	int fd;

	__atomic_store_n(&emu_pid, getpid(), __ATOMIC_RELAXED);
	for (fd = 0; fd < MK_EMU_MAX_FDS; fd++)
		if (mk_emu_fds[fd] != MK_EMU_FD_NONE)
			mk_emu_fds[fd] |= MK_EMU_FD_INHERITED;
	emu_maps_end = 0;
	emu_maps_overflow = 0;
	emu_maps_lock = 0;
	/* The child's copies of the write ends are its own to close. */
	if (emu_hidden_n != 0) {
		memset(emu_hidden, 0, sizeof(emu_hidden));
		emu_hidden_n = 0;
	}
}

__attribute__((constructor)) static void mk_emu_resolve(void)
{
	__atomic_store_n(&emu_pid, getpid(), __ATOMIC_RELAXED);
	pthread_atfork(NULL, NULL, mk_emu_atfork_child);
	RESOLVE(open);
	RESOLVE(open64);
	RESOLVE(openat);
	RESOLVE(openat64);
	RESOLVE(stat);
	RESOLVE(stat64);
	RESOLVE(ioctl);
	RESOLVE(write);
	RESOLVE(mmap);
	RESOLVE(mmap64);
	RESOLVE(munmap);
	RESOLVE(close);
	RESOLVE(socket);
}

/* ret < 0 is -errno. */
static inline long set_errno(long ret)
{
	if (ret < 0) {
		errno = (int)-ret;
		return -1;
	}
	return ret;
}

static inline mode_t open_mode(int flags, va_list ap)
{
	if (flags & (O_CREAT | __O_TMPFILE))
		return (mode_t)va_arg(ap, int);
	return 0;
}

int open(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	if (emu_path(path))
		return (int)set_errno(mk_emu_go_open((char *)path, flags));
	RESOLVE(open);
	return REAL(open)(path, flags, mode);
}

int open64(const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	if (emu_path(path))
		return (int)set_errno(mk_emu_go_open((char *)path, flags));
	RESOLVE(open64);
	return REAL(open64)(path, flags, mode);
}

/* Only absolute names reach the emulation: a device node is never opened
 * relative to a directory descriptor. */
int openat(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	if (emu_path(path))
		return (int)set_errno(mk_emu_go_open((char *)path, flags));
	RESOLVE(openat);
	return REAL(openat)(dirfd, path, flags, mode);
}

int openat64(int dirfd, const char *path, int flags, ...)
{
	va_list ap;
	mode_t mode;

	va_start(ap, flags);
	mode = open_mode(flags, ap);
	va_end(ap);
	if (emu_path(path))
		return (int)set_errno(mk_emu_go_open((char *)path, flags));
	RESOLVE(openat64);
	return REAL(openat64)(dirfd, path, flags, mode);
}

/* The -D_FORTIFY_SOURCE entry points a program calls for an open whose
 * flags the compiler does not know (never with O_CREAT or O_TMPFILE). */
int __open_2(const char *path, int flags)
{
	if (emu_path(path))
		return (int)set_errno(mk_emu_go_open((char *)path, flags));
	RESOLVE(__open_2);
	return REAL(__open_2)(path, flags);
}

int __open64_2(const char *path, int flags)
{
	if (emu_path(path))
		return (int)set_errno(mk_emu_go_open((char *)path, flags));
	RESOLVE(__open64_2);
	return REAL(__open64_2)(path, flags);
}

int __openat_2(int dirfd, const char *path, int flags)
{
	if (emu_path(path))
		return (int)set_errno(mk_emu_go_open((char *)path, flags));
	RESOLVE(__openat_2);
	return REAL(__openat_2)(dirfd, path, flags);
}

int __openat64_2(int dirfd, const char *path, int flags)
{
	if (emu_path(path))
		return (int)set_errno(mk_emu_go_open((char *)path, flags));
	RESOLVE(__openat64_2);
	return REAL(__openat64_2)(dirfd, path, flags);
}

/* A device node that the emulation answers for is described as the
 * character device that backs its descriptors. */
int stat(const char *path, struct stat *st)
{
	if (emu_path(path)) {
		char backing[64];
		long ret = mk_emu_go_lookup((char *)path, backing, sizeof(backing));

		if (ret < 0)
			return (int)set_errno(ret);
		RESOLVE(stat);
		return REAL(stat)(backing, st);
	}
	RESOLVE(stat);
	return REAL(stat)(path, st);
}

int stat64(const char *path, struct stat64 *st)
{
	if (emu_path(path)) {
		char backing[64];
		long ret = mk_emu_go_lookup((char *)path, backing, sizeof(backing));

		if (ret < 0)
			return (int)set_errno(ret);
		RESOLVE(stat64);
		return REAL(stat64)(backing, st);
	}
	RESOLVE(stat64);
	return REAL(stat64)(path, st);
}

/* The requests the kernel's VFS answers for every file before the file's
 * own ioctl sees them (do_vfs_ioctl): on an emulated descriptor they go to
 * the C library too, on the backing file (the pipe of an event file, which
 * has fasync as the kernel's event files do; /dev/null for a uverbs file,
 * without it, as the kernel's uverbs file). */
static inline int vfs_generic_ioctl(unsigned long request)
{
	return request == FIOCLEX || request == FIONCLEX || request == FIONBIO || request == FIOASYNC;
}

int ioctl(int fd, unsigned long request, ...)
{
	va_list ap;
	void *arg;

	va_start(ap, request);
	arg = va_arg(ap, void *);
	va_end(ap);
	if (emu_fd(fd) && !vfs_generic_ioctl(request))
		return (int)set_errno(mk_emu_go_ioctl(fd, request, (uintptr_t)arg));
	RESOLVE(ioctl);
	return REAL(ioctl)(fd, request, arg);
}

ssize_t write(int fd, const void *buf, size_t count)
{
	if (emu_fd(fd))
		return (ssize_t)set_errno(mk_emu_go_write(fd, (uintptr_t)buf, count));
	RESOLVE(write);
	return REAL(write)(fd, buf, count);
}

/*
 * The start addresses of the emulated mappings the Go side knows (it
 * reports each one it makes and each one it forgets: mk_emu_map_add,
 * mk_emu_map_del), so that munmap calls into Go only for a range that
 * holds one. munmap is also called where Go code must not run: by the C
 * library on a thread the Go runtime is starting, from the runtime's
 * system stack (a call into Go there aborts the process: "exitsyscall:
 * syscall frame is no longer valid"). Past MK_EMU_MAX_MAPS live mappings
 * every munmap asks Go, as all did before.
 */
#define MK_EMU_MAX_MAPS 4096
static uintptr_t emu_maps[MK_EMU_MAX_MAPS];
/* emu_maps_end: entries [0, end) may be in use; emu_maps_overflow: a
 * mapping found no free entry (both declared above, with the lock). */

static void emu_maps_acquire(void)
{
	while (__atomic_test_and_set(&emu_maps_lock, __ATOMIC_ACQUIRE))
		;
}

static void emu_maps_release(void) { __atomic_clear(&emu_maps_lock, __ATOMIC_RELEASE); }

void mk_emu_map_add(uintptr_t a)
{
	int i;

	emu_maps_acquire();
	for (i = 0; i < emu_maps_end && emu_maps[i] != 0; i++)
		;
	if (i < MK_EMU_MAX_MAPS) {
		emu_maps[i] = a;
		if (i == emu_maps_end)
			__atomic_store_n(&emu_maps_end, i + 1, __ATOMIC_RELEASE);
	} else {
		__atomic_store_n(&emu_maps_overflow, 1, __ATOMIC_RELEASE);
	}
	emu_maps_release();
}

void mk_emu_map_del(uintptr_t a)
{
	int i;

	emu_maps_acquire();
	for (i = 0; i < emu_maps_end; i++) {
		if (emu_maps[i] == a)
			emu_maps[i] = 0;
	}
	while (emu_maps_end > 0 && emu_maps[emu_maps_end - 1] == 0)
		__atomic_store_n(&emu_maps_end, emu_maps_end - 1, __ATOMIC_RELEASE);
	emu_maps_release();
}

/* emu_maps_hit reports whether a mapping the Go side knows starts in
 * [addr, addr+len), or whether the table overflowed. */
static int emu_maps_hit(uintptr_t addr, size_t len)
{
	int i, hit;

	if (__atomic_load_n(&emu_maps_end, __ATOMIC_ACQUIRE) == 0 &&
	    !__atomic_load_n(&emu_maps_overflow, __ATOMIC_ACQUIRE))
		return 0;
	emu_maps_acquire();
	hit = emu_maps_overflow;
	for (i = 0; i < emu_maps_end && !hit; i++)
		hit = emu_maps[i] != 0 && emu_maps[i] >= addr && emu_maps[i] - addr < len;
	emu_maps_release();
	return hit;
}

static void *emu_mmap(void *addr, size_t len, int prot, int flags, int fd, int64_t off)
{
	uintptr_t out = 0;
	long ret = mk_emu_go_mmap((uintptr_t)addr, len, prot, flags, fd, off, &out);

	if (ret < 0) {
		errno = (int)-ret;
		return MAP_FAILED;
	}
	return (void *)out;
}

/* An anonymous mapping ignores its descriptor, as the kernel's does. */
void *mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
	if (!(flags & MAP_ANONYMOUS) && emu_fd(fd))
		return emu_mmap(addr, len, prot, flags, fd, off);
	RESOLVE(mmap);
	return REAL(mmap)(addr, len, prot, flags, fd, off);
}

void *mmap64(void *addr, size_t len, int prot, int flags, int fd, off64_t off)
{
	if (!(flags & MAP_ANONYMOUS) && emu_fd(fd))
		return emu_mmap(addr, len, prot, flags, fd, off);
	RESOLVE(mmap64);
	return REAL(mmap64)(addr, len, prot, flags, fd, off);
}

int munmap(void *addr, size_t len)
{
	if (emu_on() && emu_maps_hit((uintptr_t)addr, len))
		mk_emu_go_munmap((uintptr_t)addr, len);
	RESOLVE(munmap);
	return REAL(munmap)(addr, len);
}

static inline int emu_inherited(int fd) { return mk_emu_fd_kind(fd) & MK_EMU_FD_INHERITED; }

/* emu_hidden_fd reports whether fd is an event file's write end the model
 * holds: a number the program never opened (the model closes it through
 * the Go runtime's own system calls, not through the C library). */
static inline int emu_hidden_fd(int fd)
{
	return fd >= 0 && fd < MK_EMU_MAX_FDS && __atomic_load_n(&emu_hidden_n, __ATOMIC_ACQUIRE) > 0 &&
	       __atomic_load_n(&emu_hidden[fd], __ATOMIC_ACQUIRE) && !emu_foreign();
}

static int emu_protected_fd(int fd);

int close(int fd)
{
	if (emu_hidden_fd(fd) || emu_protected_fd(fd)) {
		/* As the kernel answers a close of a number not open: a loop
		 * that closes every descriptor above its own leaves the
		 * model's event files and the Go runtime working. */
		errno = EBADF;
		return -1;
	}
	if (emu_fd(fd) && !emu_foreign()) {
		int inherited = emu_inherited(fd);

		mk_emu_mark_fd(fd, MK_EMU_FD_NONE);
		if (!inherited)
			return (int)set_errno(mk_emu_go_close(fd));
	}
	RESOLVE(close);
	return REAL(close)(fd);
}

/* dup2 and dup3 onto an emulated descriptor close its file: the number is
 * then the other file's, which the emulation forgets, as close would. */
static void emu_dup_done(int ret, int oldfd, int newfd)
{
	if (ret >= 0 && oldfd != newfd && emu_fd(newfd) && !emu_foreign()) {
		int inherited = emu_inherited(newfd);

		mk_emu_mark_fd(newfd, MK_EMU_FD_NONE);
		if (!inherited)
			mk_emu_go_forget(newfd);
	}
}

/* emu_dup_make_way readies a dup2 or dup3 onto an event file's hidden
 * write end, a number the program never opened (on a kernel the dup
 * succeeds onto a free number): the model moves its write end to another
 * number, so that the dup replaces a descriptor nothing holds any more and
 * no event reaches the program's file. It returns 1 if it did. */
static int emu_dup_make_way(int oldfd, int newfd)
{
	return oldfd != newfd && emu_hidden_fd(newfd) && mk_emu_go_move_hidden(newfd);
}

/* emu_dup_failed closes the number emu_dup_make_way gave up when the dup
 * failed (a bad oldfd), errno kept: nothing else holds it. */
static void emu_dup_failed(int ret, int made_way, int newfd)
{
	if (ret < 0 && made_way) {
		int saved = errno;

		RESOLVE(close);
		REAL(close)(newfd);
		errno = saved;
	}
}

int dup2(int oldfd, int newfd)
{
	int ret, made_way;

	RESOLVE(dup2);
	made_way = emu_dup_make_way(oldfd, newfd);
	ret = REAL(dup2)(oldfd, newfd);
	emu_dup_failed(ret, made_way, newfd);
	emu_dup_done(ret, oldfd, newfd);
	return ret;
}

int dup3(int oldfd, int newfd, int flags)
{
	int ret, made_way;

	RESOLVE(dup3);
	made_way = emu_dup_make_way(oldfd, newfd);
	ret = REAL(dup3)(oldfd, newfd, flags);
	emu_dup_failed(ret, made_way, newfd);
	emu_dup_done(ret, oldfd, newfd);
	return ret;
}

/* The Go runtime's own descriptors in this process (its poller's epoll
 * and eventfd, the cgroup files it reads): closefrom and close_range leave
 * them open and close refuses them (EBADF, but in a vfork child), or the
 * runtime that runs the emulation stops the process ("netpoll failed") at
 * its next wait. Set once, before main, by mk_emu_protect_fd. */
#define MK_EMU_MAX_PROTECTED 8
static int protected_fds[MK_EMU_MAX_PROTECTED];
static int protected_n;

/* emu_protected_fd reports whether fd is one of the Go runtime's. */
static int emu_protected_fd(int fd)
{
	int i;

	if (!emu_on())
		return 0;
	for (i = 0; i < protected_n; i++)
		if (protected_fds[i] == fd)
			return !emu_foreign();
	return 0;
}

void mk_emu_protect_fd(int fd)
{
	int i, j;

	if (fd < 0 || protected_n == MK_EMU_MAX_PROTECTED)
		return;
	for (i = 0; i < protected_n && protected_fds[i] < fd; i++)
		;
	if (i < protected_n && protected_fds[i] == fd)
		return;
	for (j = protected_n; j > i; j--)
		protected_fds[j] = protected_fds[j - 1];
	protected_fds[i] = fd;
	protected_n++;
}

#if __GLIBC_PREREQ(2, 34)
/* close_range and closefrom close emulated descriptors as close does (the
 * C library's own close is not the interposed one). */
static void emu_close_range(unsigned int first, unsigned int last)
{
	unsigned int fd;
	int saved = errno;

	if (emu_foreign())
		return;
	for (fd = first; fd < MK_EMU_MAX_FDS && fd <= last; fd++) {
		if (emu_fd((int)fd)) {
			int inherited = emu_inherited((int)fd);

			mk_emu_mark_fd((int)fd, MK_EMU_FD_NONE);
			if (!inherited)
				(void)mk_emu_go_close((int)fd);
		}
	}
	errno = saved;
}

/* next_kept finds the lowest descriptor in [from, last] that closefrom and
 * close_range leave open: a protected one or a hidden event write end. */
static int next_kept(unsigned int from, unsigned int last, unsigned int *kept)
{
	unsigned int fd, bound = last;
	int i, found = 0;

	for (i = 0; i < protected_n; i++) {
		unsigned int p = (unsigned int)protected_fds[i];

		if (p >= from && p <= last) {
			bound = p;
			found = 1;
			break;
		}
	}
	if (__atomic_load_n(&emu_hidden_n, __ATOMIC_ACQUIRE) > 0) {
		for (fd = from; fd < MK_EMU_MAX_FDS && fd <= bound; fd++) {
			if (__atomic_load_n(&emu_hidden[fd], __ATOMIC_ACQUIRE)) {
				*kept = fd;
				return 1;
			}
		}
	}
	*kept = bound;
	return found;
}

/* close_range_kept closes [first, last] but the descriptors next_kept
 * finds, in the pieces between them; it returns the first failure's -1
 * (errno set). */
static int close_range_kept(unsigned int first, unsigned int last, int flags)
{
	int ret = 0, saved = 0;
	unsigned int p;

	RESOLVE(close_range);
	while (first <= last && next_kept(first, last, &p)) {
		if (p > first && REAL(close_range)(first, p - 1, flags) < 0 && ret == 0) {
			ret = -1;
			saved = errno;
		}
		if (p == last)
			return ret < 0 ? (errno = saved, -1) : 0;
		first = p + 1;
	}
	if (first <= last && REAL(close_range)(first, last, flags) < 0 && ret == 0) {
		ret = -1;
		saved = errno;
	}
	return ret < 0 ? (errno = saved, -1) : 0;
}

/* The arguments are checked first, as the kernel checks them: a call it
 * refuses closes nothing, emulated descriptors included (and a range
 * whose first descriptor is above its last must fail, not be skipped by
 * the piecewise close below). */
int close_range(unsigned int first, unsigned int last, int flags)
{
	if (first > last || (flags & ~(CLOSE_RANGE_UNSHARE | CLOSE_RANGE_CLOEXEC))) {
		errno = EINVAL;
		return -1;
	}
	if (emu_on() && !(flags & CLOSE_RANGE_CLOEXEC))
		emu_close_range(first, last);
	return close_range_kept(first, last, flags);
}

void closefrom(int lowfd)
{
	if (emu_on())
		emu_close_range(lowfd < 0 ? 0 : (unsigned int)lowfd, ~0U);
	if (protected_n == 0 && __atomic_load_n(&emu_hidden_n, __ATOMIC_ACQUIRE) == 0) {
		RESOLVE(closefrom);
		REAL(closefrom)(lowfd);
		return;
	}
	(void)close_range_kept(lowfd < 0 ? 0 : (unsigned int)lowfd, ~0U, 0);
}
#endif

/* With the emulation on, the RDMA netlink family is absent, as on a kernel
 * without the RDMA subsystem: libibverbs then reads the generated sysfs. */
int socket(int domain, int type, int protocol)
{
	if (emu_on() && domain == AF_NETLINK && protocol == NETLINK_RDMA) {
		errno = EPROTONOSUPPORT;
		return -1;
	}
	RESOLVE(socket);
	return REAL(socket)(domain, type, protocol);
}
