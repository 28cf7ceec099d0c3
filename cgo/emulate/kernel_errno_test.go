//go:build cgo && linux

package emulate

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/kerrno"
)

// Refusals, and acceptances, checked against the kernel's code: each case
// names the function of drivers/infiniband/ that decides it.

// rcQPOn creates an RC QP with a receive ring on pd and cq.
func rcQPOn(t *testing.T, k *kernel, a *arena, fd int, pd, cq uint32, typ uint8) uint32 {
	t.Helper()
	h, _ := qpNumbered(t, k, a, fd, pd, cq, typ)
	return h
}

// qpNumbered is rcQPOn returning the QPN too.
func qpNumbered(t *testing.T, k *kernel, a *arena, fd int, pd, cq uint32, typ uint8) (h, qpn uint32) {
	t.Helper()
	const sqCnt, rqCnt, rqShift = 16, 8, 5
	buf, db := qpMemory(t, rqCnt<<rqShift, sqCnt)
	h, qpn, _, en := createQPCmd(k, a, fd, pd, cq, cq, typ, qpCaps{sendWR: 8, recvWR: 8, sendSGE: 1, recvSGE: 2},
		mlx5QPReq(addrOf(buf), addrOf(db), sqCnt, rqCnt, rqShift, 0, 0))
	require.Zero(t, en)
	return h, qpn
}

// pdAndCQ allocates a PD and a CQ of 64 entries.
func pdAndCQ(t *testing.T, k *kernel, a *arena, fd int) (pd, cq uint32) {
	t.Helper()
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	ring, db := cqMemory(t, 64, 64)
	cq, _, _, en = createCQCmd(k, a, fd, 63, 0, -1, mlx5CQReq(addrOf(ring), addrOf(db), 64), 8)
	require.Zero(t, en)
	return pd, cq
}

// create_cq_user (hw/mlx5/cq.c, since Linux 5.7) reads
// min(inlen, sizeof(struct mlx5_ib_create_cq)) bytes and refuses less than
// offsetof(flags) with EINVAL: the 24 bytes rdma-core before v29 sends
// (the structure ended at flags then) are taken, the fields after them
// zero.
func TestCreateCQShortDriverData(t *testing.T) {
	k, a, fd := objectKernel(t)
	ring, db := cqMemory(t, 64, 64)
	req := mlx5CQReq(addrOf(ring), addrOf(db), 64)
	h, _, _, en := createCQCmd(k, a, fd, 63, 0, -1, req[:24], 8)
	require.Zero(t, en, "CREATE_CQ with the 24 bytes of rdma-core before v29")
	_, _, en = destroyCQCmd(k, a, fd, h)
	require.Zero(t, en)
	flagged := append([]byte{}, req[:24]...)
	flagged[22] = 0x80
	_, _, _, en = createCQCmd(k, a, fd, 63, 0, -1, flagged, 8)
	require.Equal(t, unix.EINVAL, en, "an unknown flag in the 24 bytes")
	_, _, _, en = createCQCmd(k, a, fd, 63, 0, -1, req[:20], 8)
	require.Equal(t, unix.EINVAL, en, "CREATE_CQ with 20 bytes: shorter than offsetof(flags)")
	_, _, _, en = createCQCmd(k, a, fd, 63, 0, -1, nil, 8)
	require.Equal(t, unix.EINVAL, en, "CREATE_CQ without driver data")
	// CQ_CREATE's driver data has a length in bytes.
	en, ih, _, _ := ioctlCreateCQ(k, a, fd, 63, req[:22])
	require.Zero(t, en, "CQ_CREATE with the 22 bytes up to the flags")
	_, _, en = destroyCQCmd(k, a, fd, uint32(ih))
	require.Zero(t, en)
	en, _, _, _ = ioctlCreateCQ(k, a, fd, 63, req[:21])
	require.Equal(t, unix.EINVAL, en, "CQ_CREATE with 21 bytes")
	require.Zero(t, objectCount(k, fd))
}

