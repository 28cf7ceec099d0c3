package prm

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// LoadOpOwn reads byte 63 of the CQE64, whatever the bytes around it hold.
func TestLoadOpOwn(t *testing.T) {
	var cqe [CQE64Size / 8]uint64 // 8-byte aligned
	b := unsafe.Slice((*byte)(unsafe.Pointer(&cqe[0])), CQE64Size)
	for _, op := range []uint8{0x00, 0x01, 0xd1, 0xf0, 0xff} {
		for i := range b {
			b[i] = byte(i) ^ 0x5a
		}
		b[CQEOpOwn] = op
		require.Equal(t, op, LoadOpOwn(unsafe.Pointer(&b[0])), "op_own 0x%02x", op)
	}
}
