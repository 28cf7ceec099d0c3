//go:build cgo && linux

package emulate_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
)

// interposeProgram compiles src (with extra cc flags) and returns it with
// the preload library.
func interposeProgram(t *testing.T, src string, cflags ...string) (prog, lib string) {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler")
	}
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "p.c"), []byte(src), 0o644))
	prog = filepath.Join(dir, "p")
	args := append(append([]string{}, cflags...), "-o", prog, filepath.Join(dir, "p.c"), "-libverbs")
	out, err := exec.Command(cc, args...).CombinedOutput()
	require.NoError(t, err, "cc: %s", out)
	return prog, preloadLibrary(t, dir)
}

// runInterposed runs prog with the emulation preloaded, bounded by 30 s,
// and returns its output and error.
func runInterposed(t *testing.T, prog, lib string, args ...string) (string, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, prog, args...)
	cmd.Env = append(os.Environ(), "LD_PRELOAD="+lib, emulate.EnvEmulate+"=1")
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	require.NoError(t, ctx.Err(), "ran past 30 s (hung):\n%s", out)
	return string(out), err
}

const interposeCommon = `
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/wait.h>
#include <infiniband/verbs.h>

#define FAIL(...) do { printf(__VA_ARGS__); printf("\n"); exit(1); } while (0)

static struct ibv_context *open_first(void)
{
	int n;
	struct ibv_device **l = ibv_get_device_list(&n);
	struct ibv_context *c;

	if (!l || n == 0)
		FAIL("no device");
	c = ibv_open_device(l[0]);
	if (!c)
		FAIL("ibv_open_device: %s", strerror(errno));
	return c;
}
`

// TestForkedChildClosesEmulatedDescriptor: a child forked by a program
// holding an open device closes its copy of the device descriptor (as a
// daemon or a pre-exec child does) and exits; the parent goes on using the
// device. On a kernel the child's close drops its reference at once.
func TestForkedChildClosesEmulatedDescriptor(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+`
int main(void)
{
	struct ibv_context *c = open_first();
	int st;
	pid_t p;

	fflush(stdout);
	p = fork();
	if (p == 0) {
		alarm(10); /* the child must not hang */
		_exit(close(c->cmd_fd) == 0 && close(c->async_fd) == 0 ? 0 : 3);
	}
	if (waitpid(p, &st, 0) != p)
		FAIL("waitpid: %s", strerror(errno));
	if (!WIFEXITED(st) || WEXITSTATUS(st) != 0)
		FAIL("child: status %#x", st);
	if (!ibv_alloc_pd(c))
		FAIL("parent: ibv_alloc_pd after the child's close: %s", strerror(errno));
	printf("ok\n");
	return 0;
}
`)
	out, err := runInterposed(t, prog, lib)
	require.NoError(t, err, "%s", out)
	require.Equal(t, "ok\n", out)
}

// TestDup2OntoEmulatedDescriptor: dup2 onto the device's descriptor number
// closes the device file and makes the number a descriptor of the other
// file; writes to it must reach that file, not the emulated kernel.
func TestDup2OntoEmulatedDescriptor(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+`
int main(void)
{
	struct ibv_context *c = open_first();
	int p[2], fd = c->cmd_fd;
	char b[8] = {0};
	ssize_t n;

	if (pipe(p))
		FAIL("pipe");
	if (dup2(p[1], fd) != fd)
		FAIL("dup2: %s", strerror(errno));
	n = write(fd, "hello", 5);
	if (n != 5)
		FAIL("write to the pipe through %d: %zd (%s)", fd, n, strerror(errno));
	if (read(p[0], b, 5) != 5 || strcmp(b, "hello"))
		FAIL("read back %s", b);
	printf("ok\n");
	return 0;
}
`)
	out, err := runInterposed(t, prog, lib)
	require.NoError(t, err, "%s", out)
	require.Equal(t, "ok\n", out)
}

