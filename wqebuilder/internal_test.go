package wqebuilder

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestLayouts pins the sizes the hot path relies on: a stage is four words
// (the compiler keeps at most four fields, 32 bytes, in registers), and the
// address-vector view matches struct mlx5_wqe_av.
func TestLayouts(t *testing.T) {
	require.Equal(t, uintptr(4*8), unsafe.Sizeof(wqe{}))
	require.Equal(t, unsafe.Sizeof(wqe{}), unsafe.Sizeof(CtrlStage{}))
	require.Equal(t, uintptr(prm.AVSize), unsafe.Sizeof(avLayout{}))
	require.Equal(t, uintptr(prm.AVDCKey), unsafe.Offsetof(avLayout{}.key))
	require.Equal(t, uintptr(prm.AVDQPDCT), unsafe.Offsetof(avLayout{}.dqp))
	require.Equal(t, uintptr(prm.AVStatRateSL), unsafe.Offsetof(avLayout{}.path))
	require.Equal(t, uintptr(recordSize), unsafe.Sizeof(record{}))
	// Every opcode a stage writes fits the error table.
	for _, op := range []prm.Opcode{prm.OpNop, prm.OpSendInval, prm.OpRdmaWrite, prm.OpRdmaWriteImm, prm.OpSend,
		prm.OpSendImm, prm.OpRdmaRead, prm.OpAtomicCS, prm.OpAtomicFA, prm.OpAtomicMaskedCS, prm.OpAtomicMaskedFA} {
		require.LessOrEqual(t, int(op), opIndexMask)
	}
}