// The legacy CREATE_QP and DESTROY_QP and DESTROY_CQ never look at their
// reserved field (uverbs_cmd.c ib_uverbs_create_qp, ib_uverbs_destroy_qp,
// ib_uverbs_destroy_cq); only EX_CREATE_CQ and EX_CREATE_QP refuse one.
func TestReservedFieldsTheKernelIgnores(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)

	_, respAddr := a.alloc(createQPRespSize + mlx5CreateQPResp)
	core := legacyCreateRCQP(t, respAddr, pd, cq, func(req []byte) {
		req[55] = 0xff // reserved
	})
	cmd, n := a.writeCmd(cmdCreateQP, core, (createQPRespSize+mlx5CreateQPResp)/4)
	_, en := k.write(fd, cmd, n)
	require.Zero(t, en, "CREATE_QP with its reserved byte set")
	qp := rcQPOn(t, k, a, fd, pd, cq, qptRC)

	destroy := func(command, h uint32, respSize int) syscall.Errno {
		_, respAddr := a.alloc(respSize)
		core := respCore(respAddr, make([]byte, 8)...)
		ne.PutUint32(core[8:], h)
		ne.PutUint32(core[12:], 0xffffffff) // reserved
		cmd, n := a.writeCmd(command, core, respSize/4)
		_, en := k.write(fd, cmd, n)
		return en
	}
	require.Zero(t, destroy(cmdDestroyQP, qp, destroyQPRespSize), "DESTROY_QP with its reserved field set")
	for h, o := range k.files[fd].uctx.objects {
		if o.kind == objQP {
			require.Zero(t, destroy(cmdDestroyQP, h, destroyQPRespSize))
		}
	}
	require.Zero(t, destroy(cmdDestroyCQ, cq, destroyCQRespSize), "DESTROY_CQ with its reserved field set")
}

// modify_qp (uverbs_cmd.c), _ib_modify_qp (verbs.c) and mlx5_ib_modify_qp
// never check the access flags for unknown bits: set_qpc's access part
// (hw/mlx5/qp.c) reads remote read, write and atomic and ignores the
// rest, as an MR's flags passed to a QP carry (relaxed ordering, MW bind).
func TestModifyQPIgnoresUnknownAccessBits(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	h := rcQPOn(t, k, a, fd, pd, cq, qptRC)
	const mState, mAccess, mPKey, mPort = 1 << 0, 1 << 3, 1 << 4, 1 << 5
	access := uint32(accessLocalWrite | accessRemoteWrite | accessMWBind | accessRelaxed | 1<<29)
	require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: h, mask: mState | mPKey | mPort | mAccess, state: 1, port: 1, access: access}))
	q, en := queryQPCmd(k, a, fd, h)
	require.Zero(t, en)
	// QUERY_QP reads back the context's remote enables only (no
	// LOCAL_WRITE, no unknown bit).
	require.Equal(t, uint32(accessRemoteWrite), ne.Uint32(q[2*qpDestSize+36:]), "the known bits are applied")
}

// modify_qp (uverbs_cmd.c, since "RDMA/uverbs: Restrict usage of
// privileged QKEYs", Linux 6.4 and the stable kernels of June 2023)
// refuses a Q_Key with bit 31 set with EPERM unless the caller holds
// CAP_NET_RAW (or privileged Q_Keys were allowed through netlink).
func TestModifyQPControlledQKey(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	h := rcQPOn(t, k, a, fd, pd, cq, qptUD)
	const mState, mPKey, mPort, mQKey = 1 << 0, 1 << 4, 1 << 5, 1 << 6
	init := modifyQP{h: h, mask: mState | mPKey | mPort | mQKey, state: 1, port: 1, qkey: 0x80010000}
	saved := kerrno.HasRawCap
	t.Cleanup(func() { kerrno.HasRawCap = saved })
	kerrno.HasRawCap = func() bool { return false }
	require.Equal(t, unix.EPERM, modifyQPCmd(k, a, fd, init), "a controlled Q_Key without CAP_NET_RAW")
	st, err := k.files[fd].uctx.objects[h].qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateReset, st, "refused: still RESET")
	init.qkey = 0x7fffffff
	require.Zero(t, modifyQPCmd(k, a, fd, init), "bit 31 clear")
	kerrno.HasRawCap = func() bool { return true }
	init.qkey = 0x80010000
	require.Zero(t, modifyQPCmd(k, a, fd, init), "INIT→INIT with a controlled Q_Key and CAP_NET_RAW")
}

