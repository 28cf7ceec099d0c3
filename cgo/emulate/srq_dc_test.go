//go:build cgo && linux

package emulate

import (
	"math/rand"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// srqMemory is an SRQ ring (its free list linked 0→1→…) and a doorbell
// record as libmlx5 allocates them: page-aligned, mmap'd.
// A page that cannot be read follows them.
func srqMemory(t *testing.T, count, stride int) (ring, db []byte) {
	n := count * stride
	size := (n+64+4095)/4096*4096 + 4096
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	require.NoError(t, unix.Mprotect(mem[size-4096:], unix.PROT_NONE))
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	for i := 0; i < count; i++ {
		mem[i*stride+2], mem[i*stride+3] = byte((i+1)>>8), byte(i+1)
	}
	return mem[:n], mem[n : n+64]
}

// mlx5SRQReq is a struct mlx5_ib_create_srq.
func mlx5SRQReq(buf, db uintptr, flags uint32) []byte {
	b := make([]byte, mlx5CreateSRQSize)
	ne.PutUint64(b[0:], uint64(buf))
	ne.PutUint64(b[8:], uint64(db))
	ne.PutUint32(b[16:], flags)
	ne.PutUint32(b[24:], 0xffffff) // uidx
	return b
}

// createSRQCmd sends CREATE_SRQ and returns the handle, max_wr and max_sge
// of the core response and the srqn of mlx5's.
func createSRQCmd(k *kernel, a *arena, fd int, pd, maxWR, maxSGE uint32, vendor []byte) (h, gotWR, gotSGE, srqn uint32, en syscall.Errno) {
	resp, respAddr := a.alloc(createSRQRespSize + mlx5CreateSRQRespSize)
	core := respCore(respAddr, make([]byte, createSRQSize-8)...)
	ne.PutUint64(core[8:], srqUserHandle)
	ne.PutUint32(core[16:], pd)
	ne.PutUint32(core[20:], maxWR)
	ne.PutUint32(core[24:], maxSGE)
	core = append(core, vendor...)
	buf, n := a.writeCmd(cmdCreateSRQ, core, (createSRQRespSize+mlx5CreateSRQRespSize)/4)
	if _, en = k.write(fd, buf, n); en != 0 {
		return 0, 0, 0, 0, en
	}
	return ne.Uint32(resp), ne.Uint32(resp[4:]), ne.Uint32(resp[8:]), ne.Uint32(resp[createSRQRespSize:]), 0
}

func modifySRQCmd(k *kernel, a *arena, fd int, h, mask, maxWR, limit uint32) syscall.Errno {
	core := make([]byte, 16)
	ne.PutUint32(core[0:], h)
	ne.PutUint32(core[4:], mask)
	ne.PutUint32(core[8:], maxWR)
	ne.PutUint32(core[12:], limit)
	buf, n := a.writeCmd(cmdModifySRQ, core, 0)
	_, en := k.write(fd, buf, n)
	return en
}

// querySRQCmd returns max_wr, max_sge and srq_limit.
func querySRQCmd(k *kernel, a *arena, fd int, h uint32) (maxWR, maxSGE, limit uint32, en syscall.Errno) {
	resp, respAddr := a.alloc(querySRQRespSize)
	core := respCore(respAddr, make([]byte, 8)...)
	ne.PutUint32(core[8:], h)
	buf, n := a.writeCmd(cmdQuerySRQ, core, querySRQRespSize/4)
	if _, en = k.write(fd, buf, n); en != 0 {
		return 0, 0, 0, en
	}
	return ne.Uint32(resp), ne.Uint32(resp[4:]), ne.Uint32(resp[8:]), 0
}

func destroySRQCmd(k *kernel, a *arena, fd int, h uint32) syscall.Errno {
	_, respAddr := a.alloc(destroySRQRespSize)
	core := respCore(respAddr, make([]byte, 8)...)
	ne.PutUint32(core[8:], h)
	buf, n := a.writeCmd(cmdDestroySRQ, core, destroySRQRespSize/4)
	_, en := k.write(fd, buf, n)
	return en
}

// createQPOnSRQ sends CREATE_QP naming an SRQ (is_srq, srq_handle).
func createQPOnSRQ(k *kernel, a *arena, fd int, pd, cq, srq uint32, typ uint8, c qpCaps, vendor []byte) (h, qpn uint32, en syscall.Errno) {
	resp, respAddr := a.alloc(createQPRespSize + mlx5CreateQPResp)
	core := respCore(respAddr, make([]byte, 48)...)
	ne.PutUint32(core[16:], pd)
	ne.PutUint32(core[20:], cq)
	ne.PutUint32(core[24:], cq)
	ne.PutUint32(core[28:], srq)
	ne.PutUint32(core[32:], c.sendWR)
	ne.PutUint32(core[36:], c.recvWR)
	ne.PutUint32(core[40:], c.sendSGE)
	ne.PutUint32(core[44:], c.recvSGE)
	ne.PutUint32(core[48:], c.inline)
	ne.PutUint64(core[8:], qpUserHandle)
	core[53] = typ
	core[54] = 1 // is_srq
	core = append(core, vendor...)
	buf, n := a.writeCmd(cmdCreateQP, core, (createQPRespSize+mlx5CreateQPResp)/4)
	if _, en = k.write(fd, buf, n); en != 0 {
		return 0, 0, en
	}
	return ne.Uint32(resp), ne.Uint32(resp[4:]), 0
}

// dctReq is a struct mlx5_ib_create_qp for a DCT: the type flag and the
// access key in the union with sq_buf_addr.
func dctReq(flags uint32, key uint64) []byte {
	b := mlx5QPReq(0, 0, 0, 0, 0, mlx5QPFlagDCT|flags, 0)
	ne.PutUint64(b[40:], key)
	return b
}

// modifyQPBytes lays out m as a struct ib_uverbs_modify_qp.
func modifyQPBytes(m modifyQP) []byte {
	b := make([]byte, modifyQPSize)
	copy(b, m.dgid[:])
	ne.PutUint16(b[20:], m.dlid)
	b[qdSGIDIndex], b[qdHopLimit], b[qdStaticRate] = m.sgid, m.hop, m.rate
	if m.global {
		b[qdIsGlobal] = 1
	}
	b[31] = m.pathPort
	ne.PutUint32(b[2*qpDestSize:], m.h)
	ne.PutUint32(b[2*qpDestSize+4:], m.mask)
	ne.PutUint32(b[2*qpDestSize+8:], m.qkey)
	ne.PutUint32(b[2*qpDestSize+20:], m.destQPN)
	ne.PutUint32(b[2*qpDestSize+24:], m.access)
	ne.PutUint16(b[2*qpDestSize+28:], m.pkey)
	o := 2*qpDestSize + 32
	b[o], b[o+1], b[o+2] = m.state, m.cur, m.mtu
	b[o+5], b[o+6], b[o+7], b[o+8] = m.rdAtom, m.rdAtom, m.minRNR, m.port
	b[o+9], b[o+10], b[o+11] = m.timeout, m.retry, m.rnrRetry
	return b
}

// exModifyQPCmd sends EX_MODIFY_QP with driver data in (struct
// mlx5_ib_modify_qp, nil for none) and room for outWords/driverOutWords
// 8-byte words of core and driver response; it returns the driver
// response.
func exModifyQPCmd(k *kernel, a *arena, fd int, m modifyQP, rateLimit uint32, driver []byte, outWords, driverOutWords int) ([]byte, syscall.Errno) {
	core := make([]byte, exModifyQPSize)
	copy(core, modifyQPBytes(m))
	ne.PutUint32(core[modifyQPSize:], rateLimit)
	resp, respAddr := a.alloc(outWords*8 + driverOutWords*8)
	buf, n, _ := a.writeExCmd(exCmdModifyQP, core, driver, respAddr, outWords, driverOutWords)
	_, en := k.write(fd, buf, n)
	return resp[outWords*8:], en
}

// objectCount is the number of objects of the node's context.
func objectCount(k *kernel, fd int) int { return len(k.files[fd].uctx.objects) }

// TestKernelSharedReceiveQueues creates an SRQ through CREATE_SRQ over
// memory the test owns, an RC QP on it, queries and modifies it, and checks
// every refusal with the kernel's errno, and that a refusal creates or
// changes nothing.
func TestKernelSharedReceiveQueues(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	ring, db := srqMemory(t, 16, 32)
	vendor := mlx5SRQReq(addrOf(ring), addrOf(db), 0)
	attr := k.files[fd].dev.Attr

	n0 := objectCount(k, fd)
	for name, c := range map[string]struct {
		pd, wr, sge uint32
		vendor      []byte
		want        syscall.Errno
	}{
		"unknown PD":                {0xbeef, 15, 1, vendor, unix.EINVAL},
		"max_wr beyond log_max_srq": {pd, attr.MaxSRQWR + 1, 1, vendor, unix.EINVAL},
		"max_sge beyond the WQE":    {pd, 15, attr.MaxSGE + 1, vendor, unix.EINVAL},
		"reserved0 set":             {pd, 15, 1, func() []byte { v := mlx5SRQReq(addrOf(ring), addrOf(db), 0); v[20] = 1; return v }(), unix.EINVAL},
		"reserved1 set":             {pd, 15, 1, func() []byte { v := mlx5SRQReq(addrOf(ring), addrOf(db), 0); v[28] = 1; return v }(), unix.EINVAL},
		"trailing bytes set":        {pd, 15, 1, append(append([]byte{}, vendor...), 0, 0, 0, 0, 0, 0, 0, 1), unix.EINVAL},
		"WQE signatures":            {pd, 15, 1, mlx5SRQReq(addrOf(ring), addrOf(db), mlx5SRQFlagSig), unix.EOPNOTSUPP},
		"one-WQE SRQ":               {pd, 0, 1, vendor, unix.EOPNOTSUPP},
		"ring not mapped":           {pd, 15, 1, mlx5SRQReq(a.guard, addrOf(db), 0), unix.EFAULT},
		"ring at 0":                 {pd, 15, 1, mlx5SRQReq(0, addrOf(db), 0), unix.EFAULT},
		"record not mapped":         {pd, 15, 1, mlx5SRQReq(addrOf(ring), a.guard, 0), unix.EFAULT},
		"ring past its mapping":     {pd, 1023, 1, vendor, unix.EFAULT},
		"misaligned ring":           {pd, 15, 1, mlx5SRQReq(addrOf(ring)+16, addrOf(db), 0), unix.EINVAL},
		"no driver data":            {pd, 15, 1, nil, unix.EFAULT},
	} {
		_, _, _, _, en := createSRQCmd(k, a, fd, c.pd, c.wr, c.sge, c.vendor)
		require.Equal(t, c.want, en, name)
		require.Equal(t, n0, objectCount(k, fd), "%s: nothing created", name)
	}
	// A response buffer too short for the core response.
	_, respAddr := a.alloc(64)
	core := respCore(respAddr, make([]byte, createSRQSize-8)...)
	ne.PutUint32(core[16:], pd)
	ne.PutUint32(core[20:], 15)
	ne.PutUint32(core[24:], 1)
	buf, n := a.writeCmd(cmdCreateSRQ, append(core, vendor...), 2)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.ENOSPC, en, "response shorter than ib_uverbs_create_srq_resp")
	buf, n = a.writeCmd(cmdCreateSRQ, core[:12], createSRQRespSize/4)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.ENOSPC, en, "request shorter than ib_uverbs_create_srq")
	require.Equal(t, n0, objectCount(k, fd))

	h, wr, sge, srqn, en := createSRQCmd(k, a, fd, pd, 15, 1, vendor)
	require.Zero(t, en)
	require.Equal(t, uint32(15), wr, "max_wr: the WQE count less one")
	require.Equal(t, uint32(1), sge)
	require.NotZero(t, srqn)
	o := k.files[fd].uctx.objects[h]
	require.Equal(t, objSRQ, o.kind)
	d := o.srq.srq.Descriptor()
	require.Equal(t, srqn, d.SRQN)
	require.Equal(t, unsafe.Pointer(&ring[0]), d.Buf, "the model took the library's ring")
	require.Equal(t, unsafe.Pointer(&db[0]), d.DBRec)
	require.Equal(t, uint32(16), d.WQECnt)
	require.Equal(t, uint32(32), d.Stride)
	info, ok := simadopt.LookupSRQ(k.fabric, srqn)
	require.True(t, ok, "the model has the SRQ under the srqn answered")
	require.Equal(t, unsafe.Pointer(&ring[0]), info.Ring)
	require.Equal(t, unix.EBUSY, handleCmd(k, a, fd, cmdDeallocPD, pd), "the PD is in use by the SRQ")

	gotWR, gotSGE, limit, en := querySRQCmd(k, a, fd, h)
	require.Zero(t, en)
	require.Equal(t, []uint32{15, 1, 0}, []uint32{gotWR, gotSGE, limit})
	_, _, _, en = querySRQCmd(k, a, fd, pd)
	require.Equal(t, unix.EINVAL, en, "QUERY_SRQ of a PD handle")
	_, _, _, en = querySRQCmd(k, a, fd, 0xbeef)
	require.Equal(t, unix.EINVAL, en, "QUERY_SRQ of nothing")

	require.Equal(t, unix.EINVAL, modifySRQCmd(k, a, fd, h, srqAttrMaxWR, 32, 0), "resizing")
	require.Equal(t, unix.EINVAL, modifySRQCmd(k, a, fd, h, srqAttrLimit, 0, 16), "limit at the WQE count")
	require.Zero(t, modifySRQCmd(k, a, fd, h, srqAttrLimit, 0, 4), "arming")
	require.Zero(t, modifySRQCmd(k, a, fd, h, srqAttrLimit, 0, 0), "disarming")
	require.Equal(t, unix.EINVAL, modifySRQCmd(k, a, fd, 0xbeef, srqAttrLimit, 0, 0), "unknown handle")

	// An RC QP on the SRQ: no receive ring (the request's counts are 0).
	ringCQ, cqdb := cqMemory(t, 64, 64)
	cq, _, _, en := createCQCmd(k, a, fd, 63, 0, -1, mlx5CQReq(addrOf(ringCQ), addrOf(cqdb), 64), 8)
	require.Zero(t, en)
	qbuf, qdb := qpMemory(t, 0, 16)
	caps := qpCaps{sendWR: 8, recvWR: 8, sendSGE: 1, recvSGE: 1}
	qreq := mlx5QPReq(addrOf(qbuf), addrOf(qdb), 16, 0, 0, 0, 0)
	n1 := objectCount(k, fd)
	for name, srq := range map[string]uint32{"unknown SRQ": 0xbeef, "a PD as the SRQ": pd, "a CQ as the SRQ": cq} {
		_, _, en := createQPOnSRQ(k, a, fd, pd, cq, srq, qptRC, caps, qreq)
		require.Equal(t, unix.EINVAL, en, name)
		require.Equal(t, n1, objectCount(k, fd), "%s: nothing created", name)
	}
	qh, qpn, en := createQPOnSRQ(k, a, fd, pd, cq, h, qptRC, caps, qreq)
	require.Zero(t, en)
	qd := k.files[fd].uctx.objects[qh].qp.Descriptor()
	require.Equal(t, qpn, qd.QPN)
	require.Zero(t, qd.RQ.WQECnt, "no receive ring")
	require.Equal(t, unsafe.Pointer(&qbuf[0]), qd.SQ.Buf, "the send ring starts the buffer")
	require.Equal(t, uint32(1), qd.MaxRecvSGE, "the SRQ's scatter entries")
	q, en := queryQPCmd(k, a, fd, qh)
	require.Zero(t, en)
	require.Equal(t, uint32(0), ne.Uint32(q[2*qpDestSize+4:]), "max_recv_wr of a QP on an SRQ")

	require.Equal(t, unix.EBUSY, destroySRQCmd(k, a, fd, h), "the SRQ is in use by the QP")
	require.Equal(t, unix.EINVAL, destroySRQCmd(k, a, fd, pd), "DESTROY_SRQ of a PD handle")
	require.Zero(t, destroyQPCmd(k, a, fd, qh))
	require.Zero(t, destroySRQCmd(k, a, fd, h))
	require.Equal(t, unix.ENOENT, destroySRQCmd(k, a, fd, h), "destroyed already")
	require.Zero(t, handleCmd(k, a, fd, cmdDeallocPD, pd), "the PD is free again")

	// Closing the node destroys what is left: an SRQ and a QP on it.
	pd2, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	h2, _, _, _, en := createSRQCmd(k, a, fd, pd2, 15, 1, vendor)
	require.Zero(t, en)
	_, _, en = createQPOnSRQ(k, a, fd, pd2, cq, h2, qptRC, caps, qreq)
	require.Zero(t, en)
	s2 := k.files[fd].uctx.objects[h2].srq.srq
	require.Zero(t, k.close(fd))
	_, ok = simadopt.LookupSRQ(k.fabric, s2.Descriptor().SRQN)
	require.False(t, ok, "closing the node destroyed the SRQ on the model")
}

