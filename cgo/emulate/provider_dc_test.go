//go:build cgo && linux

package emulate_test

import (
	"os"
	"os/exec"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// postSRQ writes one receive WQE of one buffer at the head of an SRQ's
// free list (the SRQ WQE layout libmlx5 and the kit share: a next segment
// whose next_wqe_index links the free list, then data segments ended by an
// invalid lkey) and rings its doorbell record with the WQE counter; it
// returns the new head.
func postSRQ(d descriptor.SRQ, head uint16, counter uint16, addr uint64, n, lkey uint32) uint16 {
	w := unsafe.Add(d.Buf, uintptr(head)*uintptr(d.Stride))
	next := prm.Load16(unsafe.Add(w, prm.SRQNextWQEIndex))
	seg := unsafe.Add(w, prm.SRQNextSize)
	prm.Store32(seg, n)
	prm.Store32(unsafe.Add(seg, prm.DataLKey), lkey)
	prm.Store64(unsafe.Add(seg, prm.DataAddr), addr)
	if d.MaxRecvSGE > 1 {
		prm.Store32(unsafe.Add(seg, prm.DataSize), 0)
		prm.Store32(unsafe.Add(seg, prm.DataSize+prm.DataLKey), prm.InvalidLKey)
	}
	prm.Store32(d.DBRec, uint32(counter))
	return next
}

// TestCgoProviderSharedReceiveQueueAndDC creates, through the kit's cgo
// provider on the emulated device (ibv_create_srq and mlx5dv_create_qp of
// rdma-core unmodified), an SRQ, an RC pair whose receiver takes its
// receives from the SRQ, and a DCI and a DCT on that SRQ. It moves a SEND
// RC→SRQ and a SEND DCI→DCT, posted with the kit's WQE builder on the rings
// libmlx5 allocated and polled with monocq from libmlx5's CQ ring, and
// checks the bytes, the QPNs, the DCT number libmlx5 learnt at RTR and the
// SRQ number in the receive CQEs.
func TestCgoProviderSharedReceiveQueueAndDC(t *testing.T) {
	f := emulate.Fabric()
	require.NotNil(t, f, "the emulation is on")
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	pa, err := d.QueryPort(1)
	require.NoError(t, err)
	attr, err := d.Query()
	require.NoError(t, err)
	require.True(t, attr.DC, "the device's probe created a DCI")
	require.NotZero(t, attr.MaxSendWQESize, "the device's probe sized RC QPs")

	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 64}})
	require.NoError(t, err)
	creates := emulate.CallCount("write CREATE_SRQ")
	srq, err := pd.CreateSRQ(ctx.SRQConfig{Depth: 16, MaxSGE: 2})
	require.NoError(t, err, "ibv_create_srq")
	require.Equal(t, creates+1, emulate.CallCount("write CREATE_SRQ"), "the write command libibverbs falls back to")
	sd := srq.Descriptor()
	require.NotZero(t, sd.SRQN)
	require.Equal(t, uint32(0), sd.Head)
	require.GreaterOrEqual(t, sd.WQECnt, uint32(17))

	path := ctx.AddressAttr{Port: 1, DLID: pa.LID}
	addr := addrvec.Address{DLID: pa.LID}
	if pa.LinkLayer == ctx.LinkLayerEthernet {
		g, err := d.QueryGID(1, 0)
		require.NoError(t, err)
		path = ctx.AddressAttr{Port: 1, GlobalRoute: true, DGID: g.GID, HopLimit: 64}
		addr = addrvec.Address{RoCE: true, Global: true, DGID: g.GID, HopLimit: 64}
	}

	// An RC pair: the receiver on the SRQ.
	send, err := pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Caps: ctx.QueuePairCaps{SendDepth: 16, RecvDepth: 4, MaxSendSGE: 1, MaxRecvSGE: 1, MaxInline: 32}})
	require.NoError(t, err)
	recv, err := pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq,
		Caps: ctx.QueuePairCaps{SendDepth: 16, MaxSendSGE: 1}})
	require.NoError(t, err, "an RC QP with an SRQ")
	require.Zero(t, recv.Descriptor().RQ.WQECnt, "no receive ring of its own")
	rc := [2]*verbs.QueuePair{send, recv}
	for i, q := range rc {
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: ctx.AccessLocalWrite | ctx.AccessRemoteWrite}))
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateRTR, RemoteQPN: rc[1-i].Descriptor().QPN, PathMTU: ctx.MTU1024,
			Path: path, MinRNRTimer: 12, MaxDestRdAtomic: 1}))
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7, MaxRdAtomic: 1}))
	}

	// A DCT on the SRQ and a DCI.
	const key = 0xdc0ffee
	dct, err := pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeDCT, RecvCQ: cq, SRQ: srq, DCKey: key})
	require.NoError(t, err, "mlx5dv_create_qp DCT")
	require.NoError(t, dct.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: ctx.AccessLocalWrite | ctx.AccessRemoteWrite}))
	exModifies := emulate.CallCount("write EX_MODIFY_QP")
	require.NoError(t, dct.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU1024, Path: path, MinRNRTimer: 12}))
	require.Equal(t, exModifies+1, emulate.CallCount("write EX_MODIFY_QP"), "libmlx5 modifies a DCT with the extended command")
	dctn := dct.Descriptor().QPN
	require.NotZero(t, dctn, "the DCT number of the RTR response")
	st, err := dct.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTR, st)
	require.ErrorIs(t, dct.Modify(ctx.QPAttr{State: ctx.QPStateRTS}), ctx.ErrInvalidState, "a DCT stops at RTR")

	dci, err := pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeDCI, SendCQ: cq,
		Caps: ctx.QueuePairCaps{SendDepth: 16, MaxSendSGE: 1, MaxInline: 32}})
	require.NoError(t, err, "mlx5dv_create_qp DCI")
	require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1}))
	require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU1024}))
	require.NoError(t, dci.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 14, RetryCount: 7, RNRRetry: 7}))
	st, err = dci.State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTS, st)

	buf, err := ctx.AllocBuffer(8192, ctx.BufferOptions{})
	require.NoError(t, err)
	defer buf.Close()
	mr, err := pd.RegisterMemory(buf.Pointer(), 8192, ctx.AccessLocalWrite|ctx.AccessRemoteWrite)
	require.NoError(t, err)
	b := buf.Bytes()
	copy(b, "over RC into the SRQ")
	copy(b[64:], "from the DCI to the DCT")
	base := uint64(uintptr(buf.Pointer()))
	head := postSRQ(sd, uint16(sd.Head), 1, base+4096, 64, mr.LKey())
	postSRQ(sd, head, 2, base+4096+64, 64, mr.LKey())

	dc := cq.Descriptor()
	poll, err := monocq.New(monocq.Config{Buf: dc.Buf, CQECnt: dc.CQECnt, CQESize: dc.CQESize, DBRec: dc.DBRec, UAR: dc.UAR, CQN: dc.CQN, Memory: dc.Memory})
	require.NoError(t, err)
	type got struct {
		op         prm.CQEOpcode
		qpn, srqn  uint32
		src, bytes uint32
		counter    uint16
	}
	wait := func(n int) []got {
		var out []got
		for deadline := time.Now().Add(10 * time.Second); len(out) < n && time.Now().Before(deadline); {
			poll.Poll(4, func(c *monocq.CQE) {
				out = append(out, got{c.Opcode(), c.QPN(), c.SRQN(), c.SourceQP(), c.ByteCount(), c.WQECounter()})
			})
			time.Sleep(time.Millisecond)
		}
		return out
	}
	sendQueue := func(q *verbs.QueuePair) *wqebuilder.SendQueue {
		dq := q.Descriptor()
		sq, err := wqebuilder.New(wqebuilder.Config{Buf: dq.SQ.Buf, WQECnt: dq.SQ.WQECnt, QPN: dq.QPN, DBRec: dq.DBRec,
			BlueFlame: dq.BlueFlame, BlueFlameSize: dq.BlueFlameSize, MaxInline: dq.MaxInline, MaxSGE: dq.MaxSendSGE, Memory: dq.Memory})
		require.NoError(t, err)
		return sq
	}

	rcq := sendQueue(send)
	require.NoError(t, rcq.Begin(1, wqebuilder.Signaled).Send().SGE(base, 20, mr.LKey()).Finish())
	rcq.RingDoorbell()
	cqes := wait(2)
	require.Len(t, cqes, 2)
	for _, c := range cqes {
		if c.op == prm.CQEReq {
			require.Equal(t, send.Descriptor().QPN, c.qpn)
			continue
		}
		require.Equal(t, prm.CQERespSend, c.op)
		require.Equal(t, recv.Descriptor().QPN, c.qpn)
		require.Equal(t, sd.SRQN, c.srqn, "the SRQ number where libmlx5 (CQE version 0) looks for it")
		require.Equal(t, uint16(0), c.counter, "SRQ WQE 0")
		require.Equal(t, uint32(20), c.bytes)
	}
	require.Equal(t, "over RC into the SRQ", string(b[4096:4096+20]))

	av := addr.AV()
	dsq := sendQueue(dci)
	require.NoError(t, dsq.Begin(2, wqebuilder.Signaled).DC(&av, dctn, key).Send().SGE(base+64, 23, mr.LKey()).Finish())
	dsq.RingDoorbell()
	cqes = wait(2)
	require.Len(t, cqes, 2)
	for _, c := range cqes {
		if c.op == prm.CQEReq {
			require.Equal(t, dci.Descriptor().QPN, c.qpn)
			continue
		}
		require.Equal(t, prm.CQERespSend, c.op)
		require.Equal(t, dctn, c.qpn, "the DCT number")
		require.Equal(t, dci.Descriptor().QPN, c.src)
		require.Equal(t, sd.SRQN, c.srqn)
		require.Equal(t, head, c.counter, "the next SRQ WQE of the free list")
	}
	require.Equal(t, "from the DCI to the DCT", string(b[4096+64:4096+64+23]))
	require.Empty(t, f.Violations(), "the WQEs libmlx5's rings carried are well formed")

	require.NoError(t, mr.Close())
	for _, q := range []*verbs.QueuePair{dci, dct, send, recv} {
		require.NoError(t, q.Close(), "ibv_destroy_qp")
	}
	destroys := emulate.CallCount("write DESTROY_SRQ")
	require.NoError(t, srq.Close(), "ibv_destroy_srq")
	require.Equal(t, destroys+1, emulate.CallCount("write DESTROY_SRQ"))
	require.NoError(t, cq.Close())
	require.NoError(t, pd.Close())
}