// modify_qp (uverbs_cmd.c) refuses, with EINVAL, a port (IB_QP_PORT), an
// address vector's port or an alternate path's ports the device has not,
// and a state past ERR, before it looks at the Q_Key; what the core
// (rdma_fill_sgid_attr) and mlx5_ib (the udata of EX_MODIFY_QP, the
// transition table, a current state that is not the QP's, the P_Key index)
// refuse comes after it: a controlled Q_Key without CAP_NET_RAW is EPERM
// there. Nothing changes on a refusal.
func TestModifyQPControlledQKeyOrder(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	h := rcQPOn(t, k, a, fd, pd, cq, qptUD)
	saved := kerrno.HasRawCap
	t.Cleanup(func() { kerrno.HasRawCap = saved })
	kerrno.HasRawCap = func() bool { return false }
	const mCurState = 1 << 1
	init := modifyQP{h: h, mask: mmState | mmPKey | mmPort | mmQKey, state: 1, port: 1, qkey: 0x80010000}
	for name, c := range map[string]struct {
		mod  func(m *modifyQP)
		alt  *altPath
		ex   []byte // EX_MODIFY_QP with this driver data
		want syscall.Errno
	}{
		"port 2 of 1":                   {mod: func(m *modifyQP) { m.port = 2 }, want: unix.EINVAL},
		"address vector port 0":         {mod: func(m *modifyQP) { m.mask |= mmAV }, want: unix.EINVAL},
		"alternate port 2 of 1":         {alt: &altPath{2, 2, 0, false}, want: unix.EINVAL},
		"new state past ERR":            {mod: func(m *modifyQP) { m.state = 7 }, want: unix.EINVAL},
		"current state past ERR":        {mod: func(m *modifyQP) { m.mask |= mCurState; m.cur = 7 }, want: unix.EINVAL},
		"P_Key index 5 of 1":            {mod: func(m *modifyQP) { m.pkey = 5 }, want: unix.EPERM},
		"RESET→RTR":                     {mod: func(m *modifyQP) { m.state = 2 }, want: unix.EPERM},
		"current state not RESET":       {mod: func(m *modifyQP) { m.mask |= mCurState; m.cur = 1 }, want: unix.EPERM},
		"alternate SGID past the table": {alt: &altPath{1, 1, 200, true}, want: unix.EPERM},
		"driver data too short":         {ex: make([]byte, 8), want: unix.EPERM},
	} {
		m := init
		if c.mod != nil {
			c.mod(&m)
		}
		send := func() syscall.Errno {
			switch {
			case c.alt != nil:
				m.mask |= mmAltPath
				return modifyQPAltCmd(k, a, fd, m, *c.alt)
			case c.ex != nil:
				_, en := exModifyQPCmd(k, a, fd, m, 0, c.ex, exModifyQPRespSize/8, 0)
				return en
			}
			return modifyQPCmd(k, a, fd, m)
		}
		require.Equal(t, c.want, send(), name)
		// With CAP_NET_RAW the Q_Key passes and the other check refuses.
		kerrno.HasRawCap = func() bool { return true }
		require.Equal(t, unix.EINVAL, send(), "%s, with CAP_NET_RAW", name)
		kerrno.HasRawCap = func() bool { return false }
		st, err := k.files[fd].uctx.objects[h].qp.State()
		require.NoError(t, err)
		require.Equal(t, ctx.QPStateReset, st, "%s: refused, still RESET", name)
	}
	kerrno.HasRawCap = func() bool { return true }
	require.Zero(t, modifyQPCmd(k, a, fd, init), "with CAP_NET_RAW")
}