// TestKernelDCQueuePairs creates a DCT (with an SRQ) and a DCI through
// CREATE_QP, moves the DCT to RTR through EX_MODIFY_QP (the DCT number in
// the vendor response), the DCI to RTS through MODIFY_QP, and checks each
// refusal of mlx5_ib's DC rules with its errno, and that a refusal creates
// or changes nothing.
func TestKernelDCQueuePairs(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	ringCQ, cqdb := cqMemory(t, 64, 64)
	cq, _, _, en := createCQCmd(k, a, fd, 63, 0, -1, mlx5CQReq(addrOf(ringCQ), addrOf(cqdb), 64), 8)
	require.Zero(t, en)
	ring, db := srqMemory(t, 16, 32)
	srq, _, _, _, en := createSRQCmd(k, a, fd, pd, 15, 1, mlx5SRQReq(addrOf(ring), addrOf(db), 0))
	require.Zero(t, en)
	pa, err := k.files[fd].uctx.dev.QueryPort(1)
	require.NoError(t, err)

	const key = 0x1234_5678_9abc_def0
	sbuf, sdb := qpMemory(t, 0, 16)
	dci := mlx5QPReq(addrOf(sbuf), addrOf(sdb), 16, 0, 0, mlx5QPFlagDCI, 0)
	n0 := objectCount(k, fd)
	for name, c := range map[string]struct {
		typ    uint8
		srq    bool
		caps   qpCaps
		vendor []byte
		want   syscall.Errno
	}{
		"DCT without an SRQ":           {qptDriver, false, qpCaps{}, dctReq(0, key), unix.EINVAL},
		"driver QP without a DC type":  {qptDriver, true, qpCaps{}, mlx5QPReq(0, 0, 0, 0, 0, 0, 0), unix.EINVAL},
		"both DC types":                {qptDriver, true, qpCaps{}, dctReq(mlx5QPFlagDCI, key), unix.EINVAL},
		"DCI with receive WRs":         {qptDriver, false, qpCaps{sendWR: 8, recvWR: 1, sendSGE: 1}, dci, unix.EINVAL},
		"DCI with receive SGEs":        {qptDriver, false, qpCaps{sendWR: 8, sendSGE: 1, recvSGE: 1}, dci, unix.EINVAL},
		"DCI streams without channels": {qptDriver, false, qpCaps{sendWR: 8, sendSGE: 1}, mlx5QPReq(addrOf(sbuf), addrOf(sdb), 16, 0, 0, mlx5QPFlagDCI|mlx5QPFlagDCIStream, 0), unix.EINVAL},
		"DCI ring not mapped":          {qptDriver, false, qpCaps{sendWR: 8, sendSGE: 1}, mlx5QPReq(a.guard, addrOf(sdb), 16, 0, 0, mlx5QPFlagDCI, 0), unix.EFAULT},
		"DCT request cut short":        {qptDriver, true, qpCaps{}, dctReq(0, key)[:24], unix.EINVAL},
	} {
		var en syscall.Errno
		if c.srq {
			_, _, en = createQPOnSRQ(k, a, fd, pd, cq, srq, c.typ, c.caps, c.vendor)
		} else {
			_, _, _, en = createQPCmd(k, a, fd, pd, cq, cq, c.typ, c.caps, c.vendor)
		}
		require.Equal(t, c.want, en, name)
		require.Equal(t, n0, objectCount(k, fd), "%s: nothing created", name)
	}

	// A DCI may name an SRQ (create_dci; perftest's DC latency tests do):
	// the QP holds it and never receives from it.
	ih, iqpn, en := createQPOnSRQ(k, a, fd, pd, cq, srq, qptDriver, qpCaps{sendWR: 8, sendSGE: 1}, dci)
	require.Zero(t, en, "a DCI with an SRQ")
	require.NotZero(t, iqpn)
	io := k.files[fd].uctx.objects[ih]
	require.Equal(t, ctx.QPTypeDCI, io.qpType)
	require.Zero(t, io.caps.RecvDepth, "a DCI has no receive queue")
	require.Equal(t, unix.EBUSY, destroySRQCmd(k, a, fd, srq), "the SRQ is held by the DCI")
	require.Zero(t, destroyQPCmd(k, a, fd, ih))
	require.Equal(t, n0, objectCount(k, fd), "the DCI is gone, the SRQ stays")

	// create_dct uses none of the capabilities: ones no QP could have are
	// ignored.
	dh, dqpn, en := createQPOnSRQ(k, a, fd, pd, cq, srq, qptDriver, qpCaps{sendWR: 1 << 30, recvWR: 1 << 30, sendSGE: 99}, dctReq(mlx5QPFlagScatter, key))
	require.Zero(t, en)
	require.Zero(t, dqpn, "a DCT's number is known at RTR")
	o := k.files[fd].uctx.objects[dh]
	require.Equal(t, ctx.QPTypeDCT, o.qpType)
	require.Equal(t, unix.EBUSY, destroySRQCmd(k, a, fd, srq), "the SRQ is in use by the DCT")

	const (
		mState, mAccess, mPKey, mPort = 1 << 0, 1 << 3, 1 << 4, 1 << 5
		mAV, mMTU, mTimeout, mRetry   = 1 << 7, 1 << 8, 1 << 9, 1 << 10
		mRNR, mRdAtom, mMinRNR, mSQ   = 1 << 11, 1 << 13, 1 << 15, 1 << 16
	)
	dctInit := modifyQP{h: dh, mask: mState | mAccess | mPKey | mPort, state: 1, port: 1, access: accessLocalWrite | accessRemoteWrite}
	dctRTR := modifyQP{h: dh, mask: mState | mAV | mMTU | mMinRNR, state: 2, mtu: 3, pathPort: 1, dlid: pa.LID, minRNR: 12}
	state := func(h uint32) ctx.QPState {
		st, err := k.files[fd].uctx.objects[h].qp.State()
		require.NoError(t, err)
		return st
	}
	require.Equal(t, unix.EINVAL, modifyQPCmd(k, a, fd, modifyQP{h: dh, mask: mState | mPKey | mPort, state: 1, port: 1}), "DCT INIT without access flags")
	require.Equal(t, unix.EINVAL, modifyQPCmd(k, a, fd, dctRTR), "DCT RESET→RTR")
	require.Equal(t, ctx.QPStateReset, state(dh))
	require.Zero(t, modifyQPCmd(k, a, fd, dctInit))
	require.Equal(t, ctx.QPStateInit, state(dh))

	// To RTR: the legacy command has no response for the DCT number.
	require.Equal(t, unix.EINVAL, modifyQPCmd(k, a, fd, dctRTR), "MODIFY_QP cannot answer the DCT number")
	require.Equal(t, ctx.QPStateInit, state(dh), "refused: still INIT")
	udata := make([]byte, mlx5ModifyQPSize)
	for name, c := range map[string]struct {
		m         modifyQP
		rate      uint32
		driver    []byte
		driverOut int
		want      syscall.Errno
	}{
		"no room for the DCT number": {dctRTR, 0, udata, 0, unix.EINVAL},
		"driver data cut short":      {dctRTR, 0, udata[:8], mlx5ModifyQPRespSize / 8, unix.EINVAL},
		"driver comp_mask":           {dctRTR, 0, append([]byte{1}, udata[1:]...), mlx5ModifyQPRespSize / 8, unix.EOPNOTSUPP},
		"rate limit":                 {modifyQP{h: dh, mask: dctRTR.mask | qpAttrRateLimit, state: 2, mtu: 3, pathPort: 1, dlid: pa.LID}, 10, udata, mlx5ModifyQPRespSize / 8, unix.EINVAL},
		"mask bit beyond the ABI":    {modifyQP{h: dh, mask: dctRTR.mask | 1<<30, state: 2, mtu: 3, pathPort: 1, dlid: pa.LID}, 0, udata, mlx5ModifyQPRespSize / 8, unix.EOPNOTSUPP},
		"DCT RTR without the path":   {modifyQP{h: dh, mask: mState | mMTU | mMinRNR, state: 2, mtu: 3}, 0, udata, mlx5ModifyQPRespSize / 8, unix.EINVAL},
		"DCT RTR with a timeout":     {modifyQP{h: dh, mask: dctRTR.mask | mTimeout, state: 2, mtu: 3, pathPort: 1, dlid: pa.LID}, 0, udata, mlx5ModifyQPRespSize / 8, unix.EINVAL},
		"DCT to RTS":                 {modifyQP{h: dh, mask: mState, state: 3}, 0, udata, mlx5ModifyQPRespSize / 8, unix.EINVAL},
	} {
		_, en := exModifyQPCmd(k, a, fd, c.m, c.rate, c.driver, exModifyQPRespSize/8, c.driverOut)
		require.Equal(t, c.want, en, name)
		require.Equal(t, ctx.QPStateInit, state(dh), "%s: refused, still INIT", name)
	}
	// A driver response that cannot be written: EFAULT, still INIT.
	core := make([]byte, exModifyQPSize)
	copy(core, modifyQPBytes(dctRTR))
	buf, n, _ := a.writeExCmd(exCmdModifyQP, core, udata, a.guard-exModifyQPRespSize, exModifyQPRespSize/8, 1)
	_, en = k.write(fd, buf, n)
	require.Equal(t, unix.EFAULT, en, "the DCT number's response in the guard page")
	require.Equal(t, ctx.QPStateInit, state(dh), "refused: still INIT")
	for _, out := range []int{1, mlx5ModifyQPRespSize / 8} {
		if out == mlx5ModifyQPRespSize/8 {
			// A second DCT, answered with the whole structure.
			dh2, _, en := createQPOnSRQ(k, a, fd, pd, cq, srq, qptDriver, qpCaps{}, dctReq(0, key+1))
			require.Zero(t, en)
			dctInit.h, dctRTR.h = dh2, dh2
			require.Zero(t, modifyQPCmd(k, a, fd, dctInit))
		}
		resp, en := exModifyQPCmd(k, a, fd, dctRTR, 0, udata, exModifyQPRespSize/8, out)
		require.Zero(t, en)
		require.Equal(t, ctx.QPStateRTR, state(dctRTR.h))
		want := k.files[fd].uctx.objects[dctRTR.h].qp.Descriptor().QPN
		require.NotZero(t, want)
		require.Equal(t, want, ne.Uint32(resp[4:]), "dctn: the DCT number")
		require.Equal(t, uint32(min(out*8, mlx5ModifyQPRespSize)), ne.Uint32(resp), "response_length")
	}
	// mlx5_ib_dct_query_qp refuses a mask beyond a DCT's attributes
	// (TestQueryDCT).
	q, en := queryQPMaskCmd(k, a, fd, dh, mState|mAccess|mPKey|mPort|mAV|mMTU|mMinRNR)
	require.Zero(t, en)
	require.Equal(t, uint8(2), q[2*qpDestSize+44], "QUERY_QP of the DCT: RTR")
	require.Equal(t, unix.EINVAL, modifyQPCmd(k, a, fd, modifyQP{h: dh, mask: mState, state: 6}), "a DCT has no ERR")

	// The DCI: a send ring only, moved to RTS with MODIFY_QP.
	ch, cqpn, _, en := createQPCmd(k, a, fd, pd, cq, cq, qptDriver, qpCaps{sendWR: 8, sendSGE: 1, inline: 32}, dci)
	require.Zero(t, en)
	require.NotZero(t, cqpn)
	co := k.files[fd].uctx.objects[ch]
	require.Equal(t, ctx.QPTypeDCI, co.qpType)
	require.Equal(t, unsafe.Pointer(&sbuf[0]), co.qp.Descriptor().SQ.Buf)
	require.Zero(t, co.qp.Descriptor().RQ.WQECnt)
	require.Equal(t, unix.EINVAL, modifyQPCmd(k, a, fd, modifyQP{h: ch, mask: mState | mPKey | mPort | mAccess, state: 1, port: 1}), "DCI INIT with access flags")
	require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: ch, mask: mState | mPKey | mPort, state: 1, port: 1}))
	require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: ch, mask: mState | mMTU, state: 2, mtu: 3}))
	require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: ch, mask: mState | mTimeout | mRetry | mRNR | mRdAtom | mSQ, state: 3, timeout: 14, retry: 7, rnrRetry: 7, rdAtom: 1}))
	require.Equal(t, ctx.QPStateRTS, state(ch))
	require.Equal(t, unix.EINVAL, modifyQPCmd(k, a, fd, modifyQP{h: ch, mask: mState, state: 0}), "a DCI does not go to RESET")
	require.Equal(t, ctx.QPStateRTS, state(ch))

	require.Zero(t, destroyQPCmd(k, a, fd, ch))
	require.Zero(t, destroyQPCmd(k, a, fd, dh))
	require.Equal(t, unix.EBUSY, destroySRQCmd(k, a, fd, srq), "the second DCT still holds the SRQ")
	require.Zero(t, destroyQPCmd(k, a, fd, dctRTR.h))
	require.Zero(t, destroySRQCmd(k, a, fd, srq))
	require.Zero(t, k.close(fd))
}

