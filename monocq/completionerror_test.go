package monocq_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/monocq"
)

// errorCQE builds an error CQE image by hand: syndrome at byte 55, vendor
// syndrome at 54, WQE opcode and QPN at 56, wqe_counter at 60, op_own at 63.
func errorCQE(cqeOp prm.CQEOpcode, wqeOp prm.Opcode, qpn uint32, counter uint16, synd, vendor uint8) *monocq.CQE {
	var c monocq.CQE
	c[54] = vendor
	c[55] = synd
	binary.BigEndian.PutUint32(c[56:], uint32(wqeOp)<<24|qpn)
	binary.BigEndian.PutUint16(c[60:], counter)
	c[63] = uint8(cqeOp) << 4
	return &c
}

func TestErrorFromRequesterCQE(t *testing.T) {
	c := errorCQE(prm.CQEReqErr, prm.OpRdmaWrite, 0x105, 3, 0x13, 0x88)
	e := fromCQE(t, c)
	require.NotNil(t, e)
	require.Equal(t, "REM_ACCESS_ERR", e.Status.String())
	require.Equal(t, prm.SyndromeRemoteAccess, e.Syndrome)
	require.Equal(t, uint8(0x88), e.VendorSyndrome)
	require.Equal(t, prm.CQEReqErr, e.CQEOpcode)
	require.Equal(t, prm.OpRdmaWrite, e.Opcode)
	require.Equal(t, uint32(0x105), e.QPN)
	require.Equal(t, uint16(3), e.WQECounter)
	require.True(t, e.Requester())
	require.False(t, e.HasWRID)

	require.Equal(t, "monocq: RDMA_WRITE on QPN 0x105 failed: REM_ACCESS_ERR "+
		"(syndrome REMOTE_ACCESS_ERR 0x13, vendor syndrome 0x88), wqe_counter 3", e.Error())
	w := e.WithWRID(0x7)
	require.False(t, e.HasWRID, "WithWRID copies")
	require.Equal(t, "monocq: RDMA_WRITE on QPN 0x105 failed: REM_ACCESS_ERR "+
		"(syndrome REMOTE_ACCESS_ERR 0x13, vendor syndrome 0x88), wqe_counter 3, wr_id 0x7", w.Error())

	err := fmt.Errorf("peer 3: %w", w)
	require.ErrorIs(t, err, monocq.ErrRemoteAccess)
	require.ErrorIs(t, err, monocq.ErrCompletion)
	require.NotErrorIs(t, err, monocq.ErrFlushed)
	require.NotErrorIs(t, err, monocq.ErrUnknownSyndrome)
	var got *monocq.CompletionError
	require.ErrorAs(t, err, &got)
	require.Equal(t, uint64(7), got.WRID)
}

func TestErrorFromResponderCQE(t *testing.T) {
	c := errorCQE(prm.CQERespErr, 0, 0x2a, 9, 0x01, 0)
	e := fromCQE(t, c)
	require.NotNil(t, e)
	require.False(t, e.Requester())
	require.Equal(t, prm.Opcode(0), e.Opcode)
	require.Equal(t, "LOC_LEN_ERR", e.Status.String())
	require.ErrorIs(t, e, monocq.ErrLocalLength)
	require.Equal(t, "monocq: receive on QPN 0x2a failed: LOC_LEN_ERR "+
		"(syndrome LOCAL_LENGTH_ERR 0x01, vendor syndrome 0x00), wqe_counter 9", e.Error())
}

func TestErrorUnknownSyndrome(t *testing.T) {
	e := fromCQE(t, errorCQE(prm.CQEReqErr, prm.OpSend, 1, 0, 0x7e, 0))
	require.Equal(t, "GENERAL_ERR", e.Status.String())
	require.ErrorIs(t, e, monocq.ErrGeneral)
	require.ErrorIs(t, e, monocq.ErrUnknownSyndrome)
	require.Contains(t, e.Error(), "GENERAL_ERR")
	require.Contains(t, e.Error(), "0x7e")
}