// ib_uverbs_ex_modify_qp takes IB_QP_RATE_LIMIT; mlx5_ib_modify_qp then
// refuses it on every QP type but raw packet through the transition
// checks (ib_modify_qp_is_ok: it is an optional attribute of raw packet
// QPs only; modify_dci_qp_is_ok and mlx5_ib_modify_dct: not in their
// masks): EINVAL, not EOPNOTSUPP.
func TestExModifyQPRateLimitOnRC(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	h := rcQPOn(t, k, a, fd, pd, cq, qptRC)
	const mState, mAccess, mPKey, mPort = 1 << 0, 1 << 3, 1 << 4, 1 << 5
	require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: h, mask: mState | mPKey | mPort | mAccess, state: 1, port: 1}))
	_, en := exModifyQPCmd(k, a, fd, modifyQP{h: h, mask: qpAttrRateLimit}, 1000, nil, exModifyQPRespSize/8, 0)
	require.Equal(t, unix.EINVAL, en, "a rate limit on an RC QP")
}

// mlx5_ib writes dest_qp_num with MLX5_SET into the 24-bit remote_qpn of
// the QP context (__mlx5_ib_modify_qp); neither it nor the core checks
// the value, so the high byte is dropped.
func TestModifyQPDestQPNHighBits(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	h := rcQPOn(t, k, a, fd, pd, cq, qptRC)
	peer := rcQPOn(t, k, a, fd, pd, cq, qptRC)
	pqpn := k.files[fd].uctx.objects[peer].qp.Descriptor().QPN
	pa, err := k.files[fd].uctx.dev.QueryPort(1)
	require.NoError(t, err)
	const (
		mState, mAccess, mPKey, mPort = 1 << 0, 1 << 3, 1 << 4, 1 << 5
		mAV, mMTU, mRQPSN, mDestRd    = 1 << 7, 1 << 8, 1 << 12, 1 << 17
		mMinRNR, mDestQPN             = 1 << 15, 1 << 20
	)
	require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: h, mask: mState | mPKey | mPort | mAccess, state: 1, port: 1}))
	rtr := modifyQP{h: h, mask: mState | mAV | mMTU | mDestQPN | mRQPSN | mDestRd | mMinRNR, state: 2, mtu: 3,
		dlid: pa.LID, pathPort: 1, destQPN: 0x5a000000 | pqpn, minRNR: 1, rdAtom: 1}
	require.Zero(t, modifyQPCmd(k, a, fd, rtr))
	q, en := queryQPCmd(k, a, fd, h)
	require.Zero(t, en)
	require.Equal(t, pqpn, ne.Uint32(q[2*qpDestSize+32:]), "dest_qp_num keeps its low 24 bits")
}

// create_user_qp (hw/mlx5/qp.c): set_rq_size gives a QP without a receive
// queue (one on an SRQ, or asking for no receive work requests: qp_has_rq)
// a count and shift of 0, and the request's rq_wqe_count and rq_wqe_shift
// must equal them, EINVAL otherwise.
func TestCreateQPReceiveRingWithoutReceiveQueue(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	ring, db := srqMemory(t, 16, 32)
	srq, _, _, _, en := createSRQCmd(k, a, fd, pd, 15, 1, mlx5SRQReq(addrOf(ring), addrOf(db), 0))
	require.Zero(t, en)
	buf, qdb := qpMemory(t, 8<<5, 16)
	caps := qpCaps{sendWR: 8, recvWR: 8, sendSGE: 1, recvSGE: 1}
	n := objectCount(k, fd)
	_, _, en = createQPOnSRQ(k, a, fd, pd, cq, srq, qptRC, caps, mlx5QPReq(addrOf(buf), addrOf(qdb), 16, 8, 5, 0, 0))
	require.Equal(t, unix.EINVAL, en, "a receive ring for a QP on an SRQ")
	_, _, en = createQPOnSRQ(k, a, fd, pd, cq, srq, qptRC, caps, mlx5QPReq(addrOf(buf), addrOf(qdb), 16, 0, 5, 0, 0))
	require.Equal(t, unix.EINVAL, en, "a receive shift for a QP on an SRQ")
	_, _, _, en = createQPCmd(k, a, fd, pd, cq, cq, qptRC, qpCaps{sendWR: 8, sendSGE: 1}, mlx5QPReq(addrOf(buf), addrOf(qdb), 16, 0, 5, 0, 0))
	require.Equal(t, unix.EINVAL, en, "a receive shift for a QP with no receive work requests")
	require.Equal(t, n, objectCount(k, fd), "nothing created")
	_, _, en = createQPOnSRQ(k, a, fd, pd, cq, srq, qptRC, caps, mlx5QPReq(addrOf(buf), addrOf(qdb), 16, 0, 0, 0, 0))
	require.Zero(t, en, "no receive ring on the SRQ")
}