// TestClosefromForgetsEmulatedDescriptors: closefrom (close_range) closes
// the device's descriptors; a file opened afterwards that gets one of
// their numbers must be an ordinary file. The Go runtime's poller
// descriptors stay open: closed, the runtime stopped the process at its
// next wait ("runtime: epollwait on fd 6 failed with 9", once in a CI run).
func TestClosefromForgetsEmulatedDescriptors(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+`
#include <dirent.h>

static int poller_open(void)
{
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;
	char path[64], link[64];
	int found = 0;

	if (d == NULL)
		return -1;
	while ((e = readdir(d)) != NULL) {
		ssize_t n;

		snprintf(path, sizeof path, "/proc/self/fd/%s", e->d_name);
		n = readlink(path, link, sizeof link - 1);
		if (n > 0) {
			link[n] = 0;
			if (strcmp(link, "anon_inode:[eventpoll]") == 0)
				found = 1;
		}
	}
	closedir(d);
	return found;
}

int main(int argc, char **argv)
{
	struct ibv_context *c = open_first();
	int fd = c->cmd_fd, nf;
	ssize_t n;

	closefrom(3);
	if (poller_open() != 1)
		FAIL("closefrom closed the Go runtime's poller");
	do
		nf = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644);
	while (nf >= 0 && nf < fd);
	if (nf != fd)
		FAIL("open: got %d, want %d (%s)", nf, fd, strerror(errno));
	n = write(nf, "hello", 5);
	if (n != 5)
		FAIL("write to a file on reused descriptor %d: %zd (%s)", nf, n, strerror(errno));
	printf("ok\n");
	return 0;
}
`)
	out, err := runInterposed(t, prog, lib, filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err, "%s", out)
	require.Equal(t, "ok\n", out)
}

// TestCloseLoopKeepsRuntimeDescriptors: a program that closes every
// descriptor above 2 one by one (a daemon's start, without closefrom) must
// not close the Go runtime's own, which closefrom and close_range leave
// open: the close of one gets EBADF, as a kernel answers for a number not
// open, and the emulation goes on working. Closed, the runtime stopped
// the process ("netpollBreak write failed").
func TestCloseLoopKeepsRuntimeDescriptors(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+`
static int epoll_fd(void)
{
	char path[64], link[64];

	for (int fd = 0; fd < 1024; fd++) {
		ssize_t n;

		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		n = readlink(path, link, sizeof link - 1);
		if (n > 0) {
			link[n] = 0;
			if (strcmp(link, "anon_inode:[eventpoll]") == 0)
				return fd;
		}
	}
	return -1;
}

int main(void)
{
	struct ibv_context *c;
	struct ibv_comp_channel *ch;
	int ep = epoll_fd();

	if (ep < 0)
		FAIL("no epoll descriptor of the Go runtime");
	for (int fd = 3; fd < 1024; fd++)
		if (close(fd) == 0 && fd == ep)
			FAIL("close(%d) closed the Go runtime's epoll", fd);
	if (errno = 0, close(ep) == 0 || errno != EBADF)
		FAIL("close(%d): %s, want EBADF", ep, strerror(errno));
	c = open_first();
	ch = ibv_create_comp_channel(c);
	if (!ch || !ibv_alloc_pd(c) || !ibv_create_cq(c, 16, NULL, ch, 0))
		FAIL("verbs after the close loop: %s", strerror(errno));
	usleep(200000);
	if (ibv_close_device(c))
		FAIL("ibv_close_device: %s", strerror(errno));
	printf("ok\n");
	return 0;
}
`)
	out, err := runInterposed(t, prog, lib)
	require.NoError(t, err, "%s", out)
	require.Equal(t, "ok\n", out)
}

// TestOpenStatBadPathIsEFAULT: open, openat and stat of an address that
// cannot be read fail with EFAULT, as the system calls do; the interposer
// must not read the name itself and crash.
func TestOpenStatBadPathIsEFAULT(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+`
#include <sys/stat.h>
int main(void)
{
	const char *bad = (const char *)16;
	struct stat st;
	int r;

	(void)open_first();
	errno = 0;
	r = open(bad, O_RDONLY);
	printf("open %d %s\n", r, strerror(errno));
	errno = 0;
	r = openat(AT_FDCWD, bad, O_RDONLY);
	printf("openat %d %s\n", r, strerror(errno));
	errno = 0;
	r = stat(bad, &st);
	printf("stat %d %s\n", r, strerror(errno));
	return 0;
}
`)
	out, err := runInterposed(t, prog, lib)
	require.NoError(t, err, "%s", out)
	require.Equal(t, "open -1 Bad address\nopenat -1 Bad address\nstat -1 Bad address\n", out)
}

