//go:build cgo && linux

package verbs_test

import (
	"bytes"
	"errors"
	"fmt"
	"math/bits"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/blueflame"
	. "github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/devicetest"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
	"github.com/stretchr/testify/require"
)

// The TestHardware* tests run against the mlx5 device
// devicetest.RequireDevice names (MLX5KIT_DEVICE, else the first with an
// ACTIVE port) and skip through it when there is none (they fail instead
// under MLX5KIT_REQUIRE_DEVICE=1, as make hwtest sets it).

// hwDevice opens the mlx5 device devicetest.RequireDevice names for the
// test.
func hwDevice(t *testing.T) *Device {
	t.Helper()
	name := devicetest.RequireDevice(t)
	d, err := Open(name)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, d.Close()) })
	return d
}

// loopbackPath finds an active port and the address of that port itself.
func loopbackPath(t *testing.T, d *Device) (ctx.AddressAttr, ctx.PortAttr) {
	t.Helper()
	attr, err := d.Query()
	require.NoError(t, err)
	for p := uint8(1); p <= attr.PhysPortCount; p++ {
		pa, err := d.QueryPort(p)
		require.NoError(t, err)
		if pa.State != ctx.PortStateActive {
			continue
		}
		if pa.LinkLayer == ctx.LinkLayerInfiniBand {
			return ctx.AddressAttr{Port: p, DLID: pa.LID}, pa
		}
		gids, err := d.QueryGIDs(p)
		require.NoError(t, err)
		g, err := ctx.ChooseGID(pa, gids, ctx.GIDSelector{})
		require.NoError(t, err, "RoCE port %d", p)
		return ctx.AddressAttr{Port: p, GlobalRoute: true, DGID: g.GID, SGIDIndex: uint8(g.Index), HopLimit: 64}, pa
	}
	t.Fatalf("no mlx5 device port is ACTIVE (%d ports): connect a port to run the loopback tests", attr.PhysPortCount)
	return ctx.AddressAttr{}, ctx.PortAttr{}
}

func TestHardwareDeviceQueries(t *testing.T) {
	d := hwDevice(t)
	// The device under test is the one devicetest.FirstDevice picks
	// (MLX5KIT_DEVICE, else the first with an ACTIVE port), not
	// necessarily the first listed.
	list, err := ListDevices()
	require.NoError(t, err)
	firstName := ""
	for _, l := range list {
		if l.MLX5 {
			firstName = l.Name
			break
		}
	}
	first, err := Open("")
	require.NoError(t, err)
	require.Equal(t, firstName, first.Name(), `Open("") opens the first mlx5 device`)
	require.NoError(t, first.Close())

	a, err := d.Query()
	require.NoError(t, err)
	require.Equal(t, d.Name(), a.Name)
	require.NotEmpty(t, a.FirmwareVersion)
	require.Equal(t, d.NodeGUID(), a.NodeGUID)
	require.GreaterOrEqual(t, a.PhysPortCount, uint8(1))
	require.NotZero(t, a.MaxQP)
	require.NotZero(t, a.MaxCQE)
	require.GreaterOrEqual(t, a.MaxInline, uint32(prm.WQEBBSize-prm.CtrlSize-prm.InlineHeaderSize), "inline must fill at least one WQEBB")
	require.Zero(t, (a.MaxInline+prm.InlineHeaderSize)%prm.SegmentSize, "granted inline + header fills whole segments")
	if a.BlueFlameSize != 0 {
		require.Equal(t, 1, bits.OnesCount32(a.BlueFlameSize), "BlueFlame size %d", a.BlueFlameSize)
	}

	ext, err := d.QueryExtended()
	require.NoError(t, err)
	require.NotZero(t, ext.PageSizeCap)
	dv, err := d.QueryDV()
	require.NoError(t, err)
	require.Equal(t, d.DVAttr(), dv)

	table, err := d.QueryGIDTable()
	require.NoError(t, err)
	for p := uint8(1); p <= a.PhysPortCount; p++ {
		pa, err := d.QueryPort(p)
		require.NoError(t, err)
		require.Equal(t, p, pa.Port)
		require.NotZero(t, pa.GIDTableLen)
		gids, err := d.QueryGIDs(p)
		require.NoError(t, err)
		for _, g := range gids {
			require.Less(t, g.Index, pa.GIDTableLen)
			require.Equal(t, p, g.Port, "GID %d", g.Index)
			if pa.LinkLayer == ctx.LinkLayerEthernet {
				require.NotZero(t, g.NetdevIfindex, "RoCE GID %d has a network device", g.Index)
			}
			if pa.LinkLayer == ctx.LinkLayerEthernet {
				require.Contains(t, []ctx.GIDType{ctx.GIDTypeRoCEv1, ctx.GIDTypeRoCEv2}, g.Type)
			} else {
				require.Equal(t, ctx.GIDTypeIB, g.Type)
			}
			one, err := d.QueryGID(p, g.Index)
			require.NoError(t, err)
			require.Equal(t, g, one.GIDEntry)
		}
		n := 0
		for _, e := range table {
			if e.Port == p {
				n++
			}
		}
		require.Equal(t, len(gids), n)
	}

	_, err = d.QueryPort(0)
	require.Error(t, err)
	var ve *VerbError
	require.True(t, errors.As(err, &ve))
	require.Equal(t, "ibv_query_port", ve.Verb)
}

