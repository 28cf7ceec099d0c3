package sim

import (
	"bytes"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestSharedDCIReachesNewDCTOfOldNumber: a DCI that sent to a DCT of
// another process, and had every answer, reaches the DCT that process
// creates with the destroyed one's number: its next message opens a new
// stream there, as a DCI whose connection ended with the destroyed DCT's
// drain connects afresh. Before, the DCI kept the old stream, the new DCT
// ignored its segments (no stream begun) and the DCI completed with
// RETRY_EXC_ERR.
func TestSharedDCIReachesNewDCTOfOldNumber(t *testing.T) {
	e1, e2 := sharedPair(t)
	srq := e2.newSRQ(e2.pd, 16, 1)
	old := e2.dct(e2.pd, srq, 0xfeed)
	n := old.qp.QPN()
	// An ACK timeout of about a second: a DCI that loses its stream gives
	// up after 3 tries, one that keeps it is answered at once.
	d := e1.dciTo(e1.pd, 32, 18, 2)
	lid := lidOf(t, e2.c)
	av := dcAV(0xfeed, n, lid)
	srq.post(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av, inlineSeg([]byte("to the old DCT")))
	c := waitCQE(t, d.scq, 5*time.Second)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)
	require.Equal(t, prm.CQERespSend, waitCQE(t, old.rcq, 5*time.Second).op)

	// Every number issued: the next QP takes the oldest freed, the DCT's.
	leaveQPNs(e2.f, 0)
	require.NoError(t, old.qp.Close())
	dct := e2.dct(e2.pd, srq, 0xfeed)
	require.Equal(t, n, dct.qp.QPN(), "the destroyed DCT's number")

	srq.post(dataSeg(64, e2.mr.LKey(), e2.addr(64)))
	d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av, inlineSeg([]byte("to the new DCT")))
	c = waitCQE(t, d.scq, 10*time.Second)
	require.Equal(t, prm.CQEReq, c.op, "syndrome %v", c.synd)
	r := waitCQE(t, dct.rcq, 5*time.Second)
	require.Equal(t, prm.CQERespSend, r.op)
	require.Equal(t, d.qp.QPN(), r.srcQPN)
	require.Equal(t, []byte("to the new DCT"), e2.mem(int(r.counter)*64, 14))
}

// TestSharedDCIReachesDCTOfProcessInSameSlot: the process of a DCT leaves
// the fabric and another takes its slot, whose first DCT has the number
// of the first one's (a server restarted); a DCI of a third process that
// sent to the first DCT, and had every answer, reaches the new one.
func TestSharedDCIReachesDCTOfProcessInSameSlot(t *testing.T) {
	e1, e2 := sharedPair(t)
	_, slot := e2.f.SharedFabric()
	srq := e2.newSRQ(e2.pd, 16, 1)
	old := e2.dct(e2.pd, srq, 0xfeed)
	n := old.qp.QPN()
	d := e1.dciTo(e1.pd, 32, 18, 2)
	av := dcAV(0xfeed, n, lidOf(t, e2.c))
	srq.post(dataSeg(64, e2.mr.LKey(), e2.addr(0)))
	d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av, inlineSeg([]byte("to the old DCT")))
	c := waitCQE(t, d.scq, 5*time.Second)
	require.Equal(t, prm.CQEReq, c.op, "%+v", c)

	require.NoError(t, old.qp.Close())
	require.NoError(t, e2.f.Close())
	name, _ := e1.f.SharedFabric()
	e3 := newEnv(t, Options{Mode: Engine, Fabric: name})
	_, s3 := e3.f.SharedFabric()
	require.Equal(t, slot, s3, "the slot the DCT's process left")
	srq3 := e3.newSRQ(e3.pd, 16, 1)
	dct := e3.dct(e3.pd, srq3, 0xfeed)
	require.Equal(t, n, dct.qp.QPN(), "the first DCT's number")
	require.Equal(t, av, dcAV(0xfeed, dct.qp.QPN(), lidOf(t, e3.c)), "the same address")

	srq3.post(dataSeg(64, e3.mr.LKey(), e3.addr(0)))
	d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av, inlineSeg([]byte("to the new DCT")))
	c = waitCQE(t, d.scq, 10*time.Second)
	require.Equal(t, prm.CQEReq, c.op, "syndrome %v", c.synd)
	r := waitCQE(t, dct.rcq, 5*time.Second)
	require.Equal(t, d.qp.QPN(), r.srcQPN)
	require.Equal(t, []byte("to the new DCT"), e3.mem(0, 14))
}

