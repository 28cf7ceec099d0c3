//go:build cgo && linux

package emulate_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestGenericIoctlsOnEmulatedDescriptors: FIONBIO, FIOCLEX and FIONCLEX
// are answered by the kernel's VFS for every file, the uverbs device and
// its event files included (rdma-core's man pages make the async and
// completion channel descriptors non-blocking; ioctl(FIONBIO) does the
// same as fcntl); they must not get the uverbs ioctl's ENOTTY.
func TestGenericIoctlsOnEmulatedDescriptors(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+`
#include <sys/ioctl.h>
static void check(const char *what, int fd)
{
	int on = 1, off = 0;

	if (ioctl(fd, FIONBIO, &on))
		FAIL("%s: ioctl FIONBIO on: %s", what, strerror(errno));
	if (!(fcntl(fd, F_GETFL) & O_NONBLOCK))
		FAIL("%s: FIONBIO did not set O_NONBLOCK", what);
	if (ioctl(fd, FIONBIO, &off))
		FAIL("%s: ioctl FIONBIO off: %s", what, strerror(errno));
	if (fcntl(fd, F_GETFL) & O_NONBLOCK)
		FAIL("%s: FIONBIO did not clear O_NONBLOCK", what);
	if (ioctl(fd, FIONCLEX))
		FAIL("%s: ioctl FIONCLEX: %s", what, strerror(errno));
	if (fcntl(fd, F_GETFD) & FD_CLOEXEC)
		FAIL("%s: FIONCLEX left FD_CLOEXEC", what);
	if (ioctl(fd, FIOCLEX))
		FAIL("%s: ioctl FIOCLEX: %s", what, strerror(errno));
	if (!(fcntl(fd, F_GETFD) & FD_CLOEXEC))
		FAIL("%s: FIOCLEX did not set FD_CLOEXEC", what);
}

int main(void)
{
	struct ibv_context *c = open_first();
	struct ibv_comp_channel *ch = ibv_create_comp_channel(c);
	int on = 1;
	char b[16];

	if (!ch)
		FAIL("ibv_create_comp_channel: %s", strerror(errno));
	check("cmd_fd", c->cmd_fd);
	check("async_fd", c->async_fd);
	check("comp channel", ch->fd);
	if (ioctl(ch->fd, FIONBIO, &on))
		FAIL("comp channel: ioctl FIONBIO: %s", strerror(errno));
	if (read(ch->fd, b, sizeof b) != -1 || errno != EAGAIN)
		FAIL("comp channel: read after FIONBIO: %s, want EAGAIN", strerror(errno));
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