// REG_DMABUF_MR: the ioctl framework looks the PD attribute up before the
// handler runs (uverbs_ioctl.c uverbs_process_attr, rdma_core.c
// lookup_get_idr_uobject: ENOENT for a handle that names nothing, EINVAL
// for another type); the handler (uverbs_std_types_mr.c) then checks the
// page offsets (EINVAL) and takes local write, remote read, write and
// atomic and relaxed ordering only (uverbs_get_flags32: EINVAL for any
// other bit), before ib_check_mr_access.
func TestRegDMABufMRRefusals(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	memfd, err := unix.MemfdCreate("not-a-dmabuf", unix.MFD_CLOEXEC)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Close(memfd) })
	dmabufFD := memfd
	reg := func(pd uint32, offset, iova uint64, access uint32) syscall.Errno {
		_, lkey := a.alloc(4)
		_, rkey := a.alloc(4)
		hdr, _ := a.ioctlCmd(objectMR, methodRegDMABufMR,
			testAttr{id: attrDMABufHandle, flags: attrFlagMandatory},
			testAttr{id: attrDMABufPDHandle, flags: attrFlagMandatory, data: uint64(pd)},
			inline(attrDMABufOffset, offset), inline(attrDMABufLength, 4096), inline(attrDMABufIOVA, iova),
			testAttr{id: attrDMABufFD, length: 4, flags: attrFlagMandatory, data: uint64(uint32(dmabufFD))},
			testAttr{id: attrDMABufAccessFlags, length: 4, flags: attrFlagMandatory, data: uint64(access)},
			out(attrDMABufRespLKey, lkey, 4), out(attrDMABufRespRKey, rkey, 4))
		return k.ioctl(fd, rdmaVerbsIoctl, hdr)
	}
	lw := uint32(accessLocalWrite)
	require.Equal(t, unix.EINVAL, reg(pd, 0, 0, lw), "a memfd is not a dma-buf (dma_buf_get)")
	require.Equal(t, unix.ENOENT, reg(0xbeef, 0, 0, lw), "a PD handle that names nothing")
	require.Equal(t, unix.EINVAL, reg(cq, 0, 0, lw), "a CQ handle as the PD")
	require.Equal(t, unix.ENOENT, reg(0xbeef, 0, 1, accessOnDemand), "the PD is looked up first")
	require.Equal(t, unix.EINVAL, reg(pd, 0, 0, lw|accessOnDemand), "on-demand paging is not a dma-buf flag")
	require.Equal(t, unix.EINVAL, reg(pd, 0, 0, lw|accessMWBind), "MW bind is not a dma-buf flag")
	require.Equal(t, unix.EINVAL, reg(pd, 0, 1, lw|accessOnDemand), "page offsets apart and a flag the method does not take")
	require.Equal(t, unix.EINVAL, reg(pd, 0, 0, lw|accessRelaxed), "relaxed ordering passes: a memfd is not a dma-buf")
	// The descriptor is a u32 attribute (rdma-core's fill_attr_in_uint32),
	// looked up by dma_buf_get in the driver.
	dmabufFD = 1 << 20
	require.Equal(t, unix.EBADF, reg(pd, 0, 0, lw), "a descriptor that is not open")
	dmabufFD = -1
	require.Equal(t, unix.EBADF, reg(pd, 0, 0, lw), "descriptor -1")
	// ib_umem_dmabuf_get checks that offset + length does not wrap
	// before it looks the descriptor up.
	dmabufFD = 1 << 20
	require.Equal(t, unix.EINVAL, reg(pd, ^uint64(0)&^0xfff, 0, lw), "offset + length wraps, before the descriptor")
	require.Zero(t, objectCount(k, fd)-2, "nothing registered")
}

