package sim

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// A DCT's destroy within one process: a DCI's message executes whole in
// one turn of the DCI (under the Fabric's lock, as the destroy is), so
// none is part-way when the destroy returns. What a DCI can have under way
// is a request waiting for its RNR timer or ACK timeout; after the destroy
// it finds no DCT and ends as a request to a number that names none does.

// TestDCTDestroyedWhileDCIWaits: a DCI's SEND, RNR-NAKed by a DCT whose
// SRQ is empty, waits for its RNR timer when the DCT is destroyed and a
// receive is posted to the SRQ: the SEND finds no DCT, ends in
// RETRY_EXC_ERR after its retries, and the WRITE behind it flushes;
// nothing reaches the destroyed DCT's CQ or the SRQ (its receive is left
// for a DCT created afterwards on it), and nothing is written. Manual and
// Engine mode.
func TestDCTDestroyedWhileDCIWaits(t *testing.T) {
	for _, mode := range []Mode{Manual, Engine} {
		t.Run(mode.String(), func(t *testing.T) {
			e := newEnv(t, Options{Mode: mode})
			srq := e.newSRQ(e.pd2, 16, 1)
			dct := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeDCT, srq: srq, dcKey: 0xfeed})
			require.NoError(t, dct.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Access: allAccess}))
			// RNR timer code 0: 655 ms, for the Engine to be waiting when
			// the DCT goes.
			require.NoError(t, dct.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU4096, MinRNRTimer: 0}))
			d := e.newQP(e.pd, qpOpts{typ: ctx.QPTypeDCI, sendDepth: 32})
			require.NoError(t, d.qp.Modify(ctx.QPAttr{State: ctx.QPStateInit}))
			require.NoError(t, d.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTR, PathMTU: ctx.MTU4096}))
			require.NoError(t, d.qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS, Timeout: 10, RetryCount: 2, RNRRetry: 7}))
			av := dcAV(0xfeed, dct.qp.QPN(), 2)
			i0 := d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av, inlineSeg([]byte("under way")))
			i1 := d.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, av, raddrSeg(e.addr2(4096), e.mr2.RKey()), inlineSeg([]byte("behind")))
			if mode == Manual {
				_, err := e.f.Step()
				require.NoError(t, err)
			}
			require.Eventually(t, func() bool { return e.f.Stats().RNRNaks > 0 }, 5*time.Second, time.Millisecond, "the SEND is RNR-NAKed")

			require.NoError(t, dct.qp.Close())
			srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
			var c [2]cqe
			if mode == Manual {
				e.run()
				got := d.scq.drain()
				require.Len(t, got, 2)
				c[0], c[1] = got[0], got[1]
			} else {
				c[0], c[1] = waitCQE(t, d.scq, 5*time.Second), waitCQE(t, d.scq, 5*time.Second)
			}
			requireErr(t, c[0], prm.CQEReqErr, prm.SyndromeTransportRetryExc, i0)
			requireErr(t, c[1], prm.CQEReqErr, prm.SyndromeWRFlush, i1)
			require.Empty(t, dct.rcq.drain(), "no CQE for the destroyed DCT")
			require.Equal(t, make([]byte, 64), e.mem2(0, 64), "nothing in the SRQ's receive")
			require.Equal(t, make([]byte, 6), e.mem2(4096, 6), "nothing written")

			// The receive is still the SRQ's: a DCT created on it takes it.
			dct2 := e.dct(e.pd2, srq, 0xbeef)
			d2 := e.dci(e.pd)
			d2.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xbeef, dct2.qp.QPN(), 2), inlineSeg([]byte("to the new DCT")))
			var r cqe
			if mode == Manual {
				e.run()
				require.Equal(t, prm.CQEReq, d2.scq.one(t).op)
				r = dct2.rcq.one(t)
			} else {
				require.Equal(t, prm.CQEReq, waitCQE(t, d2.scq, 5*time.Second).op)
				r = waitCQE(t, dct2.rcq, 5*time.Second)
			}
			require.Equal(t, prm.CQERespSend, r.op)
			require.Equal(t, dct2.qp.QPN(), r.qpn)
			require.Equal(t, []byte("to the new DCT"), e.mem2(0, 14))
		})
	}
}

// TestDCIReachesNewDCTOfOldNumber: in one process, a DCI that sent to a
// destroyed DCT reaches the DCT that takes its number (every number
// issued, the oldest freed is reused), as a ConnectX's DCI, whose
// connection the destroy's drain ended, connects to it afresh.
func TestDCIReachesNewDCTOfOldNumber(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 16, 1)
	old := e.dct(e.pd2, srq, 0xfeed)
	n := old.qp.QPN()
	d := e.dci(e.pd)
	av := dcAV(0xfeed, n, 2)
	srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
	d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av, inlineSeg([]byte("to the old DCT")))
	e.run()
	require.Equal(t, prm.CQEReq, d.scq.one(t).op)
	require.Equal(t, n, old.rcq.one(t).qpn)

	leaveQPNs(e.f, 0)
	require.NoError(t, old.qp.Close())
	dct := e.dct(e.pd2, srq, 0xfeed)
	require.Equal(t, n, dct.qp.QPN(), "the destroyed DCT's number")
	srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(64)))
	d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, av, inlineSeg([]byte("to the new DCT")))
	e.run()
	require.Equal(t, prm.CQEReq, d.scq.one(t).op)
	r := dct.rcq.one(t)
	require.Equal(t, prm.CQERespSend, r.op)
	require.Equal(t, d.qp.QPN(), r.srcQPN)
	require.Empty(t, old.rcq.drain(), "nothing for the destroyed DCT")
}

// TestDCTDestroyDropsDelayedCQE: a receive CQE of a DCT that the fault
// injector holds back (DelayCompletions) when the DCT is destroyed is
// dropped, not written after the destroy: every CQE of a destroyed queue
// is in its CQ's ring once the destroy returns (the kit's transport.Poller
// relies on it), and ConnectX writes a DCT's CQEs before its drain ends.
func TestDCTDestroyDropsDelayedCQE(t *testing.T) {
	e := newEnv(t, Options{})
	srq := e.newSRQ(e.pd2, 16, 1)
	dct := e.dct(e.pd2, srq, 0xfeed)
	d := e.dci(e.pd)
	require.NoError(t, e.f.DelayCompletions(dct.rcq.cq.CQN(), time.Millisecond))
	srq.post(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
	d.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, dcAV(0xfeed, dct.qp.QPN(), 2), inlineSeg([]byte("held")))
	_, err := e.f.Step()
	require.NoError(t, err)
	require.Equal(t, prm.CQEReq, d.scq.one(t).op)
	require.Empty(t, dct.rcq.drain(), "the receive CQE is held back")
	require.NoError(t, dct.qp.Close())
	e.f.Advance(2 * time.Millisecond)
	e.run()
	require.Empty(t, dct.rcq.drain(), "no CQE after the destroy")
}
