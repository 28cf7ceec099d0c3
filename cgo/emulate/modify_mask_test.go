//go:build cgo && linux

package emulate

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// The IB_QP_* mask bits the tests below send.
const (
	mmState, mmAccess, mmPKey, mmPort, mmQKey = 1 << 0, 1 << 3, 1 << 4, 1 << 5, 1 << 6
	mmAV, mmMTU, mmTimeout, mmRetry, mmRNR    = 1 << 7, 1 << 8, 1 << 9, 1 << 10, 1 << 11
	mmRQPSN, mmRdAtom, mmMinRNR               = 1 << 12, 1 << 13, 1 << 15
	mmSQPSN, mmDestRdAtom, mmDestQPN          = 1 << 16, 1 << 17, 1 << 20
)

// Offsets in QUERY_QP's response, after its two address vectors.
const (
	qqAccess = 2*qpDestSize + 36
	qqState  = 2*qpDestSize + 44
	qqMinRNR = 2*qpDestSize + 51
	qqPort   = 2*qpDestSize + 52
	qqRetry  = 2*qpDestSize + 54
	qqRNR    = 2*qpDestSize + 55
)

// modifyKernel is an emulated kernel with a PD and a CQ, for the tests of
// MODIFY_QP.
type modifyKernel struct {
	k      *kernel
	a      *arena
	fd     int
	pd, cq uint32
	lid    uint16
}

func newModifyKernel(t *testing.T) *modifyKernel {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	pa, err := k.files[fd].uctx.dev.QueryPort(1)
	require.NoError(t, err)
	return &modifyKernel{k: k, a: a, fd: fd, pd: pd, cq: cq, lid: pa.LID}
}

// rcAtInit creates an RC QP and moves it to INIT with local write only;
// it returns its handle and QPN.
func (m *modifyKernel) rcAtInit(t *testing.T) (h, qpn uint32) {
	t.Helper()
	h, qpn = qpNumbered(t, m.k, m.a, m.fd, m.pd, m.cq, qptRC)
	require.Zero(t, m.modify(modifyQP{h: h, mask: mmState | mmPKey | mmPort | mmAccess, state: 1, port: 1, access: accessLocalWrite}))
	return h, qpn
}

func (m *modifyKernel) modify(q modifyQP) syscall.Errno { return modifyQPCmd(m.k, m.a, m.fd, q) }

// query returns QUERY_QP's response for h.
func (m *modifyKernel) query(t *testing.T, h uint32) []byte {
	t.Helper()
	q, en := queryQPCmd(m.k, m.a, m.fd, h)
	require.Zero(t, en)
	return q
}

// rtrOf is the move of h to RTR on port 1 towards dest.
func rtrOf(h, dest uint32, lid uint16) modifyQP {
	return modifyQP{h: h, mask: mmState | mmAV | mmMTU | mmDestQPN | mmRQPSN | mmDestRdAtom | mmMinRNR, state: 2, mtu: 3,
		dlid: lid, pathPort: 1, destQPN: dest, minRNR: 1, rdAtom: 1}
}

// rtsOf is the move of h from RTR to RTS with the given retry counts.
func rtsOf(h uint32, retry, rnrRetry uint8) modifyQP {
	return modifyQP{h: h, mask: mmState | mmTimeout | mmRetry | mmRNR | mmSQPSN | mmRdAtom, state: 3, timeout: 14,
		retry: retry, rnrRetry: rnrRetry, rdAtom: 1}
}

