//go:build cgo && linux

package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"
)

// TestAllocPDWithoutDriverResponse: mlx5_ib_alloc_pd copies struct
// mlx5_ib_alloc_pd_resp (the PDN) to the driver data whatever its length
// (ib_copy_to_udata); a response buffer holding only the core response
// leaves no driver buffer (a NULL one), EFAULT, and the PD is freed.
func TestAllocPDWithoutDriverResponse(t *testing.T) {
	k, a, fd := objectKernel(t)
	_, respAddr := a.alloc(allocPDRespSize)
	buf, n := a.writeCmd(cmdAllocPD, respCore(respAddr), allocPDRespSize/4)
	_, en := k.write(fd, buf, n)
	require.Equal(t, unix.EFAULT, en)
	require.Empty(t, k.files[fd].uctx.objects, "no PD left")
}