// TestOpenStatDeviceNameRunningOffItsPage: a name that starts with the
// device directory and runs into a page that cannot be read (PROT_NONE),
// with no end before it, fails with EFAULT (open, openat, stat), as the
// kernel's getname does; the emulation must not read it as a C string and
// crash. A node's name that ends at the last byte of its page opens.
func TestOpenStatDeviceNameRunningOffItsPage(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+`
#include <sys/mman.h>
#include <sys/stat.h>
int main(void)
{
	long ps = sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, 2 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	const char *node = "/dev/infiniband/uverbs0";
	char *bad, *good;
	struct stat st;
	int r;

	if (m == MAP_FAILED || mprotect(m + ps, ps, PROT_NONE))
		FAIL("mmap: %s", strerror(errno));
	(void)open_first();
	bad = m + ps - 20;
	memcpy(bad, node, 20);
	errno = 0;
	r = open(bad, O_RDWR);
	printf("open %d %s\n", r, strerror(errno));
	errno = 0;
	r = openat(AT_FDCWD, bad, O_RDWR);
	printf("openat %d %s\n", r, strerror(errno));
	errno = 0;
	r = stat(bad, &st);
	printf("stat %d %s\n", r, strerror(errno));
	good = m + ps - strlen(node) - 1;
	memcpy(good, node, strlen(node) + 1);
	r = open(good, O_RDWR);
	printf("open at the page's end %s\n", r >= 0 ? "ok" : strerror(errno));
	return 0;
}
`)
	out, err := runInterposed(t, prog, lib)
	require.NoError(t, err, "%s", out)
	require.Equal(t, "open -1 Bad address\nopenat -1 Bad address\nstat -1 Bad address\nopen at the page's end ok\n", out)
}

// TestAnonymousMmapIgnoresEmulatedDescriptor: mmap with MAP_ANONYMOUS
// ignores its descriptor argument, as the kernel's does, even when it is
// the device's (mmap and mmap64): the call maps zeroed memory of the
// flags asked for, not a page of the device.
func TestAnonymousMmapIgnoresEmulatedDescriptor(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+`
#include <sys/mman.h>
int main(void)
{
	struct ibv_context *c = open_first();
	long ps = sysconf(_SC_PAGESIZE);
	char *m = mmap(NULL, 2 * ps, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, c->cmd_fd, 0);
	char *m64 = mmap64(NULL, ps, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, c->cmd_fd, 0);

	if (m == MAP_FAILED)
		FAIL("mmap: %s", strerror(errno));
	if (m64 == MAP_FAILED)
		FAIL("mmap64: %s", strerror(errno));
	if (m[0] || m[2 * ps - 1] || m64[0])
		FAIL("anonymous memory not zeroed");
	m[2 * ps - 1] = 1;
	m64[0] = 1;
	if (munmap(m, 2 * ps) || munmap(m64, ps))
		FAIL("munmap: %s", strerror(errno));
	printf("ok\n");
	return 0;
}
`)
	out, err := runInterposed(t, prog, lib)
	require.NoError(t, err, "%s", out)
	require.Equal(t, "ok\n", out)
}

// TestFortifiedOpenReachesEmulation: a program built with
// -D_FORTIFY_SOURCE (the distributions' default) that opens a device node
// with flags not known at compile time calls __open_2 or __openat_2, not
// open; the node must still be the emulated one.
func TestFortifiedOpenReachesEmulation(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+`
int main(void)
{
	volatile int flags = O_RDWR | O_CLOEXEC;
	int fd = open("/dev/infiniband/uverbs0", flags);
	int fd2 = openat(AT_FDCWD, "/dev/infiniband/uverbs0", flags);

	printf("open %s\n", fd >= 0 ? "ok" : strerror(errno));
	printf("openat %s\n", fd2 >= 0 ? "ok" : strerror(errno));
	return 0;
}
`, "-O2", "-U_FORTIFY_SOURCE", "-D_FORTIFY_SOURCE=2")
	out, err := runInterposed(t, prog, lib)
	require.NoError(t, err, "%s", out)
	require.Equal(t, "open ok\nopenat ok\n", out)
}

