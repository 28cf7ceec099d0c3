package bench

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

func newTestMemory(t testing.TB) *queueMemory {
	t.Helper()
	m, err := newQueueMemory(benchWQECnt, benchCQECnt)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, m.close()) })
	return m
}

func newTestFloor(t testing.TB, m *queueMemory) *cFloor {
	t.Helper()
	if !haveCFloor {
		t.Skip("the C floor needs cgo")
	}
	f, err := newCFloor(m)
	require.NoError(t, err)
	t.Cleanup(f.free)
	return f
}

func be32(p unsafe.Pointer, off uintptr) uint32 { return prm.Load32(unsafe.Add(p, off)) }
func be16(p unsafe.Pointer, off uintptr) uint16 { return prm.Load16(unsafe.Add(p, off)) }
func u8(p unsafe.Pointer, off uintptr) uint8    { return *(*uint8)(unsafe.Add(p, off)) }

// requireBenchWQE checks, field by field against the PRM layout, the WQE
// that every benchmark posts, at producer index pi.
func requireBenchWQE(t *testing.T, m *queueMemory, pi uint32) {
	t.Helper()
	w := m.wqe(pi)
	require.Equal(t, uint32(pi&0xffff)<<8|uint32(prm.OpRdmaWriteImm), be32(w, prm.CtrlOpmodIdxOpcode), "opmod_idx_opcode")
	require.Equal(t, uint32(benchQPN)<<8|3, be32(w, prm.CtrlQPNDS), "qpn_ds")
	require.Equal(t, prm.FlagCQUpdate, u8(w, prm.CtrlFmCeSe), "fm_ce_se")
	require.Equal(t, uint32(benchImm), be32(w, prm.CtrlImm), "imm")
	r := unsafe.Add(w, prm.CtrlSize)
	require.Equal(t, uint64(benchRAddr), prm.Load64(unsafe.Add(r, prm.RaddrAddr)), "raddr")
	require.Equal(t, uint32(benchRKey), be32(r, prm.RaddrRkey), "rkey")
	d := unsafe.Add(r, prm.RaddrSize)
	require.Equal(t, uint32(benchLen), be32(d, prm.DataByteCount), "byte_count")
	require.Equal(t, uint32(benchLKey), be32(d, prm.DataLKey), "lkey")
	require.Equal(t, uint64(uintptr(m.payload)), prm.Load64(unsafe.Add(d, prm.DataAddr)), "addr")
}

// requireBenchCQE checks the requester CQE that the completer wrote for the
// n-th completion.
func requireBenchCQE(t *testing.T, m *queueMemory, n uint32) {
	t.Helper()
	c := m.cqe(n)
	require.Equal(t, uint16(n), be16(c, prm.CQEWQECounter), "wqe_counter")
	require.Equal(t, uint32(prm.OpRdmaWriteImm)<<24|benchQPN, be32(c, prm.CQESopDropQPN), "sop_drop_qpn")
	owner := uint8(n / m.cqeCnt & 1)
	require.Equal(t, prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, owner), u8(c, prm.CQEOpOwn), "op_own")
}

// requireAfter checks the rings after n iterations of post, complete, poll.
func requireAfter(t *testing.T, m *queueMemory, n uint32) {
	t.Helper()
	requireBenchWQE(t, m, n-1)
	requireBenchCQE(t, m, n-1)
	require.Equal(t, n&0xffff, be32(m.qpDBRec, prm.DoorbellRecordSendB), "SQ doorbell record")
	require.Equal(t, n&prm.CQConsumerIndexMask, be32(m.cqDBRec, prm.DoorbellRecordRecvB), "CQ consumer index")
	// The last post went to the half the register had before its n-th
	// toggle; its bytes are the WQE's first 64 bytes.
	half := uintptr((n-1)&1) * uintptr(m.bfSize)
	require.Equal(t,
		unsafe.Slice((*byte)(m.wqe(n-1)), prm.WQEBBSize),
		unsafe.Slice((*byte)(unsafe.Add(m.bf, half)), prm.WQEBBSize), "BlueFlame copy")
}

