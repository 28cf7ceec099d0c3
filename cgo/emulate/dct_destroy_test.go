//go:build cgo && linux

package emulate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/cgo/internal/verbs"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// TestCgoProviderDCTDestroyed destroys a DCT that libmlx5 created
// (ibv_destroy_qp, DESTROY_QP of the emulated kernel) after a DCI's SEND
// reached it: a SEND to its number then finds no DCT and completes with
// RETRY_EXC_ERR, as a request for a DCT a ConnectX has destroyed gets no
// answer; the shared CQ gets no CQE of the destroyed DCT, and the SRQ's
// receive posted meanwhile is left for a DCT created afterwards on it.
func TestCgoProviderDCTDestroyed(t *testing.T) {
	f := emulate.Fabric()
	require.NotNil(t, f, "the emulation is on")
	maps := emulate.MappingCount()
	d, err := verbs.Open("")
	require.NoError(t, err)
	defer closeAndCollect(t, d, maps)
	pa, err := d.QueryPort(1)
	require.NoError(t, err)
	path := ctx.AddressAttr{Port: 1, DLID: pa.LID}
	addr := addrvec.Address{DLID: pa.LID}
	if pa.LinkLayer == ctx.LinkLayerEthernet {
		g, err := d.QueryGID(1, 0)
		require.NoError(t, err)
		path = ctx.AddressAttr{Port: 1, GlobalRoute: true, DGID: g.GID, HopLimit: 64}
		addr = addrvec.Address{RoCE: true, Global: true, DGID: g.GID, HopLimit: 64}
	}
	pd, err := d.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := d.CreateCompletionQueue(verbs.CQConfig{CompletionQueueConfig: ctx.CompletionQueueConfig{Depth: 64}})
	require.NoError(t, err)
	srq, err := pd.CreateSRQ(ctx.SRQConfig{Depth: 16, MaxSGE: 1})
	require.NoError(t, err)
	sd := srq.Descriptor()

	const key = 0xdc0ffee
	newDCT := func() *verbs.QueuePair {
		q, err := pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeDCT, RecvCQ: cq, SRQ: srq, DCKey: key})
		require.NoError(t, err, "mlx5dv_create_qp DCT")
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: ctx.AccessLocalWrite | ctx.AccessRemoteWrite}))
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU1024, Path: path, MinRNRTimer: 12}))
		return q
	}
	newDCI := func() (*verbs.QueuePair, *wqebuilder.SendQueue) {
		q, err := pd.CreateQueuePair(verbs.QPConfig{Type: ctx.QPTypeDCI, SendCQ: cq,
			Caps: ctx.QueuePairCaps{SendDepth: 16, MaxSendSGE: 1, MaxInline: 32}})
		require.NoError(t, err, "mlx5dv_create_qp DCI")
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1}))
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU1024}))
		// ACK timeout 10 (about 4 ms), one retry.
		require.NoError(t, q.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 10, RetryCount: 1, RNRRetry: 7}))
		dq := q.Descriptor()
		sq, err := wqebuilder.New(wqebuilder.Config{Buf: dq.SQ.Buf, WQECnt: dq.SQ.WQECnt, QPN: dq.QPN, DBRec: dq.DBRec,
			BlueFlame: dq.BlueFlame, BlueFlameSize: dq.BlueFlameSize, MaxInline: dq.MaxInline, MaxSGE: dq.MaxSendSGE, Memory: dq.Memory})
		require.NoError(t, err)
		return q, sq
	}

	buf, err := ctx.AllocBuffer(8192, ctx.BufferOptions{})
	require.NoError(t, err)
	defer buf.Close()
	mr, err := pd.RegisterMemory(buf.Pointer(), 8192, ctx.AccessLocalWrite|ctx.AccessRemoteWrite)
	require.NoError(t, err)
	b := buf.Bytes()
	copy(b, "to the DCT")
	base := uint64(uintptr(buf.Pointer()))
	head := postSRQ(sd, uint16(sd.Head), 1, base+4096, 64, mr.LKey())

	dc := cq.Descriptor()
	poll, err := monocq.New(monocq.Config{Buf: dc.Buf, CQECnt: dc.CQECnt, CQESize: dc.CQESize, DBRec: dc.DBRec, UAR: dc.UAR, CQN: dc.CQN, Memory: dc.Memory})
	require.NoError(t, err)
	type got struct {
		op          prm.CQEOpcode
		qpn         uint32
		synd        prm.Syndrome
		counter     uint16
		rqSRQN, src uint32
	}
	// wait polls until n CQEs came, then once more: a CQE beyond them
	// would be there already (the model writes a DCT's receive CQE
	// before the DCI's completion).
	wait := func(n int) []got {
		var out []got
		take := func(c *monocq.CQE) {
			g := got{op: c.Opcode(), qpn: c.QPN(), counter: c.WQECounter(), rqSRQN: c.SRQN(), src: c.SourceQP()}
			if c.IsError() {
				g.synd = c.Syndrome()
			}
			out = append(out, g)
		}
		for deadline := time.Now().Add(10 * time.Second); len(out) < n && time.Now().Before(deadline); {
			poll.Poll(4, take)
			time.Sleep(time.Millisecond)
		}
		poll.Poll(4, take)
		return out
	}

	dct := newDCT()
	dctn := dct.Descriptor().QPN
	dci, dsq := newDCI()
	av := addr.AV()
	require.NoError(t, dsq.Begin(1, wqebuilder.Signaled).DC(&av, dctn, key).Send().SGE(base, 10, mr.LKey()).Finish())
	dsq.RingDoorbell()
	require.Len(t, wait(2), 2, "the SEND and its receive")

	destroys := emulate.CallCount("write DESTROY_QP") + emulate.CallCount("ioctl QP_DESTROY")
	require.NoError(t, dct.Close(), "ibv_destroy_qp of the DCT")
	require.Equal(t, destroys+1, emulate.CallCount("write DESTROY_QP")+emulate.CallCount("ioctl QP_DESTROY"))
	postSRQ(sd, head, 2, base+4096+64, 64, mr.LKey())
	require.NoError(t, dsq.Begin(2, wqebuilder.Signaled).DC(&av, dctn, key).Send().SGE(base, 10, mr.LKey()).Finish())
	dsq.RingDoorbell()
	cqes := wait(1)
	require.Len(t, cqes, 1, "the DCI's completion alone: %+v", cqes)
	require.Equal(t, prm.CQEReqErr, cqes[0].op)
	require.Equal(t, dci.Descriptor().QPN, cqes[0].qpn)
	require.Equal(t, prm.SyndromeTransportRetryExc, cqes[0].synd)
	require.Equal(t, make([]byte, 10), b[4096+64:4096+74], "nothing in the SRQ's receive")

	// The receive is the SRQ's still: a DCT created afterwards takes it.
	dct2 := newDCT()
	dci2, dsq2 := newDCI()
	require.NoError(t, dsq2.Begin(3, wqebuilder.Signaled).DC(&av, dct2.Descriptor().QPN, key).Send().SGE(base, 10, mr.LKey()).Finish())
	dsq2.RingDoorbell()
	cqes = wait(2)
	require.Len(t, cqes, 2)
	for _, c := range cqes {
		if c.op == prm.CQEReq {
			continue
		}
		require.Equal(t, prm.CQERespSend, c.op)
		require.Equal(t, dct2.Descriptor().QPN, c.qpn)
		require.Equal(t, head, c.counter, "the receive posted while the first DCT was gone")
	}
	require.Equal(t, "to the DCT", string(b[4096+64:4096+74]))
	require.NoError(t, mr.Close())
	for _, q := range []*verbs.QueuePair{dci, dci2, dct2} {
		require.NoError(t, q.Close())
	}
	require.NoError(t, srq.Close())
	require.NoError(t, cq.Close())
	require.NoError(t, pd.Close())
}