// TestSharedDCTDestroyedMidMessage: a DCT of another process is destroyed
// while a DCI's message of two segments is part-way: the first segment
// executed (a SEND's written into the receive it took from the SRQ, a
// WRITE's written, a READ's answered), the second not yet sent (a SEND or
// WRITE: the DCT's ring had room for one) or its answer held (a READ: the
// DCI's ring had room for one). Nothing of the message reaches the DCT's
// memory, SRQ or CQ after the destroy (the held READ answer is dropped,
// not sent; the SEND's receive is not completed); the DCI's WQE ends in
// RETRY_EXC_ERR after its retries, the one behind it flushes, and the
// SRQ's receives not taken are left for the next DCT on it. The engines
// are held: the test runs the rounds.
func TestSharedDCTDestroyedMidMessage(t *testing.T) {
	const size = 2 * wireSegMax
	for _, op := range []prm.Opcode{prm.OpSend, prm.OpRdmaWriteImm, prm.OpRdmaRead} {
		t.Run(op.String(), func(t *testing.T) {
			e1, e2 := sharedPair(t)
			_, s1 := e1.f.SharedFabric()
			_, s2 := e2.f.SharedFabric()
			bufs, mrs := registeredBuffers(t, size, e1.pd, e2.pd)
			local, remote := bufs[0].Bytes(), bufs[1].Bytes()
			fill(local, 3)
			if op == prm.OpRdmaRead {
				fill(remote, 4)
			}
			srq := e2.newSRQ(e2.pd, 16, 1)
			srq.post(dataSeg(size, mrs[1].LKey(), uint64(mrs[1].Addr())))
			srq.post(dataSeg(size, mrs[1].LKey(), uint64(mrs[1].Addr())))
			dct := e2.dct(e2.pd, srq, 0xfeed)
			// ACK timeout 12 (about 17 ms), 2 retries.
			d := e1.dciTo(e1.pd, 16, 12, 2)
			av := dcAV(0xfeed, dct.qp.QPN(), lidOf(t, e2.c))
			holdEngine(t, e1.f)
			holdEngine(t, e2.f)

			seg := dataSeg(size, mrs[0].LKey(), uint64(mrs[0].Addr()))
			var i0 uint16
			switch op {
			case prm.OpSend:
				fillRingLeaving(t, e1.f, s2, ringRecHdr+wireSegMax, ringRecHdr+wireSegMax)
				i0 = d.post(op, 0, prm.FlagCQUpdate, 0, av, seg)
			case prm.OpRdmaWriteImm:
				fillRingLeaving(t, e1.f, s2, ringRecHdr+wireSegMax, ringRecHdr+wireSegMax)
				i0 = d.post(op, 0, prm.FlagCQUpdate, 9, av, raddrSeg(uint64(mrs[1].Addr()), mrs[1].RKey()), seg)
			case prm.OpRdmaRead:
				i0 = d.post(op, 0, prm.FlagCQUpdate, 0, av, raddrSeg(uint64(mrs[1].Addr()), mrs[1].RKey()), seg)
			}
			// Fenced: it waits for the message's answers.
			i1 := d.post(prm.OpSend, 0, prm.FlagCQUpdate|prm.FlagFence, 0, av, inlineSeg([]byte("behind")))
			stepRound(e1.f) // the first segment leaves (a READ's two requests)
			if op == prm.OpRdmaRead {
				fillRingLeaving(t, e2.f, s1, ringRecHdr+wireSegMax, ringRecHdr+wireSegMax)
			}
			stepRound(e2.f) // the first segment executed and answered
			e2.f.mu.Lock()
			held := len(e2.f.wireAcks)
			e2.f.mu.Unlock()
			if op == prm.OpRdmaRead {
				require.Equal(t, 1, held, "the second READ answer is held")
			}

			require.NoError(t, dct.qp.Close())
			after := bytes.Clone(remote)
			c := stepUntilCQE(t, 5*time.Second, d.scq, e1.f, e2.f)
			requireErr(t, c, prm.CQEReqErr, prm.SyndromeTransportRetryExc, i0)
			c = stepUntilCQE(t, 5*time.Second, d.scq, e1.f, e2.f)
			requireErr(t, c, prm.CQEReqErr, prm.SyndromeWRFlush, i1)
			require.Equal(t, after, remote, "nothing written after the destroy")
			require.Empty(t, dct.rcq.drain(), "no CQE for the destroyed DCT")
			e2.f.mu.Lock()
			require.Empty(t, e2.f.wireAcks, "the held answer dropped")
			e2.f.mu.Unlock()
			switch op {
			case prm.OpSend, prm.OpRdmaWriteImm:
				require.Equal(t, local[:wireSegMax], remote[:wireSegMax], "the first segment, written before the destroy")
				require.Equal(t, make([]byte, wireSegMax), remote[wireSegMax:])
			case prm.OpRdmaRead:
				require.Equal(t, remote[:wireSegMax], local[:wireSegMax], "the first answer")
				require.NotEqual(t, remote[wireSegMax:], local[wireSegMax:], "the held answer is not sent")
			}

			// The SRQ's receives not taken are there for a new DCT on
			// it: the first, but for the SEND, which took it at its
			// first segment.
			first := uint16(0)
			if op == prm.OpSend {
				first = 1
			}
			dct2 := e2.dct(e2.pd, srq, 0xbeef)
			d2 := e1.dciTo(e1.pd, 16, 16, 2) // about 268 ms: it must be answered
			d2.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xbeef, dct2.qp.QPN(), lidOf(t, e2.c)), inlineSeg([]byte("next")))
			require.Equal(t, prm.CQEReq, stepUntilCQE(t, 5*time.Second, d2.scq, e1.f, e2.f).op)
			r := stepUntilCQE(t, 5*time.Second, dct2.rcq, e1.f, e2.f)
			require.Equal(t, prm.CQERespSend, r.op)
			require.Equal(t, first, r.counter, "the first receive not taken")
			require.Equal(t, []byte("next"), remote[:4])
		})
	}
}