func TestHardwareObjects(t *testing.T) { hardwareObjects(t) }

// TestHardwareObjectsShutUpBF runs TestHardwareObjects with
// MLX5_SHUT_UP_BF=1, which some hosts set for every rdma-core program:
// the QPs are doorbell only (no thread domain, BlueFlameSize 0), as
// CreateQueuePair documents, and everything else is the same.
func TestHardwareObjectsShutUpBF(t *testing.T) {
	t.Setenv("MLX5_SHUT_UP_BF", "1")
	hardwareObjects(t)
}

func hardwareObjects(t *testing.T) {
	d := hwDevice(t)
	path, port := loopbackPath(t, d)
	attr, err := d.Query()
	require.NoError(t, err)

	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	buf, err := ctx.AllocBuffer(1<<16, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	access := ctx.AccessLocalWrite | ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic
	mr, err := pd.RegisterBytes(buf.Bytes(), access)
	require.NoError(t, err)
	require.Equal(t, buf.Pointer(), mr.Addr())
	require.Equal(t, uint64(buf.Len()), mr.Len())

	for _, size := range []uint32{64, 128} {
		cq, err := d.CreateCompletionQueue(CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 100, CQESize: size, EventChannel: true}})
		require.NoError(t, err, "CQE size %d", size)
		desc := cq.Descriptor()
		require.Equal(t, size, desc.CQESize)
		require.Equal(t, 1, bits.OnesCount32(desc.CQECnt))
		require.GreaterOrEqual(t, desc.CQECnt, uint32(101), "rdma-core gives at least depth+1 CQEs")
		require.NotNil(t, desc.Buf)
		require.NotNil(t, desc.DBRec)
		require.NotNil(t, desc.UAR)
		for i := uint32(0); i < desc.CQECnt; i++ {
			opOwn := *(*byte)(unsafe.Add(desc.Buf, uintptr(i*size+size-1)))
			require.Equal(t, byte(prm.CQEInvalidOpOwn), opOwn, "CQE %d of a new CQ is INVALID with owner 0", i)
		}
		require.GreaterOrEqual(t, cq.EventFD(), 0)
		ok, err := cq.ReadEvent()
		require.NoError(t, err)
		require.False(t, ok)
		ok, err = cq.WaitEvent(5 * time.Millisecond)
		require.NoError(t, err)
		require.False(t, ok)
		require.NoError(t, cq.Close())
		require.NoError(t, cq.Close(), "Close is idempotent")
	}
	_, err = d.CreateCompletionQueue(CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 8, CQESize: 96}})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)

	// The options of ctx.CompletionQueueConfig, through ctx as a user asks
	// for them (the provider's CreateCompletionQueue takes them unchanged): granted when the device reports them, ErrNotSupported
	// otherwise; a completion vector past the device's is refused.
	require.NotZero(t, attr.CompVectors)
	for _, opt := range []struct {
		cfg ctx.CompletionQueueConfig
		has bool
	}{
		{ctx.CompletionQueueConfig{Depth: 64, Compression: ctx.CQECompressionHash}, attr.CQECompression},
		{ctx.CompletionQueueConfig{Depth: 64, Compression: ctx.CQECompressionChecksum}, attr.CQECompressionChecksum},
		{ctx.CompletionQueueConfig{Depth: 64, CQESize: 128, CQEPadding: true}, attr.CQEPadding},
		{ctx.CompletionQueueConfig{Depth: 64, CompVector: attr.CompVectors - 1}, true},
	} {
		cq, err := d.CreateCompletionQueue(CQConfig{CompletionQueueConfig: opt.cfg})
		if !opt.has {
			require.ErrorIs(t, err, ctx.ErrNotSupported, "%+v", opt.cfg)
			continue
		}
		require.NoError(t, err, "%+v", opt.cfg)
		require.NoError(t, cq.Close())
	}
	_, err = d.CreateCompletionQueue(CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 64, CompVector: attr.CompVectors}})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)

	cq, err := d.CreateCompletionQueue(CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 256}})
	require.NoError(t, err)
	require.Equal(t, -1, cq.EventFD())

	rc, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 64, RecvDepth: 64, MaxSendSGE: 2, MaxRecvSGE: 2, MaxInline: 64}})
	require.NoError(t, err)
	rd := rc.Descriptor()
	require.NotZero(t, rd.QPN)
	require.Equal(t, uint32(prm.WQEBBSize), rd.SQ.Stride)
	require.Equal(t, 1, bits.OnesCount32(rd.SQ.WQECnt))
	require.GreaterOrEqual(t, rd.SQ.WQECnt, uint32(64))
	require.Equal(t, 1, bits.OnesCount32(rd.RQ.WQECnt))
	require.GreaterOrEqual(t, rd.RQ.Stride, uint32(prm.DataSize*2))
	require.GreaterOrEqual(t, rd.MaxInline, uint32(64))
	require.GreaterOrEqual(t, rd.MaxSendSGE, uint32(2))
	// rdma-core allocated the ring the kit planned: slots of the kit's
	// largest WQE, and the limits that fill them.
	_, plan, err := sqsize.Plan(ctx.QPTypeRC, ctx.QueuePairCaps{SendDepth: 64, MaxSendSGE: 2, MaxInline: 64}, sqsize.DeviceOf(attr))
	require.NoError(t, err)
	require.Equal(t, plan.WQECnt, rd.SQ.WQECnt)
	require.Equal(t, plan.MaxInline, rd.MaxInline)
	require.Equal(t, plan.MaxSGE, rd.MaxSendSGE)
	require.GreaterOrEqual(t, rd.MaxRecvSGE, uint32(2))
	require.NotNil(t, rd.DBRec)
	require.NotNil(t, rd.BlueFlame)
	if ShutUpBF(d) {
		require.False(t, rc.DedicatedBlueFlame(), "MLX5_SHUT_UP_BF: no thread domain")
		require.Zero(t, rd.BlueFlameSize, "MLX5_SHUT_UP_BF: doorbell only")
	} else {
		require.True(t, rc.DedicatedBlueFlame())
		require.Equal(t, attr.BlueFlameSize, rd.BlueFlameSize)
	}
	// A send queue as deep as RC's limit (max_qp_wr/2 on a ConnectX: the
	// kit's WQEs take two basic blocks) is created, one more is refused
	// before rdma-core is called.
	require.NotZero(t, attr.SendLimitsRC.MaxDepth)
	deep, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: attr.SendLimitsRC.MaxDepth, MaxSendSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, deep.Close())
	_, err = pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: attr.SendLimitsRC.MaxDepth + 1, MaxSendSGE: 1}})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "RC limit")
	require.Zero(t, prm.Load32(rd.DBRec))
	require.Zero(t, prm.Load32(unsafe.Add(rd.DBRec, prm.DoorbellRecordSendB)))

	err = rc.Modify(ctx.QPAttr{State: ctx.QPStateRTS})
	require.ErrorIs(t, err, ctx.ErrInvalidState, "RESET→RTS")
	require.Contains(t, err.Error(), "ibv_modify_qp")
	s, err := rc.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateReset, s)

	ud, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeUD, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, ud.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: path.Port, QKey: 0x11111111}))
	require.NoError(t, ud.Modify(ctx.QPAttr{State: ctx.QPStateRTR}))
	require.NoError(t, ud.Modify(ctx.QPAttr{State: ctx.QPStateRTS, SQPSN: 0x123}))
	s, err = ud.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTS, s)

	ah, err := pd.CreateAddressHandle(path)
	require.NoError(t, err)
	av := ah.AV()
	require.Zero(t, prm.Load32(unsafe.Pointer(&av[prm.AVDQPDCT])), "rdma-core leaves dqp_dct to the WQE")
	require.Zero(t, prm.Load64(unsafe.Pointer(&av[prm.AVKey])), "and the key")
	if path.GlobalRoute {
		require.Equal(t, path.DGID[:], av[prm.AVRGID:prm.AVRGID+16])
	} else {
		require.Equal(t, path.DLID, prm.Load16(unsafe.Pointer(&av[prm.AVRLID])))
	}

	srq, err := pd.CreateSRQ(ctx.SRQConfig{Depth: 100, MaxSGE: 2})
	require.NoError(t, err)
	sd := srq.Descriptor()
	require.Equal(t, 1, bits.OnesCount32(sd.WQECnt))
	require.GreaterOrEqual(t, sd.WQECnt, uint32(101))
	require.Equal(t, uint32(0), sd.Head)
	require.Equal(t, sd.WQECnt-1, sd.Tail)
	require.GreaterOrEqual(t, sd.MaxRecvSGE, uint32(2))
	for i := uint32(0); i < sd.WQECnt; i++ {
		next := prm.Load16(unsafe.Add(sd.Buf, uintptr(i*sd.Stride+prm.SRQNextWQEIndex)))
		require.Equal(t, uint16((i+1)%sd.WQECnt), next, "SRQ WQE %d links to the next one, the last back to 0", i)
	}

	if attr.DC {
		dct, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeDCT, RecvCQ: cq, SRQ: srq, DCKey: 0xdc0ffee})
		require.NoError(t, err)
		require.NoError(t, dct.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: path.Port, Access: access}))
		require.NoError(t, dct.Modify(ctx.QPAttr{State: ctx.QPStateRTR, Path: path, PathMTU: port.ActiveMTU, MinRNRTimer: 12}))
		require.NotZero(t, dct.Descriptor().QPN, "the DCT number is known after RTR")
		s, err := dct.State()
		require.NoError(t, err)
		require.Equal(t, ctx.QPStateRTR, s)
		require.ErrorIs(t, dct.Modify(ctx.QPAttr{State: ctx.QPStateRTS}), ctx.ErrInvalidState)

		_, err = pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeDCI, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 32, MaxInline: attr.SendLimitsDCI.MaxInline + 1}})
		require.ErrorIs(t, err, ctx.ErrInvalidArgument)
		require.Contains(t, err.Error(), "DCI limit")
		dci, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeDCI, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 32, MaxSendSGE: 1, MaxInline: 32}})
		require.NoError(t, err)
		dd := dci.Descriptor()
		require.Zero(t, dd.RQ.WQECnt)
		require.Equal(t, uint32(prm.WQEBBSize), dd.SQ.Stride)
		require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: path.Port}))
		require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: port.ActiveMTU}))
		require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 1}))
	} else {
		t.Log("device reports no DC support; DCI/DCT creation not exercised")
	}

	// A CQ in use cannot go: EBUSY, and the CQ stays usable.
	err = cq.Close()
	require.ErrorIs(t, err, syscall.EBUSY)
	require.ErrorIs(t, err, ctx.ErrBusy)
	require.Contains(t, err.Error(), "ibv_destroy_cq")
	require.False(t, CQClosed(cq))

	require.NoError(t, mr.Close())
	// Device.Close (cleanup) destroys what is left in order.
}