// TestKernelRandomSRQAndDCCommands sends the SRQ commands, DC creates and
// EX_MODIFY_QP with random fields (addresses into the arena, its guard page
// or nowhere) and requires an errno of the kernel's and no crash.
func TestKernelRandomSRQAndDCCommands(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	ringCQ, cqdb := cqMemory(t, 64, 64)
	cq, _, _, en := createCQCmd(k, a, fd, 63, 0, -1, mlx5CQReq(addrOf(ringCQ), addrOf(cqdb), 64), 8)
	require.Zero(t, en)
	ring, db := srqMemory(t, 64, 64)
	qbuf, qdb := qpMemory(t, 0, 64)
	rng := rand.New(rand.NewSource(19))
	pick := func(v ...uint32) uint32 { return v[rng.Intn(len(v))] }
	for i := 0; i < 3000; i++ {
		hs := []uint32{pd, cq, uint32(rng.Intn(16))}
		h := hs[rng.Intn(3)]
		addrs := []uintptr{addrOf(ring), addrOf(db), addrOf(qbuf), addrOf(qdb), uintptr(a.sanitize(rng.Uint64()))}
		var en syscall.Errno
		switch rng.Intn(8) {
		case 0:
			v := mlx5SRQReq(addrs[rng.Intn(5)], addrs[rng.Intn(5)], pick(0, mlx5SRQFlagSig, rng.Uint32()))
			if rng.Intn(4) == 0 {
				rng.Read(v[16:])
			}
			v = v[:rng.Intn(len(v)+1)]
			_, _, _, _, en = createSRQCmd(k, a, fd, h, pick(0, 15, 63, rng.Uint32()), pick(0, 1, 3, rng.Uint32()), v)
		case 1:
			en = modifySRQCmd(k, a, fd, uint32(rng.Intn(16)), rng.Uint32()&7, rng.Uint32(), pick(0, 3, rng.Uint32()))
		case 2:
			_, _, _, en = querySRQCmd(k, a, fd, uint32(rng.Intn(16)))
		case 3:
			en = destroySRQCmd(k, a, fd, uint32(rng.Intn(16)))
		case 4:
			flags := pick(mlx5QPFlagDCI, mlx5QPFlagDCT, mlx5QPFlagDCI|mlx5QPFlagDCT, mlx5QPFlagDCI|mlx5QPFlagDCIStream, rng.Uint32())
			v := mlx5QPReq(addrs[rng.Intn(5)], addrs[rng.Intn(5)], pick(0, 16, 64, rng.Uint32()), pick(0, 8, rng.Uint32()), pick(0, 5, rng.Uint32()), flags, rng.Uint32()%8)
			ne.PutUint64(v[40:], rng.Uint64())
			v = v[:rng.Intn(len(v)+1)]
			c := qpCaps{pick(0, 8, rng.Uint32()), pick(0, 8, rng.Uint32()), pick(0, 1, rng.Uint32()), pick(0, 1, rng.Uint32()), pick(0, 32, rng.Uint32())}
			typ := uint8(pick(qptDriver, qptRC, qptUD, rng.Uint32()))
			if rng.Intn(2) == 0 {
				_, _, en = createQPOnSRQ(k, a, fd, hs[rng.Intn(3)], hs[rng.Intn(3)], uint32(rng.Intn(16)), typ, c, v)
			} else {
				_, _, _, en = createQPCmd(k, a, fd, hs[rng.Intn(3)], hs[rng.Intn(3)], hs[rng.Intn(3)], typ, c, v)
			}
		case 5:
			m := modifyQP{h: uint32(rng.Intn(16)), mask: rng.Uint32() & (1<<26 - 1), state: uint8(rng.Intn(9)),
				cur: uint8(rng.Intn(8)), mtu: uint8(rng.Intn(7)), port: uint8(rng.Intn(3)), pathPort: uint8(rng.Intn(3)),
				dlid: uint16(rng.Intn(4)), access: rng.Uint32() & 0x1f, minRNR: uint8(rng.Intn(32))}
			driver := make([]byte, 8*rng.Intn(4))
			if rng.Intn(3) == 0 {
				rng.Read(driver)
			}
			_, en = exModifyQPCmd(k, a, fd, m, rng.Uint32()%3, driver, rng.Intn(3), rng.Intn(4))
		case 6:
			en = destroyQPCmd(k, a, fd, uint32(rng.Intn(16)))
		case 7:
			core := make([]byte, 8+rng.Intn(64))
			rng.Read(core)
			ne.PutUint64(core, a.sanitize(ne.Uint64(core)))
			b, n := a.writeCmd([]uint32{cmdCreateSRQ, cmdModifySRQ, cmdQuerySRQ, cmdDestroySRQ}[rng.Intn(4)], core, rng.Intn(12))
			_, en = k.write(fd, b, n)
		}
		require.True(t, allowedErrnos[en], "errno %v", en)
	}
	require.Zero(t, k.close(fd))
}

