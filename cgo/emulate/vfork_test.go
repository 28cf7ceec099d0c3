//go:build cgo && linux

package emulate_test

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestVforkChildClosesEmulatedDescriptors: a child made with vfork shares
// the parent's memory (the interposer's descriptor table and the Go
// side's kernel among it) until it execs or exits, and has its own copy
// of the descriptor table. Closing its copies of the device's descriptors
// before an exec (close, closefrom, close_range, dup2 over them), the
// canonical use of vfork, must leave the parent's context as it was: on a
// kernel the child's close drops the child's reference only. Broken, the
// parent's next command went to /dev/null, where a write "succeeds" and
// leaves the response zeroed (the port's state 0).
func TestVforkChildClosesEmulatedDescriptors(t *testing.T) {
	prog, lib := interposeProgram(t, interposeCommon+`
#include <linux/close_range.h>
static void port_active(struct ibv_context *c, const char *when)
{
	struct ibv_port_attr a;

	memset(&a, 0, sizeof a);
	if (ibv_query_port(c, 1, &a))
		FAIL("%s: ibv_query_port: %s", when, strerror(errno));
	if (a.state != IBV_PORT_ACTIVE)
		FAIL("%s: port state %d, want active", when, a.state);
}

int main(int argc, char **argv)
{
	struct ibv_context *c = open_first();
	int st, p2[2];
	pid_t p;

	if (pipe(p2))
		FAIL("pipe");
	port_active(c, "before vfork");
	fflush(stdout);
	p = vfork();
	if (p == 0) {
		switch (argv[1][0]) {
		case 'c':
			close(c->cmd_fd);
			close(c->async_fd);
			break;
		case 'f':
			closefrom(3);
			break;
		case 'r':
			close_range(3, ~0U, 0);
			break;
		case 'd':
			dup2(p2[1], c->cmd_fd);
			dup3(p2[1], c->async_fd, 0);
			break;
		}
		_exit(0);
	}
	if (waitpid(p, &st, 0) != p)
		FAIL("waitpid: %s", strerror(errno));
	port_active(c, "after the child's close");
	if (!ibv_alloc_pd(c))
		FAIL("ibv_alloc_pd after the child's close: %s", strerror(errno));
	printf("ok\n");
	return 0;
}
`)
	for _, a := range []string{"close", "from", "range", "dup"} {
		out, err := runInterposed(t, prog, lib, a)
		require.NoError(t, err, "%s: %s", a, out)
		require.Equal(t, "ok\n", out, a)
	}
}