// mlx5_ib_modify_qp: new_state = attr_mask & IB_QP_STATE ? attr->qp_state :
// cur_state. A mask without STATE is a move to the state the QP is in, which
// ib_modify_qp_is_ok checks as such: INIT→INIT and RTS→RTS exist, RTR→RTR
// does not.
func TestModifyQPWithoutState(t *testing.T) {
	m := newModifyKernel(t)
	h, qpn := m.rcAtInit(t)

	require.Zero(t, m.modify(modifyQP{h: h, mask: mmAccess, access: accessLocalWrite | accessRemoteWrite}),
		"INIT with ACCESS_FLAGS only: INIT→INIT")
	q := m.query(t, h)
	require.Equal(t, uint8(1), q[qqState], "still INIT")
	// At INIT max_dest_rd_atomic is 0: of the flags, the context enables
	// remote write only (set_qpc_atomic_flags), and QUERY_QP reads the
	// enables back.
	require.Equal(t, uint32(accessRemoteWrite), ne.Uint32(q[qqAccess:]), "the access flags applied")
	require.Equal(t, unix.EINVAL, m.modify(modifyQP{h: h, mask: mmTimeout, timeout: 3}),
		"INIT with TIMEOUT only: not an attribute of INIT→INIT")

	require.Zero(t, m.modify(rtrOf(h, qpn, m.lid)))
	require.Equal(t, unix.EINVAL, m.modify(modifyQP{h: h, mask: mmMinRNR, minRNR: 12}),
		"RTR with MIN_RNR_TIMER only: RTR→RTR does not exist")
	require.Equal(t, uint8(1), m.query(t, h)[qqMinRNR], "a refused modify changes nothing")

	require.Zero(t, m.modify(rtsOf(h, 7, 7)))
	require.Zero(t, m.modify(modifyQP{h: h, mask: mmMinRNR, minRNR: 12}), "RTS with MIN_RNR_TIMER only: RTS→RTS")
	require.Zero(t, m.modify(modifyQP{h: h, mask: mmAccess, access: accessLocalWrite | accessRemoteRead}),
		"RTS with ACCESS_FLAGS only: RTS→RTS")
	q = m.query(t, h)
	require.Equal(t, uint8(3), q[qqState], "still RTS")
	require.Equal(t, uint8(12), q[qqMinRNR], "the RNR timer applied")
	require.Equal(t, uint32(accessRemoteRead), ne.Uint32(q[qqAccess:]), "the access flags applied (a read depth of 1: read enabled)")
}

// __mlx5_ib_modify_qp writes retry_cnt and rnr_retry into fields of 3 bits
// with MLX5_SET, unchecked, and dest_qp_num into one of 24 bits, 0 too.
func TestModifyQPRetryCountsMasked(t *testing.T) {
	m := newModifyKernel(t)
	h, qpn := m.rcAtInit(t)
	require.Zero(t, m.modify(rtrOf(h, qpn, m.lid)))
	require.Zero(t, m.modify(rtsOf(h, 9, 15)), "retry_cnt 9, rnr_retry 15")
	q := m.query(t, h)
	require.Equal(t, uint8(9&7), q[qqRetry], "retry_cnt keeps its low 3 bits")
	require.Equal(t, uint8(15&7), q[qqRNR], "rnr_retry keeps its low 3 bits")

	h2, _ := m.rcAtInit(t)
	require.Zero(t, m.modify(rtrOf(h2, 0, m.lid)), "dest_qp_num 0")
	require.Equal(t, uint32(0), ne.Uint32(m.query(t, h2)[2*qpDestSize+32:]))
}

// The kernel reads the attributes its mask names and no others: a value
// outside the mask is neither checked nor applied.
func TestModifyQPFieldsOutsideMask(t *testing.T) {
	m := newModifyKernel(t)
	h, _ := m.rcAtInit(t)
	// Port 0 and P_Key index 5 outside the mask (STATE|ACCESS_FLAGS).
	require.Zero(t, m.modify(modifyQP{h: h, mask: mmState | mmAccess, state: 1, access: accessLocalWrite | accessRemoteWrite}),
		"INIT→INIT with STATE|ACCESS_FLAGS, port 0 outside the mask")
	q := m.query(t, h)
	require.Equal(t, uint8(1), q[qqPort], "the port is the one given at RESET→INIT")
	require.Equal(t, uint32(accessRemoteWrite), ne.Uint32(q[qqAccess:]))

	ud, _ := qpNumbered(t, m.k, m.a, m.fd, m.pd, m.cq, qptUD)
	require.Zero(t, m.modify(modifyQP{h: ud, mask: mmState | mmPKey | mmPort | mmQKey, state: 1, port: 1, qkey: 0x11}))
	require.Zero(t, m.modify(modifyQP{h: ud, mask: mmState, state: 2, retry: 200, port: 9}))
	require.Zero(t, m.modify(modifyQP{h: ud, mask: mmState | mmSQPSN, state: 3, retry: 9, rnrRetry: 200}),
		"UD RTR→RTS with retry counts outside its mask")
	q = m.query(t, ud)
	require.Equal(t, uint8(3), q[qqState])
	require.Equal(t, uint8(1), q[qqPort])
	require.Zero(t, q[qqRetry], "not applied")
}

