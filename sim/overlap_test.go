package sim

import (
	"encoding/binary"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// An atomic's response is written to the requester's result buffer after
// the responder executed it: when the result buffer is the target itself
// (a loopback, the memory registered in both PDs), the word ends holding
// the original value, as the response that lands last carries it.
func TestAtomicResultIsItsTarget(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	both, err := e.pd.RegisterBuffer(e.buf2, allAccess) // buf2 in the requester's PD too
	require.NoError(t, err)
	binary.NativeEndian.PutUint64(e.mem2(64, 8), 10)
	a.post(prm.OpAtomicFA, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(64), e.mr2.RKey()), atomicSeg(5, 0), dataSeg(8, both.LKey(), e.addr2(64)))
	e.run()
	require.Equal(t, prm.CQEReq, a.scq.one(t).op)
	require.Equal(t, uint64(10), binary.NativeEndian.Uint64(e.mem2(64, 8)), "the response (old value 10) lands after the add (15)")
}

// An RDMA READ's response carries the remote bytes as the responder read
// them (one packet here): a local SGE that overlaps the remote range does
// not change what a later SGE receives.
func TestReadScatterOverlapsSource(t *testing.T) {
	e := newEnv(t, Options{})
	a, _ := e.rcPair(qpOpts{})
	both, err := e.pd.RegisterBuffer(e.buf2, allAccess)
	require.NoError(t, err)
	copy(e.mem2(100, 16), "AAAAAAAABBBBBBBB")
	a.post(prm.OpRdmaRead, 0, prm.FlagCQUpdate, 0, raddrSeg(e.addr2(100), e.mr2.RKey()),
		dataSeg(8, both.LKey(), e.addr2(108)), dataSeg(8, both.LKey(), e.addr2(200)))
	e.run()
	c := a.scq.one(t)
	require.Equal(t, prm.CQEReq, c.op)
	require.Equal(t, uint32(16), c.byteCnt)
	require.Equal(t, []byte("AAAAAAAA"), e.mem2(108, 8))
	require.Equal(t, []byte("BBBBBBBB"), e.mem2(200, 8), "the second half of the response is the remote bytes as read")
}