// TestKernelDCIAddressVector: a DCI's move to RTR may carry an address
// vector (dciTableMask), which the kernel checks as it checks any QP's:
// uverbs' modify_qp refuses a port the device has not (rdma_is_port_valid)
// or another than the QP's, with EINVAL; a valid one is taken.
func TestKernelDCIAddressVector(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	ringCQ, cqdb := cqMemory(t, 64, 64)
	cq, _, _, en := createCQCmd(k, a, fd, 63, 0, -1, mlx5CQReq(addrOf(ringCQ), addrOf(cqdb), 64), 8)
	require.Zero(t, en)
	sbuf, sdb := qpMemory(t, 0, 16)
	dci := mlx5QPReq(addrOf(sbuf), addrOf(sdb), 16, 0, 0, mlx5QPFlagDCI, 0)
	ch, _, _, en := createQPCmd(k, a, fd, pd, cq, cq, qptDriver, qpCaps{sendWR: 8, sendSGE: 1, inline: 32}, dci)
	require.Zero(t, en)
	const (
		mState, mPKey, mPort = uint32(qpstate.State), uint32(qpstate.PKeyIndex), uint32(qpstate.Port)
		mAV, mMTU            = uint32(qpstate.AV), uint32(qpstate.PathMTU)
	)
	state := func() ctx.QPState {
		s, err := k.files[fd].uctx.objects[ch].qp.State()
		require.NoError(t, err)
		return s
	}
	require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: ch, mask: mState | mPKey | mPort, state: 1, port: 1}))
	for _, port := range []uint8{0, 2, 9} {
		require.Equal(t, unix.EINVAL, modifyQPCmd(k, a, fd, modifyQP{h: ch, mask: mState | mMTU | mAV, state: 2, mtu: 3, pathPort: port, dlid: 1}),
			"an address vector on port %d", port)
		require.Equal(t, ctx.QPStateInit, state(), "a refused modify changes nothing")
	}
	require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: ch, mask: mState | mMTU | mAV, state: 2, mtu: 3, pathPort: 1, dlid: 1}))
	require.Equal(t, ctx.QPStateRTR, state())
	require.Zero(t, destroyQPCmd(k, a, fd, ch))
	require.Zero(t, k.close(fd))
}