// TestCloseRangeRefusesBadArguments: close_range with a first descriptor
// above the last, or with a flag the kernel does not know, fails with
// EINVAL and closes nothing; the device's descriptors stay open and the
// emulated context usable.
func TestCloseRangeRefusesBadArguments(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+`
#include <linux/close_range.h>
int main(void)
{
	struct ibv_context *c = open_first();
	int r;

	errno = 0;
	r = close_range(10, 5, 0);
	printf("reversed %d %s\n", r, strerror(errno));
	errno = 0;
	r = close_range(3, ~0U, 1U << 30);
	printf("flags %d %s\n", r, strerror(errno));
	if (fcntl(c->cmd_fd, F_GETFD) < 0 || fcntl(c->async_fd, F_GETFD) < 0)
		FAIL("a refused close_range closed the device's descriptors");
	if (!ibv_alloc_pd(c))
		FAIL("ibv_alloc_pd after a refused close_range: %s", strerror(errno));
	printf("ok\n");
	return 0;
}
`)
	out, err := runInterposed(t, prog, lib)
	require.NoError(t, err, "%s", out)
	require.Equal(t, "reversed -1 Invalid argument\nflags -1 Invalid argument\nok\n", out)
}

// eventEndCommon is the C code the tests of the event files' hidden write
// ends share: check, that a non-blocking read of an empty event file is
// EAGAIN (not the end of file of a pipe without writers), and write_end,
// the other descriptor of a channel's pipe.
const eventEndCommon = `
#include <sys/stat.h>
static void check(const char *what, int fd)
{
	char b[64];
	ssize_t n;

	if (fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK))
		FAIL("%s: fcntl: %s", what, strerror(errno));
	n = read(fd, b, sizeof b);
	if (n != -1 || errno != EAGAIN)
		FAIL("%s: read %zd (%s), want EAGAIN", what, n, n < 0 ? strerror(errno) : "end of file");
}

/* write_end finds the other descriptor of the channel's pipe. */
static int write_end(int rfd)
{
	struct stat rs, ws;

	if (fstat(rfd, &rs))
		FAIL("fstat: %s", strerror(errno));
	for (int fd = 0; fd < 1024; fd++)
		if (fd != rfd && fstat(fd, &ws) == 0 && ws.st_dev == rs.st_dev && ws.st_ino == rs.st_ino)
			return fd;
	FAIL("no write end of the channel's pipe found");
}
`

// TestClosefromKeepsEventWriteEnds: the emulated completion channel and
// async event file are pipes whose write ends the model holds under
// descriptor numbers the program never sees, just above their read ends. A
// program that closes every descriptor above the ones it knows
// (closefrom, close_range, or close of each number, which gets EBADF as
// for a number not open) must not close them: on a kernel the event file
// has no other end, a non-blocking read of an empty one is EAGAIN, never
// the end of file, and the model's next event must not go to a file the
// program opens under the number.
func TestClosefromKeepsEventWriteEnds(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+eventEndCommon+`
#include <linux/close_range.h>

int main(void)
{
	struct ibv_context *c = open_first();
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);

	if (!ch)
		FAIL("ibv_create_comp_channel: %s", strerror(errno));
	closefrom(ch->fd + 1);
	check("comp channel after closefrom", ch->fd);
	ch = ibv_create_comp_channel(c);
	if (!ch)
		FAIL("ibv_create_comp_channel: %s", strerror(errno));
	if (close_range(ch->fd + 1, ~0U, 0))
		FAIL("close_range: %s", strerror(errno));
	check("comp channel after close_range", ch->fd);
	ch = ibv_create_comp_channel(c);
	if (!ch)
		FAIL("ibv_create_comp_channel: %s", strerror(errno));
	int w = write_end(ch->fd);
	if (close(w) == 0)
		FAIL("close(%d) of a descriptor the program never opened succeeded", w);
	if (errno != EBADF)
		FAIL("close(%d): %s, want EBADF", w, strerror(errno));
	check("comp channel after close of its write end's number", ch->fd);
	check("async_fd", c->async_fd);
	printf("ok\n");
	return 0;
}
`)
	out, err := runInterposed(t, prog, lib)
	require.NoError(t, err, "%s", out)
	require.Equal(t, "ok\n", out)
}

