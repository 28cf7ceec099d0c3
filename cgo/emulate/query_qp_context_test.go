//go:build cgo && linux

package emulate

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// More offsets in QUERY_QP's response (struct ib_uverbs_query_qp_resp),
// after its two address vectors.
const (
	qqPathMTU   = 2*qpDestSize + 46
	qqMaxRdAtom = 2*qpDestSize + 49
	qqMaxDestRd = 2*qpDestSize + 50
)

// TestQueryQPContextDepths: query_qp_attr (hw/mlx5/qp.c) reads the read
// and atomic depths back from the QP context, where __mlx5_ib_modify_qp
// wrote them as log_sra_max and log_rra_max = fls(depth - 1), leaving 0
// for a depth of 0: QUERY_QP answers 1 << log, the depth rounded up to a
// power of two and 1 for 0 (a QP that never set them, a UD QP). A UD QP's
// context holds a path MTU of 4096, which __mlx5_ib_modify_qp writes at
// every modify of a UD QP.
func TestQueryQPContextDepths(t *testing.T) {
	m := newModifyKernel(t)
	h, qpn := m.rcAtInit(t)
	q := m.query(t, h)
	require.Equal(t, uint8(1), q[qqMaxRdAtom], "INIT: log_sra_max 0")
	require.Equal(t, uint8(1), q[qqMaxDestRd], "INIT: log_rra_max 0")

	rtr := rtrOf(h, qpn, m.lid)
	rtr.rdAtom = 3
	require.Zero(t, m.modify(rtr))
	rts := rtsOf(h, 7, 7)
	rts.rdAtom = 3
	require.Zero(t, m.modify(rts))
	q = m.query(t, h)
	require.Equal(t, uint8(4), q[qqMaxRdAtom], "max_rd_atomic 3: 1 << fls(2)")
	require.Equal(t, uint8(4), q[qqMaxDestRd], "max_dest_rd_atomic 3: 1 << fls(2)")

	h0, qpn0 := m.rcAtInit(t)
	rtr = rtrOf(h0, qpn0, m.lid)
	rtr.rdAtom = 0
	require.Zero(t, m.modify(rtr))
	rts = rtsOf(h0, 7, 7)
	rts.rdAtom = 0
	require.Zero(t, m.modify(rts))
	q = m.query(t, h0)
	require.Equal(t, uint8(1), q[qqMaxRdAtom], "max_rd_atomic 0: the field left 0")
	require.Equal(t, uint8(1), q[qqMaxDestRd], "max_dest_rd_atomic 0: the field left 0")

	ud, _ := qpNumbered(t, m.k, m.a, m.fd, m.pd, m.cq, qptUD)
	require.Zero(t, m.query(t, ud)[qqPathMTU], "a UD QP never modified")
	require.Zero(t, m.modify(modifyQP{h: ud, mask: mmState | mmPKey | mmPort | mmQKey, state: 1, port: 1, qkey: 0x11}))
	q = m.query(t, ud)
	require.Equal(t, uint8(5), q[qqPathMTU], "a UD QP's context: IB_MTU_4096")
	require.Equal(t, uint8(1), q[qqMaxRdAtom])
	require.Equal(t, uint8(1), q[qqMaxDestRd])
}