// postWQE writes a WQE's first 8 bytes to the doorbell (BlueFlame register
// at offset, without copying the WQE), as rdma-core does for a post that
// does not use BlueFlame.
func postWQE(qd descriptor.QP, pi uint32, wqe unsafe.Pointer, bfOffset uint32) {
	blueflame.StoreBarrier()
	prm.Store32(unsafe.Add(qd.DBRec, prm.DoorbellRecordSendB), pi&0xffff)
	blueflame.WCStart()
	*(*uint64)(unsafe.Add(qd.BlueFlame, uintptr(bfOffset))) = *(*uint64)(wqe)
	blueflame.FlushWrites()
}

// pollCQE waits for the CQE at consumer index ci and returns it.
func pollCQE(t *testing.T, cd descriptor.CQ, ci uint32) unsafe.Pointer {
	t.Helper()
	cqe := unsafe.Add(cd.Buf, uintptr((ci&(cd.CQECnt-1))*cd.CQESize+cd.CQESize-prm.CQE64Size))
	owner := uint8(ci/cd.CQECnt) & 1
	deadline := time.Now().Add(5 * time.Second)
	for {
		opOwn := *(*uint8)(unsafe.Add(cqe, prm.CQEOpOwn))
		if prm.OpOwnOpcode(opOwn) != prm.CQEInvalid && opOwn&prm.CQEOwnerMask == owner {
			blueflame.ReadBarrier()
			prm.Store32(cd.DBRec, (ci+1)&prm.CQConsumerIndexMask)
			return cqe
		}
		if time.Now().After(deadline) {
			t.Fatalf("no CQE at consumer index %d after 5 s", ci)
		}
	}
}