// The C floor leaves the expected rings behind, with its post inline and
// with the post called out of line.
func TestCFloorLoop(t *testing.T) {
	for _, tc := range []struct {
		name string
		run  func(*cFloor, uint64) (uint64, error)
	}{
		{"inline", (*cFloor).run},
		{"post called", (*cFloor).runPostCall},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newTestMemory(t)
			f := newTestFloor(t, m)
			// 1000 iterations wrap both 256-entry rings several times, so
			// the owner bit has flipped and the WQE index has wrapped.
			const n = 1000
			sum, err := tc.run(f, n)
			require.NoError(t, err)
			require.Equal(t, uint64(n*(n-1)/2), sum)
			require.Equal(t, uint32(n), f.producerIndex())
			require.Equal(t, uint32(n), f.consumerIndex())
			requireAfter(t, m, n)
			for pi := uint32(n - benchWQECnt); pi < n; pi++ {
				requireBenchWQE(t, m, pi)
				requireBenchCQE(t, m, pi)
			}
		})
	}
}

func TestCFloorOneCallPerOperation(t *testing.T) {
	m := newTestMemory(t)
	f := newTestFloor(t, m)
	comp := newCompleter(m)
	const n = 600
	for i := uint64(0); i < n; i++ {
		require.NoError(t, f.post(i))
		comp.complete()
		id, err := f.poll()
		require.NoError(t, err)
		require.Equal(t, i, id)
	}
	requireAfter(t, m, n)
	_, err := f.poll()
	require.ErrorIs(t, err, errCQEmpty, "nothing is left to poll")
}

func TestCFloorRefusesFullQueue(t *testing.T) {
	m := newTestMemory(t)
	f := newTestFloor(t, m)
	for i := uint64(0); i < benchWQECnt; i++ {
		require.NoError(t, f.post(i))
	}
	require.ErrorIs(t, f.post(benchWQECnt), errSQFull)
	require.Equal(t, uint32(benchWQECnt), f.producerIndex())
}

// The Go completer and the C completer write the same bytes.
func TestCompletersAgree(t *testing.T) {
	mc := newTestMemory(t)
	mg := newTestMemory(t)
	f := newTestFloor(t, mc)
	g := newCompleter(mg)
	for i := uint32(1); i <= 3*benchCQECnt/2; i++ {
		prm.Store32(unsafe.Add(mc.qpDBRec, prm.DoorbellRecordSendB), i&0xffff)
		prm.Store32(unsafe.Add(mg.qpDBRec, prm.DoorbellRecordSendB), i&0xffff)
		f.completeInC()
		g.complete()
		requireBenchCQE(t, mg, i-1)
	}
	cqBytes := int(benchCQECnt * prm.CQE64Size)
	require.Equal(t, unsafe.Slice((*byte)(mc.cq), cqBytes), unsafe.Slice((*byte)(mg.cq), cqBytes))
}

func TestQueueMemoryLayout(t *testing.T) {
	m := newTestMemory(t)
	for _, p := range []unsafe.Pointer{m.sq, m.cq, m.bf, m.payload} {
		require.Zero(t, uintptr(p)%pageSize, "rings and register start on a page")
	}
	require.Zero(t, uintptr(m.qpDBRec)%64)
	require.Zero(t, uintptr(m.cqDBRec)%64)
	require.NotEqual(t, m.qpDBRec, m.cqDBRec)
	for i := uint32(0); i < m.cqeCnt; i++ {
		require.Equal(t, uint8(prm.CQEInvalidOpOwn), u8(m.cqe(i), prm.CQEOpOwn))
	}
	_, err := newQueueMemory(100, 256)
	require.Error(t, err)
}