// TestEnvironmentSwitchSRQAndDC runs TestCgoProviderSharedReceiveQueueAndDC
// and TestContextRCOnSharedReceiveQueue again in fresh processes switched on by the environment alone, with RoCE
// ports and with the write-only ABI.
func TestEnvironmentSwitchSRQAndDC(t *testing.T) {
	if os.Getenv(envChild) != "" {
		t.Skip("already a child run")
	}
	for _, c := range []struct{ name, link, abi string }{
		{"ethernet", "ethernet", ""},
		{"write-abi", "infiniband", emulate.ABIWrite},
		{"write-abi-ethernet", "ethernet", emulate.ABIWrite},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^TestCgoProviderSharedReceiveQueueAndDC$|^TestContextRCOnSharedReceiveQueue$|^TestChildIsEmulated$", "-test.count", "1", "-test.v")
			cmd.Env = append(os.Environ(), envChild+"=1", emulate.EnvEmulate+"=1",
				emulate.EnvLink+"="+c.link, emulate.EnvABI+"="+c.abi)
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s", out)
			require.Contains(t, string(out), "--- PASS: TestCgoProviderSharedReceiveQueueAndDC")
			require.Contains(t, string(out), "--- PASS: TestContextRCOnSharedReceiveQueue")
			require.Contains(t, string(out), "--- PASS: TestChildIsEmulated")
		})
	}
}