// TestHardwareRDMAWriteLoopback checks the descriptors end to end: an RC QP
// pair connected to itself through the port, a NOP and an RDMA WRITE built
// by hand in the send ring, the doorbell, the CQEs read from the ring, the
// bytes at the destination, and a completion event after arming the CQ
// through its UAR page.
func TestHardwareRDMAWriteLoopback(t *testing.T) {
	d := hwDevice(t)
	path, port := loopbackPath(t, d)
	attr, err := d.Query()
	require.NoError(t, err)

	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	buf, err := ctx.AllocBuffer(2*4096, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	access := ctx.AccessLocalWrite | ctx.AccessRemoteWrite | ctx.AccessRemoteRead
	mr, err := pd.RegisterBytes(buf.Bytes(), access)
	require.NoError(t, err)
	cq, err := d.CreateCompletionQueue(CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 64, EventChannel: true}})
	require.NoError(t, err)
	caps := ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	a, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: caps})
	require.NoError(t, err)
	b, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: caps})
	require.NoError(t, err)

	if a.Descriptor().BlueFlameSize != 0 {
		require.NotEqual(t, a.Descriptor().BlueFlame, b.Descriptor().BlueFlame, "each QP has a BlueFlame register of its own")
	}

	rdAtomic := uint8(min(attr.MaxQPRdAtomic, 16))
	for _, p := range [][2]*QueuePair{{a, b}, {b, a}} {
		q, remote := p[0], p[1]
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: path.Port, Access: access}))
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: remote.Descriptor().QPN, Path: path,
			PathMTU: min(port.ActiveMTU, ctx.MTU1024), MaxDestRdAtomic: rdAtomic, MinRNRTimer: 12}))
	}
	for _, q := range []*QueuePair{a, b} {
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: rdAtomic}))
	}

	qd, cd := a.Descriptor(), cq.Descriptor()
	wqe := func(pi uint32) unsafe.Pointer {
		w := unsafe.Add(qd.SQ.Buf, uintptr((pi&(qd.SQ.WQECnt-1))*qd.SQ.Stride))
		clear(unsafe.Slice((*byte)(w), qd.SQ.Stride))
		return w
	}
	bfOffset := func(pi uint32) uint32 { return (pi & 1) * qd.BlueFlameSize }

	// NOP, signaled.
	w := wqe(0)
	prm.Store32(unsafe.Add(w, prm.CtrlOpmodIdxOpcode), prm.CtrlOpmodIdxOpcodeWord(0, 0, prm.OpNop))
	prm.Store32(unsafe.Add(w, prm.CtrlQPNDS), prm.CtrlQPNDSWord(qd.QPN, 1))
	*(*uint8)(unsafe.Add(w, prm.CtrlFmCeSe)) = prm.FlagCQUpdate
	postWQE(qd, 1, w, bfOffset(0))
	cqe := pollCQE(t, cd, 0)
	require.Equal(t, prm.CQEReq, prm.OpOwnOpcode(*(*uint8)(unsafe.Add(cqe, prm.CQEOpOwn))))
	require.Equal(t, uint16(0), prm.Load16(unsafe.Add(cqe, prm.CQEWQECounter)))
	require.Equal(t, qd.QPN, prm.Load32(unsafe.Add(cqe, prm.CQESopDropQPN))&prm.CQEQPNMask)

	// RDMA WRITE of 256 bytes from the first page to the second, signaled.
	src, dst := buf.Bytes()[:256], buf.Bytes()[4096:4096+256]
	for i := range src {
		src[i] = byte(i*7 + 3)
	}
	clear(dst)
	w = wqe(1)
	prm.Store32(unsafe.Add(w, prm.CtrlOpmodIdxOpcode), prm.CtrlOpmodIdxOpcodeWord(0, 1, prm.OpRdmaWrite))
	prm.Store32(unsafe.Add(w, prm.CtrlQPNDS), prm.CtrlQPNDSWord(qd.QPN, 3))
	*(*uint8)(unsafe.Add(w, prm.CtrlFmCeSe)) = prm.FlagCQUpdate
	raddr := unsafe.Add(w, prm.CtrlSize)
	prm.Store64(unsafe.Add(raddr, prm.RaddrAddr), uint64(uintptr(unsafe.Pointer(&dst[0]))))
	prm.Store32(unsafe.Add(raddr, prm.RaddrRkey), mr.RKey())
	data := unsafe.Add(raddr, prm.RaddrSize)
	prm.Store32(unsafe.Add(data, prm.DataByteCount), uint32(len(src)))
	prm.Store32(unsafe.Add(data, prm.DataLKey), mr.LKey())
	prm.Store64(unsafe.Add(data, prm.DataAddr), uint64(uintptr(unsafe.Pointer(&src[0]))))

	// Arm the CQ for the next completion before posting: sn 0, any event,
	// consumer index 1.
	const ci = 1
	armWord := uint32(0)<<prm.CQArmSNShift | prm.CQArmAny | ci
	prm.Store32(unsafe.Add(cd.DBRec, prm.DoorbellRecordSendB), armWord)
	var db [8]byte
	prm.Store32(unsafe.Pointer(&db[0]), armWord)
	prm.Store32(unsafe.Pointer(&db[4]), cd.CQN)
	blueflame.WCStart()
	*(*uint64)(unsafe.Add(cd.UAR, prm.CQDoorbellOffset)) = *(*uint64)(unsafe.Pointer(&db[0]))
	blueflame.FlushWrites()

	postWQE(qd, 2, w, bfOffset(1))
	ok, err := cq.WaitEvent(5 * time.Second)
	require.NoError(t, err)
	require.True(t, ok, "armed CQ signals a completion event")
	require.Equal(t, uint64(1), cq.Events())
	cqe = pollCQE(t, cd, ci)
	opOwn := *(*uint8)(unsafe.Add(cqe, prm.CQEOpOwn))
	require.Equal(t, prm.CQEReq, prm.OpOwnOpcode(opOwn), "syndrome %#x", *(*uint8)(unsafe.Add(cqe, prm.ErrCQESyndrome)))
	require.Equal(t, uint16(1), prm.Load16(unsafe.Add(cqe, prm.CQEWQECounter)))
	require.True(t, bytes.Equal(src, dst), "RDMA WRITE moved the bytes")
}