// TestDupOntoEventWriteEnd: dup2 or dup3 onto the number an event file's
// hidden write end holds succeeds, as onto a number not open on a kernel,
// and makes the number the program's: the model's write end moves out of
// the way first, so the channel keeps working (a non-blocking read of it
// is EAGAIN, not the end of file of a pipe without writers) and what the
// program writes to the number reaches its own file.
func TestDupOntoEventWriteEnd(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+eventEndCommon+`

static void dup_onto(struct ibv_context *c, int use_dup3)
{
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
	int p[2], w, r;
	char b[4] = {0};

	if (!ch)
		FAIL("ibv_create_comp_channel: %s", strerror(errno));
	w = write_end(ch->fd);
	if (pipe(p))
		FAIL("pipe: %s", strerror(errno));
	r = use_dup3 ? dup3(p[1], w, O_CLOEXEC) : dup2(p[1], w);
	if (r != w)
		FAIL("dup%d onto %d: %d (%s)", use_dup3 ? 3 : 2, w, r, strerror(errno));
	check(use_dup3 ? "channel after dup3 onto its write end" : "channel after dup2 onto its write end", ch->fd);
	if (write(w, "abc", 3) != 3 || read(p[0], b, 3) != 3 || strcmp(b, "abc"))
		FAIL("the program's write to %d did not reach its pipe", w);
	if (close(w))
		FAIL("close(%d) of the program's own descriptor: %s", w, strerror(errno));
	check("channel after the program's close", ch->fd);
	if (ibv_destroy_comp_channel(ch))
		FAIL("ibv_destroy_comp_channel: %s", strerror(errno));
	close(p[0]);
	close(p[1]);
}

int main(void)
{
	struct ibv_context *c = open_first();

	dup_onto(c, 0);
	dup_onto(c, 1);
	check("async_fd", c->async_fd);
	if (!ibv_alloc_pd(c))
		FAIL("ibv_alloc_pd: %s", strerror(errno));
	printf("ok\n");
	return 0;
}
`)
	out, err := runInterposed(t, prog, lib)
	require.NoError(t, err, "%s", out)
	require.Equal(t, "ok\n", out)
}

// TestClockPageFileIsHidden: the clock info page every context maps lives
// in a memory file the model holds under a descriptor number the program
// never opened. The program's close of the number gets EBADF, close_range
// leaves it, and a dup2 onto it makes the number the program's while the
// page moves away: a context opened afterwards maps the page (not the
// program's file there, which it read with SIGBUS), and the model's
// release of the page closes its own file, not the program's descriptor.
func TestClockPageFileIsHidden(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+`
#include <infiniband/mlx5dv.h>

#include <linux/close_range.h>

/* clock_fd finds the memory file that holds the clock info page. */
static int clock_fd(void)
{
	char path[64], link[128];

	for (int fd = 0; fd < 1024; fd++) {
		ssize_t n;

		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		n = readlink(path, link, sizeof link - 1);
		if (n > 0) {
			link[n] = 0;
			if (strstr(link, "mlx5_ib clock info"))
				return fd;
		}
	}
	return -1;
}

static void clock_works(const char *when)
{
	struct ibv_context *o = open_first();
	struct mlx5dv_clock_info ci;

	if (mlx5dv_get_clock_info(o, &ci))
		FAIL("%s: mlx5dv_get_clock_info failed", when);
	if (ibv_close_device(o))
		FAIL("%s: ibv_close_device: %s", when, strerror(errno));
}

int main(int argc, char **argv)
{
	struct ibv_context *c = open_first();
	int m = clock_fd(), p[2];
	char b[4] = {0};

	if (m < 0)
		FAIL("no clock info memory file");
	errno = 0;
	if (close(m) == 0 || errno != EBADF)
		FAIL("close(%d) of a descriptor the program never opened: %s, want EBADF", m, strerror(errno));
	if (close_range(m, m, 0))
		FAIL("close_range(%d, %d): %s", m, m, strerror(errno));
	if (clock_fd() != m)
		FAIL("close_range(%d, %d) closed the clock info page's memory file", m, m);
	if (open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0644) < 0)
		FAIL("open: %s", strerror(errno));
	clock_works("after close and closefrom");
	if (pipe(p))
		FAIL("pipe: %s", strerror(errno));
	if (dup2(p[1], m) != m)
		FAIL("dup2 onto %d: %s", m, strerror(errno));
	if (clock_fd() < 0 || clock_fd() == m)
		FAIL("dup2 onto %d: the clock info page's memory file did not move", m);
	clock_works("after dup2");
	if (ibv_close_device(c))
		FAIL("ibv_close_device: %s", strerror(errno));
	if (write(m, "abc", 3) != 3 || read(p[0], b, 3) != 3 || strcmp(b, "abc"))
		FAIL("the program's descriptor %d no longer reaches its pipe: %s", m, strerror(errno));
	printf("ok\n");
	return 0;
}
`, "-Wl,--no-as-needed", "-lmlx5")
	out, err := runInterposed(t, prog, lib, filepath.Join(t.TempDir(), "f"))
	require.NoError(t, err, "%s", out)
	require.Equal(t, "ok\n", out)
}
