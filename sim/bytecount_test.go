package sim

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// A data segment in a send WQE whose byte count has bit 31 set is an
// inline segment to the device: a SEND of a "2^31+12-byte SGE" delivers the
// 12 bytes that follow its byte count, the segment's own lkey and address.
func TestSendDataSegmentBit31IsInline(t *testing.T) {
	e := newEnv(t, Options{})
	a, b := e.rcPair(qpOpts{})
	b.postRecv(dataSeg(64, e.mr2.LKey(), e.addr2(0)))
	seg := dataSeg(1<<31|12, e.mr.LKey(), e.addr(0))
	a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, seg)
	e.run()
	require.Empty(t, e.f.Violations())
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	r := b.rcq.one(t)
	require.Equal(t, prm.CQERespSend, r.op)
	require.Equal(t, uint32(12), r.byteCnt)
	require.Equal(t, seg[4:16], e.mem2(0, 12), "the peer receives the lkey and the address")
}

// A data segment of byte count 2^31 (bit 31 set, nothing below it) is an
// empty inline segment: an RDMA_WRITE of "2 GiB" completes and writes
// nothing. The model reports the empty inline segment (ViolationDS).
func TestDataSegment2GiBWritesNothing(t *testing.T) {
	e := newEnv(t, Options{})
	e.allowViolations = true
	a, _ := e.rcPair(qpOpts{})
	copy(e.mem(0, 8), "payload!")
	copy(e.mem2(0, 8), "unwritte")
	a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), dataSeg(1<<31, e.mr.LKey(), e.addr(0)))
	e.run()
	require.Equal(t, []ViolationKind{ViolationDS}, violationKinds(e.f))
	c := a.scq.one(t)
	require.Equal(t, prm.CQEReq, c.op)
	require.Equal(t, "unwritte", string(e.mem2(0, 8)))

	// A zero byte count is 2 GiB to the device: more than a message may
	// carry, a local length error.
	e.f.clearViolations()
	i := a.post(prm.OpRdmaWrite, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(0), e.mr2.RKey()), dataSeg(0, e.mr.LKey(), e.addr(0)))
	e.run()
	require.Empty(t, e.f.Violations(), "a zero count with an lkey and address is a 2 GiB segment, not a stray one")
	requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeLocalLength, i)
}

// A receive scatter entry has a 31-bit byte count: bit 31 set is reported
// (ViolationReceive) and the entry holds the low 31 bits, so a 4-byte entry
// with bit 31 set cannot take 8 bytes; on an RQ and on an SRQ.
func TestReceiveEntryBit31(t *testing.T) {
	for _, withSRQ := range []bool{false, true} {
		e := newEnv(t, Options{})
		e.allowViolations = true
		var a, b *testQP
		entry := dataSeg(1<<31|4, e.mr2.LKey(), e.addr2(0))
		if withSRQ {
			srq := e.newSRQ(e.pd2, 3, 1)
			a = e.newQP(e.pd, qpOpts{typ: ctx.QPTypeRC})
			b = e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC, srq: srq})
			e.connectRC(a, b, 0, 1)
			srq.post(entry)
		} else {
			a, b = e.rcPair(qpOpts{})
			b.postRecv(entry)
		}
		copy(e.mem2(0, 8), "unwritte")
		si := a.post(prm.OpSend, 0, prm.FlagCQUpdate, 0, inlineSeg([]byte("8 bytes!")))
		e.run()
		require.Contains(t, violationKinds(e.f), ViolationReceive, "SRQ %v", withSRQ)
		requireErr(t, a.scq.one(t), prm.CQEReqErr, prm.SyndromeRemoteInvalReq, si)
		resp := b.rcq.drain()
		require.NotEmpty(t, resp)
		require.Equal(t, prm.CQERespErr, resp[0].op)
		require.Equal(t, prm.SyndromeLocalLength, resp[0].synd)
		require.Equal(t, "unwritte", string(e.mem2(0, 8)))
		require.Equal(t, uint32(4), binary.BigEndian.Uint32(entry)&^(1<<31))
	}
}