func TestHardwareAsyncWatcher(t *testing.T) {
	d := hwDevice(t)
	require.GreaterOrEqual(t, d.AsyncEventFD(), 0)
	_, ok, err := d.ReadAsyncEvent()
	require.NoError(t, err)
	_ = ok // a port event may be pending on a busy machine
	got := make(chan ctx.AsyncEvent, 16)
	w, err := d.WatchAsyncEvents(func(ev ctx.AsyncEvent) { got <- ev })
	require.NoError(t, err)

	// Moving an RC QP to the error state makes the device report nothing by
	// itself, so the watcher is only shown to start and stop cleanly here;
	// QP fatal and port events need a failing link to provoke.
	time.Sleep(20 * time.Millisecond)
	require.NoError(t, w.Stop())
	require.NoError(t, w.Stop(), "Stop is idempotent")
	w2, err := d.WatchAsyncEvents(func(ctx.AsyncEvent) {})
	require.NoError(t, err)
	require.NoError(t, d.Close(), "Close stops watchers")
	select {
	case <-WatcherDone(w2):
	case <-time.After(time.Second):
		t.Fatal("watcher still running after Close")
	}
	_, err = d.Query()
	require.ErrorIs(t, err, ctx.ErrClosed)
}

// TestHardwareThroughCtx runs the provider through ctx, the way the
// transports use it.
func TestHardwareThroughCtx(t *testing.T) {
	c := devicetest.OpenContext(t)
	require.Equal(t, ctx.KindHardware, c.Kind())
	require.Equal(t, ctx.ProviderHardware, c.Provider())
	dev, ok := DeviceOf(provider.DeviceOf(c))
	require.True(t, ok)
	require.Equal(t, c.DeviceName(), dev.Name())

	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 32})
	require.NoError(t, err)
	qp, err := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 8, RecvDepth: 8, MaxSendSGE: 1, MaxRecvSGE: 1}})
	require.NoError(t, err)
	require.NotZero(t, qp.QPN())
	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = buf.Close() })
	mr, err := pd.RegisterBuffer(buf, ctx.AccessLocalWrite)
	require.NoError(t, err)
	require.NotZero(t, mr.LKey())
	require.NoError(t, c.Close(), "ctx closes QP, CQ, MR, PD and the device in order")
}

