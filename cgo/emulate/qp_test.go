//go:build cgo && linux

package emulate

import (
	"fmt"
	"math/rand"
	"syscall"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/kerrno"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// qpMemory is a QP buffer (receive ring, then send ring) and a doorbell
// record as libmlx5 allocates them: page-aligned, mmap'd.
func qpMemory(t *testing.T, rqBytes, sqCnt int) (buf, db []byte) {
	n := rqBytes + sqCnt*64
	mem, err := unix.Mmap(-1, 0, n+4096, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	t.Cleanup(func() { _ = unix.Munmap(mem) })
	return mem[:n], mem[n : n+64]
}

// mlx5QPReq is a struct mlx5_ib_create_qp.
func mlx5QPReq(buf, db uintptr, sqCnt, rqCnt, rqShift, flags, bfreg uint32) []byte {
	b := make([]byte, mlx5CreateQPSize)
	ne.PutUint64(b[0:], uint64(buf))
	ne.PutUint64(b[8:], uint64(db))
	ne.PutUint32(b[16:], sqCnt)
	ne.PutUint32(b[20:], rqCnt)
	ne.PutUint32(b[24:], rqShift)
	ne.PutUint32(b[28:], flags)
	ne.PutUint32(b[32:], 0xffffff) // uidx
	ne.PutUint32(b[36:], bfreg)
	return b
}

// qpCaps are the capabilities of a CREATE_QP.
type qpCaps struct{ sendWR, recvWR, sendSGE, recvSGE, inline uint32 }

// createQPCmd sends CREATE_QP and returns the handle, the QPN and the
// bfreg index of the mlx5 response.
func createQPCmd(k *kernel, a *arena, fd int, pd, scq, rcq uint32, typ uint8, c qpCaps, vendor []byte) (h, qpn, bfreg uint32, en syscall.Errno) {
	resp, respAddr := a.alloc(createQPRespSize + mlx5CreateQPResp)
	core := respCore(respAddr, make([]byte, 48)...)
	ne.PutUint64(core[8:], 0x77) // user_handle
	ne.PutUint32(core[16:], pd)
	ne.PutUint32(core[20:], scq)
	ne.PutUint32(core[24:], rcq)
	ne.PutUint32(core[32:], c.sendWR)
	ne.PutUint32(core[36:], c.recvWR)
	ne.PutUint32(core[40:], c.sendSGE)
	ne.PutUint32(core[44:], c.recvSGE)
	ne.PutUint32(core[48:], c.inline)
	core[53] = typ
	core = append(core, vendor...)
	buf, n := a.writeCmd(cmdCreateQP, core, (createQPRespSize+mlx5CreateQPResp)/4)
	if _, en = k.write(fd, buf, n); en != 0 {
		return 0, 0, 0, en
	}
	return ne.Uint32(resp), ne.Uint32(resp[4:]), ne.Uint32(resp[createQPRespSize:]), 0
}

func destroyQPCmd(k *kernel, a *arena, fd int, h uint32) syscall.Errno {
	_, respAddr := a.alloc(destroyQPRespSize)
	core := respCore(respAddr, make([]byte, 8)...)
	ne.PutUint32(core[8:], h)
	buf, n := a.writeCmd(cmdDestroyQP, core, destroyQPRespSize/4)
	_, en := k.write(fd, buf, n)
	return en
}

// modifyQP are the fields of a MODIFY_QP the tests set.
type modifyQP struct {
	h, mask                                  uint32
	state, cur, mtu, port, pathPort          uint8
	dlid                                     uint16
	destQPN, access, qkey                    uint32
	timeout, retry, rnrRetry, minRNR, rdAtom uint8
	rate                                     uint8  // dest.static_rate
	pkey                                     uint16 // pkey_index
	// The address vector's GRH: is_global, sgid_index, hop_limit, dgid.
	global    bool
	sgid, hop uint8
	dgid      ctx.GID
}

// modifyQPCmd sends MODIFY_QP (struct ib_uverbs_modify_qp, no response).
func modifyQPCmd(k *kernel, a *arena, fd int, m modifyQP) syscall.Errno {
	buf, n := a.writeCmd(cmdModifyQP, modifyQPBytes(m), 0)
	_, en := k.write(fd, buf, n)
	return en
}

// Offsets in struct ib_uverbs_qp_dest, the address vector of MODIFY_QP and
// QUERY_QP.
const (
	qdSGIDIndex  = 24
	qdHopLimit   = 25
	qdStaticRate = 29
	qdIsGlobal   = 30
)

// queryQPCmd sends QUERY_QP and returns the response.
func queryQPCmd(k *kernel, a *arena, fd int, h uint32) ([]byte, syscall.Errno) {
	resp, respAddr := a.alloc(queryQPRespSize)
	core := respCore(respAddr, make([]byte, 8)...)
	ne.PutUint32(core[8:], h)
	ne.PutUint32(core[12:], 0x1fffff)
	buf, n := a.writeCmd(cmdQueryQP, core, queryQPRespSize/4)
	if _, en := k.write(fd, buf, n); en != 0 {
		return nil, en
	}
	return resp, 0
}

// TestKernelQueuePairs creates two RC QPs through CREATE_QP over memory
// the test owns, connects them on the model, runs an RDMA WRITE written
// into the adopted send ring, then checks every refusal with mlx5_ib's
// errno and DESTROY_QP.
func TestKernelQueuePairs(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	ring, cqdb := cqMemory(t, 64, 64)
	cq, _, cqn, en := createCQCmd(k, a, fd, 63, 0, -1, mlx5CQReq(addrOf(ring), addrOf(cqdb), 64), 8)
	require.Zero(t, en)

	const sqCnt, rqCnt, rqShift = 16, 8, 5
	caps := qpCaps{sendWR: 8, recvWR: 8, sendSGE: 1, recvSGE: 2, inline: 32}
	type side struct {
		h, qpn   uint32
		buf, db  []byte
		sqOffset int
	}
	var qps [2]side
	for i := range qps {
		s := &qps[i]
		s.buf, s.db = qpMemory(t, rqCnt<<rqShift, sqCnt)
		s.sqOffset = rqCnt << rqShift
		s.h, s.qpn, _, en = createQPCmd(k, a, fd, pd, cq, cq, qptRC, caps,
			mlx5QPReq(addrOf(s.buf), addrOf(s.db), sqCnt, rqCnt, rqShift, 0, 0))
		require.Zero(t, en)
		o := k.files[fd].uctx.objects[s.h]
		d := o.qp.Descriptor()
		require.Equal(t, s.qpn, d.QPN)
		require.Equal(t, unsafe.Pointer(&s.buf[s.sqOffset]), d.SQ.Buf, "the send ring follows the receive ring")
		require.Equal(t, unsafe.Pointer(&s.buf[0]), d.RQ.Buf)
		require.Equal(t, uint32(1<<rqShift), d.RQ.Stride)
		require.Equal(t, unsafe.Pointer(&s.db[0]), d.DBRec)
	}
	require.Equal(t, unix.EBUSY, handleCmd(k, a, fd, cmdDeallocPD, pd), "the PD is in use by the QPs")
	_, _, en = destroyCQCmd(k, a, fd, cq)
	require.Equal(t, unix.EBUSY, en, "the CQ is in use by the QPs")

	// Connect them through MODIFY_QP with the masks libibverbs users send.
	pa, err := k.files[fd].uctx.dev.QueryPort(1)
	require.NoError(t, err)
	const (
		mState, mAccess, mPKey, mPort       = 1 << 0, 1 << 3, 1 << 4, 1 << 5
		mAV, mMTU, mTimeout, mRetry, mRNR   = 1 << 7, 1 << 8, 1 << 9, 1 << 10, 1 << 11
		mRQPSN, mRdAtom, mAlt, mMinRNR      = 1 << 12, 1 << 13, 1 << 14, 1 << 15
		mSQPSN, mDestRdAtom, mDestQPN, mCur = 1 << 16, 1 << 17, 1 << 20, 1 << 1
	)
	toInit := func(h uint32) modifyQP {
		return modifyQP{h: h, mask: mState | mPKey | mPort | mAccess, state: 1, port: 1, access: accessLocalWrite | accessRemoteWrite}
	}
	toRTR := func(h, dest uint32) modifyQP {
		return modifyQP{h: h, mask: mState | mAV | mMTU | mDestQPN | mRQPSN | mDestRdAtom | mMinRNR, state: 2, mtu: 3,
			dlid: pa.LID, pathPort: 1, destQPN: dest, minRNR: 1, rdAtom: 1}
	}
	toRTS := func(h uint32) modifyQP {
		return modifyQP{h: h, mask: mState | mTimeout | mRetry | mRNR | mSQPSN | mRdAtom, state: 3, timeout: 14, retry: 7, rnrRetry: 7, rdAtom: 1}
	}
	h0 := qps[0].h
	for name, c := range map[string]struct {
		m    modifyQP
		want syscall.Errno
	}{
		"RESET to RTR":            {modifyQP{h: h0, mask: mState | mAV | mMTU | mDestQPN | mRQPSN | mDestRdAtom | mMinRNR, state: 2, mtu: 3, pathPort: 1, dlid: pa.LID, destQPN: 5}, unix.EINVAL},
		"INIT without the port":   {modifyQP{h: h0, mask: mState | mPKey | mAccess, state: 1}, unix.EINVAL},
		"unknown handle":          {toInit(0xbeef), unix.EINVAL},
		"PD handle":               {toInit(pd), unix.EINVAL},
		"current state is not it": {modifyQP{h: h0, mask: mState | mCur | mPKey | mPort | mAccess, state: 1, cur: 2, port: 1}, unix.EINVAL},
		"state past ERR":          {modifyQP{h: h0, mask: mState, state: 9}, unix.EINVAL},
		"unknown mask bit":        {modifyQP{h: h0, mask: mState | mPKey | mPort | mAccess | 1<<30, state: 1, port: 1}, unix.EOPNOTSUPP},
		"port 2 of a 1-port HCA":  {modifyQP{h: h0, mask: mState | mPKey | mPort | mAccess, state: 1, port: 2}, unix.EINVAL},
	} {
		require.Equal(t, c.want, modifyQPCmd(k, a, fd, c.m), name)
		st, err := k.files[fd].uctx.objects[h0].qp.State()
		require.NoError(t, err)
		require.Equal(t, ctx.QPStateReset, st, "%s: a refused modify changes nothing", name)
	}
	for i, s := range qps {
		require.Zero(t, modifyQPCmd(k, a, fd, toInit(s.h)))
		require.Zero(t, modifyQPCmd(k, a, fd, toRTR(s.h, qps[1-i].qpn)))
		require.Zero(t, modifyQPCmd(k, a, fd, toRTS(s.h)))
		st, err := k.files[fd].uctx.objects[s.h].qp.State()
		require.NoError(t, err)
		require.Equal(t, ctx.QPStateRTS, st)
	}
	require.Equal(t, unix.EINVAL, modifyQPCmd(k, a, fd, toRTR(h0, qps[1].qpn)), "RTS to RTR")
	q, en := queryQPCmd(k, a, fd, h0)
	require.Zero(t, en)
	o := 2*qpDestSize + 44
	require.Equal(t, uint8(3), q[o], "qp_state RTS")
	require.Equal(t, uint8(3), q[o+2], "path_mtu 1024")
	require.Equal(t, uint8(1), q[o+8], "port_num")
	require.Equal(t, uint8(14), q[o+9], "timeout")
	require.Equal(t, qps[1].qpn, ne.Uint32(q[2*qpDestSize+32:]), "dest_qp_num")
	require.Equal(t, uint32(accessRemoteWrite), ne.Uint32(q[2*qpDestSize+36:]),
		"qp_access_flags: the context's remote enables, as query_qp_attr reads them (no LOCAL_WRITE)")
	require.Equal(t, pa.LID, ne.Uint16(q[20:]), "the path's DLID")
	require.Equal(t, uint32(8), ne.Uint32(q[2*qpDestSize+4:]), "max_recv_wr: the receive ring's entries")
	_, en = queryQPCmd(k, a, fd, 0xbeef)
	require.Equal(t, unix.EINVAL, en, "QUERY_QP of an unknown handle")
	alt := toRTS(h0)
	alt.mask = mState | mAlt
	require.Equal(t, unix.EOPNOTSUPP, modifyQPAltCmd(k, a, fd, alt, altPath{port: 1, destPort: 1}), "alternate path in RTS→RTS")
	mem, err := unix.Mmap(-1, 0, 8192, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	require.NoError(t, err)
	defer func() { _ = unix.Munmap(mem) }()
	mr, lkey, rkey, en := regMRCmd(k, a, fd, pd, uint64(addrOf(mem)), 8192, uint64(addrOf(mem)), accessLocalWrite|accessRemoteWrite)
	require.Zero(t, en)
	for i := range 64 {
		mem[i] = byte(3*i + 5)
	}
	// An RDMA WRITE of 64 bytes from mem[0:] to mem[4096:], written into
	// the first QP's send ring as libmlx5 would.
	s := &qps[0]
	w := s.buf[s.sqOffset : s.sqOffset+64]
	prm.PutCtrl(unsafe.Pointer(&w[0]), 0, prm.OpRdmaWrite, 0, s.qpn, prm.FlagCQUpdate, 3, 0, 0)
	be := func(b []byte, v uint64, n int) {
		for j := 0; j < n; j++ {
			b[j] = byte(v >> (8 * (n - 1 - j)))
		}
	}
	be(w[16:], uint64(addrOf(mem))+4096, 8)
	be(w[24:], uint64(rkey), 4)
	be(w[32:], 64, 4)
	be(w[36:], uint64(lkey), 4)
	be(w[40:], uint64(addrOf(mem)), 8)
	prm.Store32(unsafe.Pointer(&s.db[prm.DoorbellRecordSendB]), 1)
	require.NoError(t, k.fabric.RunUntilIdle())
	require.Equal(t, mem[:64], mem[4096:4160], "the WRITE from the adopted ring moved the bytes")
	require.Equal(t, prm.CQEReq, prm.OpOwnOpcode(ring[63]), "a requester CQE in the adopted CQ %#x", cqn)
	require.Equal(t, s.qpn, uint32(ring[57])<<16|uint32(ring[58])<<8|uint32(ring[59]), "the CQE names the QP")

	good := func() []byte { return mlx5QPReq(addrOf(s.buf), addrOf(s.db), sqCnt, rqCnt, rqShift, 0, 0) }
	with := func(off int, v uint32) []byte { b := good(); ne.PutUint32(b[off:], v); return b }
	objects := len(k.files[fd].uctx.objects)
	maxWR := k.devs[0].Attr.MaxQPWR
	// The raw packet case is the one of a caller with CAP_NET_RAW
	// (TestCreateRawPacketQPNeedsNetRaw has the other).
	savedRawCap := kerrno.HasRawCap
	t.Cleanup(func() { kerrno.HasRawCap = savedRawCap })
	kerrno.HasRawCap = func() bool { return true }
	for name, c := range map[string]struct {
		pd, cq uint32
		typ    uint8
		caps   qpCaps
		vendor []byte
		want   syscall.Errno
	}{
		"raw packet type":            {pd, cq, qptRawPacket, caps, good(), unix.EOPNOTSUPP},
		"unknown type":               {pd, cq, 77, caps, good(), unix.EINVAL},
		"unknown PD":                 {0xbeef, cq, qptRC, caps, good(), unix.EINVAL},
		"CQ handle that is the PD":   {pd, pd, qptRC, caps, good(), unix.EINVAL},
		"send depth above max_qp_wr": {pd, cq, qptRC, qpCaps{maxWR + 1, 8, 1, 2, 32}, good(), unix.EINVAL},
		"recv depth above max_qp_wr": {pd, cq, qptRC, qpCaps{8, maxWR + 1, 1, 2, 32}, good(), unix.EINVAL},
		"send SGEs above max_sge":    {pd, cq, qptRC, qpCaps{8, 8, 1000, 2, 32}, good(), unix.EINVAL},
		"inline above the sizing":    {pd, cq, qptRC, qpCaps{8, 8, 1, 2, 1 << 20}, good(), unix.EINVAL},
		"send count not pow2":        {pd, cq, qptRC, caps, with(16, 12), unix.EINVAL},
		"send count above max":       {pd, cq, qptRC, caps, with(16, maxWR*2), unix.EINVAL},
		"receive count not pow2":     {pd, cq, qptRC, caps, with(20, 6), unix.EINVAL},
		"receive shift above 32":     {pd, cq, qptRC, caps, with(24, 33), unix.EINVAL},
		"receive stride too small":   {pd, cq, qptRC, caps, with(24, 3), unix.EINVAL},
		"ring without receive WRs":   {pd, cq, qptRC, qpCaps{8, 0, 1, 2, 32}, good(), unix.EINVAL},
		"unknown flag":               {pd, cq, qptRC, caps, with(28, 1<<30), unix.EINVAL},
		"signature":                  {pd, cq, qptRC, caps, with(28, mlx5QPFlagSig), unix.EOPNOTSUPP},
		"dynamic UAR page":           {pd, cq, qptRC, caps, with(28, mlx5QPFlagUARIndex), unix.EINVAL},
		"bfreg of an unmapped page":  {pd, cq, qptRC, caps, with(28, mlx5QPFlagBfreg), unix.EINVAL},
		"no send queue":              {pd, cq, qptRC, caps, with(16, 0), unix.EOPNOTSUPP},
		"vendor data too short":      {pd, cq, qptRC, caps, good()[:24], unix.EINVAL},
		"buffer not mapped":          {pd, cq, qptRC, caps, mlx5QPReq(4096, addrOf(s.db), sqCnt, rqCnt, rqShift, 0, 0), unix.EFAULT},
		"record not mapped":          {pd, cq, qptRC, caps, mlx5QPReq(addrOf(s.buf), 8, sqCnt, rqCnt, rqShift, 0, 0), unix.EFAULT},
		"record misaligned":          {pd, cq, qptRC, caps, mlx5QPReq(addrOf(s.buf), addrOf(s.db)+4, sqCnt, rqCnt, rqShift, 0, 0), unix.EINVAL},
	} {
		_, _, _, en := createQPCmd(k, a, fd, c.pd, c.cq, c.cq, c.typ, c.caps, c.vendor)
		require.Equal(t, c.want, en, name)
	}
	require.Len(t, k.files[fd].uctx.objects, objects, "refusals create nothing")

	// A UD QP is created the same way.
	udBuf, udDB := qpMemory(t, rqCnt<<rqShift, sqCnt)
	ud, _, _, en := createQPCmd(k, a, fd, pd, cq, cq, qptUD, caps, mlx5QPReq(addrOf(udBuf), addrOf(udDB), sqCnt, rqCnt, rqShift, mlx5QPFlagScatter, 0))
	require.Zero(t, en)
	require.Contains(t, fmt.Sprint(k.files[fd].uctx.objects[ud].qp), "UD QP", "the model's QP is a UD QP")

	// A UC QP is the model's RC QP, unreliable, as mlx5_ib takes UC as it
	// takes RC.
	ucBuf, ucDB := qpMemory(t, rqCnt<<rqShift, sqCnt)
	ucq, _, _, en := createQPCmd(k, a, fd, pd, cq, cq, qptUC, caps, mlx5QPReq(addrOf(ucBuf), addrOf(ucDB), sqCnt, rqCnt, rqShift, 0, 0))
	require.Zero(t, en, "UC type")
	require.True(t, k.files[fd].uctx.objects[ucq].uc)
	// Its modifies take qp_state_table's UC masks: RC's attributes of
	// acknowledgement, retry and READ/atomic depth are EINVAL, as the
	// kernel's ib_modify_qp_is_ok refuses them.
	ucRTR := modifyQP{h: ucq, mask: mState | mAV | mMTU | mDestQPN | mRQPSN, state: 2, mtu: 3, dlid: pa.LID, pathPort: 1, destQPN: qps[0].qpn}
	ucRTS := modifyQP{h: ucq, mask: mState | mSQPSN, state: 3}
	require.Zero(t, modifyQPCmd(k, a, fd, toInit(ucq)))
	rcRTR := ucRTR
	rcRTR.mask |= mDestRdAtom | mMinRNR
	require.Equal(t, unix.EINVAL, modifyQPCmd(k, a, fd, rcRTR), "UC RTR with RC's mask")
	require.Zero(t, modifyQPCmd(k, a, fd, ucRTR))
	rcRTS := toRTS(ucq)
	require.Equal(t, unix.EINVAL, modifyQPCmd(k, a, fd, rcRTS), "UC RTS with RC's mask")
	require.Zero(t, modifyQPCmd(k, a, fd, ucRTS))
	st, err := k.files[fd].uctx.objects[ucq].qp.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTS, st)
	_, en = queryQPCmd(k, a, fd, ucq)
	require.Zero(t, en, "QUERY_QP of a UC QP")
	require.Zero(t, destroyQPCmd(k, a, fd, ucq))

	require.Equal(t, unix.ENOENT, destroyQPCmd(k, a, fd, 0xbeef), "unknown handle")
	require.Equal(t, unix.EINVAL, destroyQPCmd(k, a, fd, pd), "a PD handle is not a QP")
	require.Zero(t, handleCmd(k, a, fd, cmdDeregMR, mr))
	for _, h := range []uint32{qps[0].h, qps[1].h, ud} {
		require.Zero(t, destroyQPCmd(k, a, fd, h))
	}
	require.Equal(t, unix.ENOENT, destroyQPCmd(k, a, fd, ud), "destroyed twice")
	_, _, en = destroyCQCmd(k, a, fd, cq)
	require.Zero(t, en, "the CQ is free once its QPs are gone")
	require.Zero(t, handleCmd(k, a, fd, cmdDeallocPD, pd))
}

// TestKernelRandomQPCommands sends QP commands with random fields and
// requires an errno of the kernel's and no crash; closing the node then
// destroys what was created.
func TestKernelRandomQPCommands(t *testing.T) {
	k, a, fd := objectKernel(t)
	pd, _, en := allocPDCmd(k, a, fd)
	require.Zero(t, en)
	ring, cqdb := cqMemory(t, 64, 64)
	cq, _, _, en := createCQCmd(k, a, fd, 63, 0, -1, mlx5CQReq(addrOf(ring), addrOf(cqdb), 64), 8)
	require.Zero(t, en)
	buf, db := qpMemory(t, 1<<12, 64)
	rng := rand.New(rand.NewSource(12))
	for i := 0; i < 2000; i++ {
		var en syscall.Errno
		switch rng.Intn(5) {
		case 4:
			_, en = queryQPCmd(k, a, fd, uint32(rng.Intn(16)))
		case 3:
			en = modifyQPCmd(k, a, fd, modifyQP{h: uint32(rng.Intn(16)), mask: rng.Uint32() & (1<<22 - 1), state: uint8(rng.Intn(9)),
				cur: uint8(rng.Intn(8)), mtu: uint8(rng.Intn(7)), port: uint8(rng.Intn(3)), pathPort: uint8(rng.Intn(3)),
				dlid: uint16(rng.Intn(4)), destQPN: rng.Uint32(), access: rng.Uint32() & 0x1f, timeout: uint8(rng.Intn(32)),
				retry: uint8(rng.Intn(9)), rnrRetry: uint8(rng.Intn(9)), minRNR: uint8(rng.Intn(32)), rdAtom: uint8(rng.Intn(20))})
		case 0:
			addrs := []uintptr{addrOf(buf), addrOf(db), uintptr(a.sanitize(rng.Uint64()))}
			pick := func(v ...uint32) uint32 { return v[rng.Intn(len(v))] }
			vendor := mlx5QPReq(addrs[rng.Intn(3)], addrs[rng.Intn(3)], pick(0, 16, 64, rng.Uint32()),
				pick(0, 8, 64, rng.Uint32()), pick(4, 5, 6, rng.Uint32()), pick(0, mlx5QPFlagScatter, rng.Uint32()), rng.Uint32()%8)
			if rng.Intn(4) == 0 {
				rng.Read(vendor[16:])
			}
			vendor = vendor[:rng.Intn(len(vendor)+1)]
			hs := []uint32{pd, cq, uint32(rng.Intn(16))}
			c := qpCaps{pick(0, 8, rng.Uint32()), pick(0, 8, rng.Uint32()), pick(1, 2, rng.Uint32()), pick(1, 2, rng.Uint32()), pick(0, 32, rng.Uint32())}
			_, _, _, en = createQPCmd(k, a, fd, hs[rng.Intn(3)], hs[rng.Intn(3)], hs[rng.Intn(3)], uint8(pick(qptRC, qptUD, rng.Uint32())), c, vendor)
		case 1:
			en = destroyQPCmd(k, a, fd, uint32(rng.Intn(16)))
		case 2:
			core := make([]byte, 8+rng.Intn(64))
			rng.Read(core)
			ne.PutUint64(core, a.sanitize(ne.Uint64(core)))
			b, n := a.writeCmd([]uint32{cmdCreateQP, cmdDestroyQP, cmdModifyQP, cmdQueryQP}[rng.Intn(4)], core, rng.Intn(12))
			_, en = k.write(fd, b, n)
		}
		require.True(t, allowedErrnos[en], "errno %v", en)
	}
	require.Zero(t, k.close(fd))
}
