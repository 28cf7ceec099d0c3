package transport_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/kerrno"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// A completion the transports could not match wraps the sentinel of the
// layer that names the condition, so errors.Is works whichever layer a
// caller tests with: monocq.ErrUnknownQPN for an unknown QPN (the value
// monocq.Table reports too), transport.ErrUnmatched, transport.ErrUnexpected.
func TestCompletionSentinelsAcrossLayers(t *testing.T) {
	var tab monocq.Table[int]
	_, lookup := tab.Unregister(0x105)
	for _, c := range []struct {
		status transport.Match
		want   error
	}{
		{transport.MatchUnknownQPN, monocq.ErrUnknownQPN},
		{transport.MatchUnmatched, transport.ErrUnmatched},
		{transport.MatchUnexpected, transport.ErrUnexpected},
	} {
		wc := transport.Completion{Match: c.status, QPN: 0x105, Opcode: prm.CQEReq, WQECounter: 3}
		err := wc.Err()
		require.ErrorIs(t, err, c.want, "%v", c.status)
		require.NotErrorIs(t, err, monocq.ErrCompletion, "a successful CQE that was not matched")
		var ce *monocq.CompletionError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, uint32(0x105), ce.QPN)
		require.Equal(t, "monocq: completion REQ on QPN 0x105, wqe_counter 3: "+c.want.Error(), err.Error())
	}
	require.ErrorIs(t, lookup, monocq.ErrUnknownQPN, "monocq's table and the transports report one sentinel")
}

// An error CQE reads the same, and is the same type, whether monocq, a
// transport's Completion or a caller wrapping either reports it.
func TestCompletionErrorIsOneType(t *testing.T) {
	var cqe monocq.CQE
	cqe[prm.ErrCQEVendorSyndrome] = 0x88
	cqe[prm.ErrCQESyndrome] = uint8(prm.SyndromeRemoteAccess)
	binary.BigEndian.PutUint32(cqe[prm.ErrCQEWQEOpcodeQPN:], uint32(prm.OpRdmaWrite)<<24|0x105)
	binary.BigEndian.PutUint16(cqe[prm.CQEWQECounter:], 3)
	cqe[prm.CQEOpOwn] = uint8(prm.CQEReqErr) << prm.CQEOpcodeShift
	fromMonocq := cqe.Err()

	wc := transport.Completion{Match: transport.MatchError, QPN: 0x105, Opcode: prm.CQEReqErr,
		SendOpcode: prm.OpRdmaWrite, Syndrome: prm.SyndromeRemoteAccess, VendorSyndrome: 0x88, WQECounter: 3, WRID: 7}
	fromTransport := fmt.Errorf("channel: %w", wc.Err())

	for _, err := range []error{fromMonocq, fromTransport} {
		var ce *monocq.CompletionError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "REM_ACCESS_ERR", ce.Status.String())
		require.Equal(t, prm.OpRdmaWrite, ce.Opcode)
		require.ErrorIs(t, err, monocq.ErrCompletion)
		require.ErrorIs(t, err, monocq.ErrRemoteAccess)
		require.NotErrorIs(t, err, monocq.ErrFlushed)
	}
	var ce *monocq.CompletionError
	require.ErrorAs(t, fromMonocq, &ce)
	require.Equal(t, fromMonocq.Error()+", wr_id 0x7", wc.Err().Error(), "one wording, the transport adds the wr_id")
}

// A transport's refused post and the builder's are one type,
// *wqebuilder.PostError, and their sentinels are the builder's where the
// builder names the condition.
func TestPostErrorIsOneType(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	srq, err := transport.NewSharedReceiveQueue(e.PD[0], ctx.SRQConfig{Depth: 2})
	require.NoError(t, err)
	t.Cleanup(func() { _ = srq.Close() })
	err = srq.BeginRecv(1).SGE(e.Addr(0, 0), 1<<31, e.LKey(0)).FinishDoorbell()
	require.ErrorIs(t, err, wqebuilder.ErrSGETooLong)
	var pe *wqebuilder.PostError
	require.ErrorAs(t, err, &pe)
	require.True(t, pe.SRQ)
	require.Equal(t, "post receive", pe.Op)
	require.Equal(t, fmt.Sprintf("transport: post receive on SRQ %#x: %v", pe.QPN, wqebuilder.ErrSGETooLong), err.Error())

	err = srq.BeginRecv(2).SGE(e.Addr(0, 0), 8, e.LKey(0)).SGE(e.Addr(0, 8), 8, e.LKey(0)).FinishDoorbell()
	require.ErrorIs(t, err, wqebuilder.ErrTooManySGE, "one sentinel for too many SGEs, send or receive")
	require.ErrorAs(t, err, &pe)

	require.NoError(t, srq.Close())
	err = srq.BeginRecv(3).SGE(e.Addr(0, 0), 8, e.LKey(0)).FinishDoorbell()
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.ErrorAs(t, err, &pe)
}