// legacyCreateRCQP returns the request of a legacy CREATE_QP (struct
// ib_uverbs_create_qp after the response address, then mlx5's vendor
// request) of an RC QP in PD pd with both CQs cq, 8 send and receive
// work requests, 1 send and 2 receive SGEs, and rings of its own;
// edit changes the core request before the vendor part is added.
func legacyCreateRCQP(t *testing.T, respAddr uintptr, pd, cq uint32, edit func(req []byte)) []byte {
	buf, db := qpMemory(t, 8<<5, 16)
	core := respCore(respAddr, make([]byte, 48)...)
	ne.PutUint32(core[16:], pd)
	ne.PutUint32(core[20:], cq)
	ne.PutUint32(core[24:], cq)
	ne.PutUint32(core[32:], 8)
	ne.PutUint32(core[36:], 8)
	ne.PutUint32(core[40:], 1)
	ne.PutUint32(core[44:], 2)
	core[53] = qptRC
	edit(core)
	return append(core, mlx5QPReq(addrOf(buf), addrOf(db), 16, 8, 5, 0, 0)...)
}

// TestCreateQPReceiveSGEsWithoutReceiveQueue: the receive SGEs of a QP
// without a receive queue of its own (it receives through an SRQ, or asks
// for no receive work requests) size nothing, and neither libmlx5
// (mlx5_calc_rq_size returns before mlx5_calc_rcv_wqe looks at them) nor
// mlx5_ib (set_rq_size, !qp_has_rq) checks them: CREATE_QP takes any
// count there. A QP with a receive queue still has them checked.
func TestCreateQPReceiveSGEsWithoutReceiveQueue(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, cq := pdAndCQ(t, k, a, fd)
	ring, db := srqMemory(t, 16, 32)
	srq, _, _, _, en := createSRQCmd(k, a, fd, pd, 15, 1, mlx5SRQReq(addrOf(ring), addrOf(db), 0))
	require.Zero(t, en)
	many := k.files[fd].dev.Attr.MaxSGE + 1
	buf, qdb := qpMemory(t, 0, 16)
	req := mlx5QPReq(addrOf(buf), addrOf(qdb), 16, 0, 0, 0, 0)
	_, _, en = createQPOnSRQ(k, a, fd, pd, cq, srq, qptRC, qpCaps{sendWR: 8, recvWR: 8, sendSGE: 1, recvSGE: many}, req)
	require.Zero(t, en, "receive SGEs of a QP on an SRQ")
	buf2, qdb2 := qpMemory(t, 0, 16)
	_, _, _, en = createQPCmd(k, a, fd, pd, cq, cq, qptRC, qpCaps{sendWR: 8, sendSGE: 1, recvSGE: many}, mlx5QPReq(addrOf(buf2), addrOf(qdb2), 16, 0, 0, 0, 0))
	require.Zero(t, en, "receive SGEs of a QP with no receive work requests")
	buf3, qdb3 := qpMemory(t, 8<<5, 16)
	_, _, _, en = createQPCmd(k, a, fd, pd, cq, cq, qptRC, qpCaps{sendWR: 8, recvWR: 8, sendSGE: 1, recvSGE: many}, mlx5QPReq(addrOf(buf3), addrOf(qdb3), 16, 8, 5, 0, 0))
	require.Equal(t, unix.EINVAL, en, "receive SGEs of a QP with a receive queue")
}