// TestHardwareKernelAgreesWithTransitionTable calls ibv_modify_qp, past the
// provider's transition table, for transitions the table refuses, and
// checks that this kernel refuses them too with EINVAL. A refusal that
// later kernels lift (a DCI to RESET) is logged when this kernel accepts it.
func TestHardwareKernelAgreesWithTransitionTable(t *testing.T) {
	d := hwDevice(t)
	path, port := loopbackPath(t, d)
	attr, err := d.Query()
	require.NoError(t, err)
	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := d.CreateCompletionQueue(CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 64}})
	require.NoError(t, err)

	try := func(q *QueuePair, from, to ctx.QPState) {
		t.Helper()
		r := qpstate.Lookup(q.Type(), from, to)
		name := fmt.Sprintf("%v %v→%v", q.Type(), from, to)
		err := ModifyStateUnchecked(q, to)
		switch {
		case r.Legal:
			require.NoError(t, err, name)
		case r.Newer != "" && err == nil:
			t.Logf("%s: this kernel accepts it (%s)", name, r.Newer)
		default:
			require.ErrorIs(t, err, syscall.EINVAL, "%s: the table says %s (%s)", name, r.Why, r.Source)
		}
	}

	caps := ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 16, MaxSendSGE: 1, MaxRecvSGE: 1}
	rc, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: caps})
	require.NoError(t, err)
	try(rc, ctx.QPStateReset, ctx.QPStateError)
	access := ctx.AccessLocalWrite | ctx.AccessRemoteWrite
	require.NoError(t, rc.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: path.Port, Access: access}))
	require.NoError(t, rc.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: rc.Descriptor().QPN, Path: path,
		PathMTU: min(port.ActiveMTU, ctx.MTU1024), MaxDestRdAtomic: 1, MinRNRTimer: 12}))
	require.NoError(t, rc.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 1}))
	try(rc, ctx.QPStateRTS, ctx.QPStateSQD)
	try(rc, ctx.QPStateRTS, ctx.QPStateRTS)
	try(rc, ctx.QPStateRTS, ctx.QPStateError)
	try(rc, ctx.QPStateError, ctx.QPStateReset)
	require.NoError(t, rc.Close())

	if !attr.DC {
		t.Skip("device reports no DC support")
	}
	srq, err := pd.CreateSRQ(ctx.SRQConfig{Depth: 16, MaxSGE: 1})
	require.NoError(t, err)
	dct, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeDCT, RecvCQ: cq, SRQ: srq, DCKey: 0xdc})
	require.NoError(t, err)
	try(dct, ctx.QPStateReset, ctx.QPStateError)
	require.NoError(t, dct.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: path.Port, Access: access}))
	require.NoError(t, dct.Modify(ctx.QPAttr{State: ctx.QPStateRTR, Path: path, PathMTU: port.ActiveMTU, MinRNRTimer: 12}))
	try(dct, ctx.QPStateRTR, ctx.QPStateError)
	try(dct, ctx.QPStateRTR, ctx.QPStateReset)
	require.NoError(t, dct.Close(), "a DCT in RTR is destroyed")

	dci, err := pd.CreateQueuePair(QPConfig{Type: ctx.QPTypeDCI, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 16, MaxSendSGE: 1}})
	require.NoError(t, err)
	try(dci, ctx.QPStateReset, ctx.QPStateError)
	require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: path.Port}))
	require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: port.ActiveMTU, Path: path}))
	require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 1}))
	try(dci, ctx.QPStateRTS, ctx.QPStateReset)
	require.NoError(t, dci.Close())
	require.NoError(t, srq.Close())
	require.NoError(t, cq.Close())
	require.NoError(t, pd.Close())
}