// mlx5_set_path refuses a static rate mlx5r_ib_rate has no code for (1,
// or past IB_RATE_1600_GBPS, 25) with EINVAL, and writes 0, the port's
// rate, for IB_RATE_800_GBPS (23) and IB_RATE_1600_GBPS, which QUERY_QP
// then reads back; another rate is read back as given.
func TestModifyQPStaticRate(t *testing.T) {
	m := newModifyKernel(t)
	for _, c := range []struct {
		rate, kept uint8
		want       syscall.Errno
	}{{1, 0, unix.EINVAL}, {26, 0, unix.EINVAL}, {255, 0, unix.EINVAL}, {0, 0, 0}, {2, 2, 0}, {22, 22, 0}, {23, 0, 0}, {24, 24, 0}, {25, 0, 0}} {
		h, qpn := m.rcAtInit(t)
		r := rtrOf(h, qpn, m.lid)
		r.rate = c.rate
		require.Equal(t, c.want, m.modify(r), "static rate %d", c.rate)
		q := m.query(t, h)
		if c.want != 0 {
			require.Equal(t, uint8(1), q[qqState], "static rate %d: refused, still INIT", c.rate)
			continue
		}
		require.Equal(t, uint8(2), q[qqState])
		require.Equal(t, c.kept, q[qdStaticRate], "static rate %d read back", c.rate)
	}
}

// On RoCE _ib_modify_qp resolves an RC path's destination MAC
// (ib_resolve_eth_dmac), and for a unicast destination resolved through
// the IP stack keeps the route's hop limit, 64, in place of the one given:
// QUERY_QP reads that back. A link-local destination from a RoCE v1
// source GID, and a multicast one, keep the hop limit given.
func TestModifyQPRoCEHopLimit(t *testing.T) {
	k := testKernel(t, ctx.LinkLayerEthernet)
	a := newArena(t)
	fd := openNode(t, k, 0)
	en, _, _ := getContext(k, a, fd, ucontextReq(4, 0, 0))
	require.Zero(t, en)
	pd, cq := pdAndCQ(t, k, a, fd)
	m := &modifyKernel{k: k, a: a, fd: fd, pd: pd, cq: cq}
	theirs := k.devs[1].GIDs[0]
	for _, c := range []struct {
		name string
		sgid uint8
		dgid ctx.GID
		want uint8
	}{
		{"IPv6, RoCE v2", 5, theirs[5].GID, 64},
		{"IPv4, RoCE v2", 3, theirs[3].GID, 64},
		{"link-local, RoCE v2", 1, theirs[1].GID, 64},
		{"link-local, RoCE v1", 0, theirs[0].GID, 1},
		{"multicast", 5, ctx.GID{0xff, 0x0e, 15: 1}, 1},
	} {
		h, qpn := m.rcAtInit(t)
		r := rtrOf(h, qpn, 0)
		r.global, r.sgid, r.dgid, r.hop = true, c.sgid, c.dgid, 1
		require.Zero(t, m.modify(r), c.name)
		require.Equal(t, c.want, m.query(t, h)[qdHopLimit], "%s: hop limit 1 read back", c.name)
	}
}
