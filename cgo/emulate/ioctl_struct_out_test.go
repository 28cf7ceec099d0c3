//go:build cgo && linux

package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestIoctlStructOutputLonger: an output attribute declared with
// UVERBS_ATTR_STRUCT (QUERY_PORT's response, QUERY_GID_ENTRY's entry) takes
// a buffer longer than the structure, which the method zero-fills past it
// (uverbs_process_attr checks no upper bound when zero_trailing is set;
// uverbs_copy_to_struct_or_zero), as a library built with a later,
// longer structure sends it.
func TestIoctlStructOutputLonger(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerInfiniBand)
	a := newArena(t)
	fd := openNode(t, k, 0)
	en, _, _ := getContext(k, a, fd, ucontextReq(16, 4, 0))
	require.Zero(t, en)

	resp, respAddr := a.alloc(queryPortExSize + 16)
	for i := range resp {
		resp[i] = 0xa5
	}
	hdr, _ := a.ioctlCmd(objectDevice, methodQueryPort, inline(attrQueryPortNum, 1), out(attrQueryPortResp, respAddr, len(resp)))
	require.Zero(t, k.ioctl(fd, rdmaVerbsIoctl, hdr), "QUERY_PORT with 16 bytes more than the structure")
	legacy, _ := queryPortResp(&k.devs[0], 1)
	require.Equal(t, bytesOf(&legacy), resp[:queryPortRespSize])
	require.Equal(t, make([]byte, 16), resp[queryPortExSize:], "the bytes past the structure zeroed")

	entry, entryAddr := a.alloc(gidEntrySize + 8)
	for i := range entry {
		entry[i] = 0xa5
	}
	hdr, _ = a.ioctlCmd(objectDevice, methodQueryGIDEntry, inline(attrGIDEntryPort, 1), inline(attrGIDEntryIndex, 0),
		testAttr{id: attrGIDEntryFlags, length: 4, flags: attrFlagMandatory}, out(attrGIDEntryResp, entryAddr, len(entry)))
	require.Zero(t, k.ioctl(fd, rdmaVerbsIoctl, hdr), "QUERY_GID_ENTRY with 8 bytes more than the structure")
	require.Equal(t, k.devs[0].GIDs[0][0].GID[:], entry[:16])
	require.Equal(t, make([]byte, 8), entry[gidEntrySize:], "the bytes past the structure zeroed")
}
