//go:build cgo && linux

package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDestroyCQSixteenByteWrite: rdma-core v18 and v19 write DESTROY_CQ
// with a count of 16 (in_words 4) though the request is 24 bytes;
// verify_hdr (uverbs_main.c) takes that one command and count as the
// whole request (in_words 6) and does not check out_words.
func TestDestroyCQSixteenByteWrite(t *testing.T) {
	k, a, fd := objectKernel(t)
	_, cq := pdAndCQ(t, k, a, fd)
	resp, respAddr := a.alloc(destroyCQRespSize)
	ne.PutUint64(resp, ^uint64(0))
	core := respCore(respAddr, make([]byte, 8)...)
	ne.PutUint32(core[8:], cq)
	b, buf := a.alloc(cmdHdrSize + len(core))
	ne.PutUint32(b[0:], cmdDestroyCQ)
	ne.PutUint16(b[4:], 4)
	ne.PutUint16(b[6:], destroyCQRespSize/4)
	copy(b[cmdHdrSize:], core)
	got, en := k.write(fd, buf, 16)
	require.Zero(t, en)
	require.Equal(t, 16, got)
	require.NotContains(t, k.files[fd].uctx.objects, cq, "the CQ is destroyed")
	require.Equal(t, make([]byte, destroyCQRespSize), resp, "no events reported")
}