// The transports' control-plane errors are *ctx.OpError, as ctx's are:
// the transport, the verb and a cause errors.Is finds.
func TestControlPlaneErrorIsOpError(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	_, err := transport.NewSharedReceiveQueue(e.PD[0], ctx.SRQConfig{})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	var oe *ctx.OpError
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "transport", oe.Package)
	require.Equal(t, "new SRQ", oe.Op)
	require.Equal(t, "transport: new SRQ: depth 0: invalid argument", err.Error())
	require.Zero(t, oe.Errno())

	_, err = transport.NewSharedReceiveQueue(nil, ctx.SRQConfig{Depth: 1})
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "transport", oe.Package)

	// A transport's own configuration check names the transport.
	_, err = rc.New(e.PD[0], e.CQ(0, 8), rc.Config{})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorAs(t, err, &oe)
	require.Equal(t, "rc", oe.Package)
	require.Equal(t, "new QP", oe.Op)

	// A provider's refusal carries the kernel's error number.
	cq := e.CQ(0, 8)
	qp, err := e.PD[0].CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq,
		Caps: ctx.QueuePairCaps{SendDepth: 1, RecvDepth: 1}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = qp.Close() })
	err = qp.Modify(ctx.QPAttr{State: ctx.QPStateRTS})
	require.ErrorIs(t, err, ctx.ErrInvalidState)
	require.ErrorAs(t, err, &oe)
	require.Equal(t, syscall.EINVAL, oe.Errno(), "%v", err)

	errno := &ctx.OpError{Op: "register MR", Err: kerrno.New("ibv_reg_mr", "", syscall.EFAULT, ctx.ErrInvalidArgument)}
	require.Equal(t, syscall.EFAULT, errno.Errno())
	require.True(t, errors.Is(errno, syscall.EFAULT))
	require.Equal(t, "ctx: register MR: ibv_reg_mr: EFAULT (bad address)", errno.Error())
}

// A protection domain not made by AllocProtectionDomain (a zero value,
// whose Context is nil) is refused by the constructors of every transport
// with ctx.ErrInvalidArgument; they queried the nil Context and panicked.
func TestZeroProtectionDomainRefused(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 8)
	var pd ctx.ProtectionDomain
	_, err := transport.NewSharedReceiveQueue(&pd, ctx.SRQConfig{Depth: 4})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "transport: new SRQ: ctx: query device: nil context")
	_, err = rc.New(&pd, cq, rc.Config{SendDepth: 4})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "rc: new QP: ctx: query device: nil context")
	_, err = ud.New(&pd, cq, ud.Config{SendDepth: 4, QKey: 1})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = dc.NewDCI(&pd, cq, dc.DCIConfig{SendDepth: 4})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	var c *ctx.Context
	for _, err := range []error{
		func() error { _, err := c.Query(); return err }(),
		func() error { _, err := c.QueryPort(1); return err }(),
		func() error { _, err := c.QueryGIDs(1); return err }(),
		func() error { _, err := c.AllocProtectionDomain(); return err }(),
		func() error { _, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 1}); return err }(),
	} {
		require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	}
}

// A SharedReceiveQueue not made by NewSharedReceiveQueue (a zero value) is
// refused by the constructors that take one, with ctx.ErrInvalidArgument,
// and reports itself closed; they asked its nil handle whether it was
// closed and panicked. WatchEvents refuses it as Queue.WatchEvents refuses
// a zero Queue, and RingRecvDoorbell does nothing, as on a closed SRQ;
// both dereferenced the nil handle and panicked.
func TestZeroSharedReceiveQueueRefused(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	pd, cq := e.PD[0], e.CQ(0, 8)
	var srq transport.SharedReceiveQueue
	require.True(t, srq.Closed())
	require.NoError(t, srq.Close())
	require.NotPanics(t, func() {
		_, err := srq.WatchEvents(func(ctx.AsyncEvent) {})
		require.ErrorIs(t, err, ctx.ErrInvalidArgument)
		srq.RingRecvDoorbell()
	})
	require.Zero(t, srq.SRQN())
	require.Zero(t, srq.MaxSGE())
	require.Zero(t, srq.Outstanding())
	require.Zero(t, srq.Free())
	require.Nil(t, srq.Handle())
	_, err := rc.New(pd, cq, rc.Config{SendDepth: 4, SRQ: &srq})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.Contains(t, err.Error(), "rc: new QP: SRQ not made by NewSharedReceiveQueue")
	_, err = ud.New(pd, cq, ud.Config{SendDepth: 4, QKey: 1, SRQ: &srq})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = dc.NewDCT(pd, cq, dc.DCTConfig{SRQ: &srq, Key: 1})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}