func TestStatusOfEverySyndrome(t *testing.T) {
	// The mapping of rdma-core's mlx5 provider, written out independently.
	want := map[uint8]struct {
		status   monocq.Status
		sentinel error
		name     string
	}{
		0x01: {1, monocq.ErrLocalLength, "LOC_LEN_ERR"},
		0x02: {2, monocq.ErrLocalQPOperation, "LOC_QP_OP_ERR"},
		0x04: {4, monocq.ErrLocalProtection, "LOC_PROT_ERR"},
		0x05: {5, monocq.ErrFlushed, "WR_FLUSH_ERR"},
		0x06: {6, monocq.ErrMemoryWindowBind, "MW_BIND_ERR"},
		0x10: {7, monocq.ErrBadResponse, "BAD_RESP_ERR"},
		0x11: {8, monocq.ErrLocalAccess, "LOC_ACCESS_ERR"},
		0x12: {9, monocq.ErrRemoteInvalidRequest, "REM_INV_REQ_ERR"},
		0x13: {10, monocq.ErrRemoteAccess, "REM_ACCESS_ERR"},
		0x14: {11, monocq.ErrRemoteOperation, "REM_OP_ERR"},
		0x15: {12, monocq.ErrRetryExceeded, "RETRY_EXC_ERR"},
		0x16: {13, monocq.ErrRNRRetryExceeded, "RNR_RETRY_EXC_ERR"},
		0x22: {16, monocq.ErrRemoteAborted, "REM_ABORT_ERR"},
	}
	for s := 0; s < 256; s++ {
		st := monocq.StatusOf(prm.Syndrome(s))
		w, ok := want[uint8(s)]
		if !ok {
			require.Equal(t, "GENERAL_ERR", st.String(), "syndrome %#x", s)
			continue
		}
		require.Equal(t, w.status, st, "syndrome %#x", s)
		require.Equal(t, w.name, st.String())
		e := fromCQE(t, errorCQE(prm.CQEReqErr, prm.OpSend, 1, 0, uint8(s), 0))
		require.ErrorIs(t, e, w.sentinel)
		for _, o := range want {
			if o.sentinel != w.sentinel {
				require.NotErrorIs(t, e, o.sentinel)
			}
		}
	}
	require.Equal(t, "SUCCESS", monocq.Status(0).String())
	require.Nil(t, monocq.Status(0).Sentinel())
	require.Equal(t, "Status(99)", monocq.Status(99).String())
}

// A successful CQE gives no error, and finding that out allocates nothing.
func TestErrSuccessDoesNotAllocate(t *testing.T) {
	var ok monocq.CQE
	ok[63] = uint8(prm.CQEReq) << 4
	require.NoError(t, ok.Err())
	allocs := testing.AllocsPerRun(1000, func() {
		if ok.Err() != nil {
			panic("error")
		}
	})
	require.Zero(t, allocs)
	require.Error(t, errorCQE(prm.CQEReqErr, prm.OpSend, 1, 0, 0x05, 0).Err())
}

// fromCQE returns the *CompletionError of an error CQE.
func fromCQE(t *testing.T, c *monocq.CQE) *monocq.CompletionError {
	t.Helper()
	var e *monocq.CompletionError
	require.ErrorAs(t, c.Err(), &e)
	return e
}

// An error CQE turns into a *CompletionError that names what failed and matches the
// sentinel of its status.
func ExampleCompletionError() {
	// A requester error CQE: RDMA_WRITE on QPN 0x105 hit a bad rkey.
	cqe := errorCQE(0xd, 0x08, 0x105, 3, 0x13, 0)

	err := fmt.Errorf("write to peer 2: %w", cqe.Err().(*monocq.CompletionError).WithWRID(42))
	fmt.Println(err)
	fmt.Println(errors.Is(err, monocq.ErrRemoteAccess), errors.Is(err, monocq.ErrFlushed))
	var ce *monocq.CompletionError
	if errors.As(err, &ce) {
		fmt.Println(ce.Status, ce.Syndrome, ce.WRID)
	}
	// Output:
	// write to peer 2: monocq: RDMA_WRITE on QPN 0x105 failed: REM_ACCESS_ERR (syndrome REMOTE_ACCESS_ERR 0x13, vendor syndrome 0x00), wqe_counter 3, wr_id 0x2a
	// true false
	// REM_ACCESS_ERR REMOTE_ACCESS_ERR 42
}

// The two retry statuses say what they usually mean, as a verbs status
// name alone does not.
func TestErrorRetryExceededSaysWhy(t *testing.T) {
	e := fromCQE(t, errorCQE(prm.CQEReqErr, prm.OpSend, 1, 3, uint8(prm.SyndromeTransportRetryExc), 0))
	require.Equal(t, "monocq: SEND on QPN 0x1 failed: RETRY_EXC_ERR (syndrome TRANSPORT_RETRY_EXC_ERR 0x15, vendor syndrome 0x00), wqe_counter 3; "+
		"the peer did not answer: its process is gone, it cannot be reached, or its queue is not connected to this one", e.Error())
	e = fromCQE(t, errorCQE(prm.CQEReqErr, prm.OpSend, 1, 3, uint8(prm.SyndromeRNRRetryExc), 0))
	require.Contains(t, e.Error(), "RNR_RETRY_EXC_ERR")
	require.Contains(t, e.Error(), "; the peer had no receive posted")
	e = fromCQE(t, errorCQE(prm.CQEReqErr, prm.OpSend, 1, 3, uint8(prm.SyndromeRemoteAccess), 0))
	require.NotContains(t, e.Error(), ";")
}
