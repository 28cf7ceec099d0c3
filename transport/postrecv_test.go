package transport_test

import (
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// rqBytes returns the receive ring and its doorbell record word of q.
func rqBytes(q *transport.Queue) ([]byte, []byte) {
	d := provider.QPDescriptor(q.Handle())
	ring := unsafe.Slice((*byte)(d.RQ.Buf), int(d.RQ.WQECnt*d.RQ.Stride))
	return ring, unsafe.Slice((*byte)(d.DBRec), 4)
}

// PostRecv, which compiles into its caller, writes the receive ring and
// the doorbell record byte for byte as the staged path (BeginRecv, SGE,
// FinishDoorbell) does, returns the same errors, and retires to the same
// work request ids: checked on twin QPs, through a full ring, a zero-length
// post, completions and a closed QP.
func TestPostRecvMatchesStaged(t *testing.T) {
	rig := func() (*transporttest.Env, *rc.QP, *rc.QP, *transport.Poller) {
		e := transporttest.New(t, sim.Options{})
		acq, bcq := e.CQ(0, 64), e.CQ(1, 64)
		a, err := rc.New(e.PD[0], acq, rc.Config{SendDepth: 16, MaxInline: 64})
		require.NoError(t, err)
		b, err := rc.New(e.PD[1], bcq, rc.Config{SendDepth: 1, RecvDepth: 8, MaxRecvSGE: 2})
		require.NoError(t, err)
		require.NoError(t, a.Connect(b.Endpoint()))
		require.NoError(t, b.Connect(a.Endpoint()))
		p, err := transport.NewPoller(bcq)
		require.NoError(t, err)
		require.NoError(t, p.Add(b))
		t.Cleanup(func() { a.Close(); b.Close() })
		return e, a, b, p
	}
	ex, ax, bx, px := rig()
	ey, ay, by, py := rig()
	// The two rigs' buffers sit at different addresses: give the staged
	// side the fast side's addresses and keys, so the rings compare equal.
	staged := func(wrid, addr uint64, n, lkey uint32) error {
		return by.BeginRecv(wrid).SGE(addr-ey.Addr(1, 0)+ex.Addr(1, 0), n, lkey-ey.LKey(1)+ex.LKey(1)).FinishDoorbell()
	}
	same := func(what string) {
		t.Helper()
		rx, dx := rqBytes(&bx.Queue)
		ry, dy := rqBytes(&by.Queue)
		require.Equal(t, ry, rx, what)
		require.Equal(t, dy, dx, what)
		require.Equal(t, by.Queue.RecvOutstanding(), bx.Queue.RecvOutstanding(), what)
	}
	post := func(wrid uint64, off int, n uint32) {
		t.Helper()
		ex1 := bx.PostRecv(wrid, ex.Addr(1, off), n, ex.LKey(1))
		ey1 := staged(wrid, ey.Addr(1, off), n, ey.LKey(1))
		if ey1 == nil {
			require.NoError(t, ex1)
		} else {
			require.EqualError(t, ex1, ey1.Error())
		}
	}
	for i := range 9 { // the ninth finds the ring full
		post(uint64(100+i), 64*i, uint32(8*i)) // i == 0: a zero-length post
		same("post")
	}
	// Writes with immediate consume the receives in order on both.
	for _, s := range []struct {
		e *transporttest.Env
		a *rc.QP
	}{{ex, ax}, {ey, ay}} {
		for i := range 3 {
			st, err := s.a.Post(uint64(i), 0)
			require.NoError(t, err)
			require.NoError(t, st.RdmaWriteImm(s.e.Addr(1, 4096), s.e.RKey(1), uint32(i)).Inline([]byte("x")).FinishBlueFlame())
		}
	}
	got := [2][]uint64{}
	for k, pe := range []struct {
		e *transporttest.Env
		p *transport.Poller
	}{{ex, px}, {ey, py}} {
		pe.e.Run()
		pe.p.Poll(8, func(c *transport.Completion) {
			require.Equal(t, transport.MatchOK, c.Match)
			got[k] = append(got[k], c.WRID)
		})
	}
	require.Equal(t, []uint64{100, 101, 102}, got[0])
	require.Equal(t, got[1], got[0])
	for i := range 3 {
		post(uint64(200+i), 512+64*i, 16)
		same("after completions")
	}
	// A closed QP: the same error, nothing written.
	require.NoError(t, bx.Close())
	require.NoError(t, by.Close())
	ex1 := bx.PostRecv(1, ex.Addr(1, 0), 8, ex.LKey(1))
	require.Error(t, ex1)
	require.EqualError(t, ex1, by.BeginRecv(1).SGE(ey.Addr(1, 0), 8, ey.LKey(1)).FinishDoorbell().Error())
}

// The same for a shared receive queue: PostRecv writes the SRQ ring (its
// next segments included) and the doorbell record as the staged path does,
// through a full free list, and returns the same errors.
func TestSRQPostRecvMatchesStaged(t *testing.T) {
	srq := func() (*transporttest.Env, *transport.SharedReceiveQueue) {
		e := transporttest.New(t, sim.Options{})
		s, err := transport.NewSharedReceiveQueue(e.PD[1], ctx.SRQConfig{Depth: 8, MaxSGE: 2})
		require.NoError(t, err)
		return e, s
	}
	ex, sx := srq()
	_, sy := srq()
	bytes := func(s *transport.SharedReceiveQueue) ([]byte, []byte) {
		d := provider.SRQDescriptor(s.Handle())
		return unsafe.Slice((*byte)(d.Buf), int(d.WQECnt*d.Stride)), unsafe.Slice((*byte)(d.DBRec), 4)
	}
	refused := 0
	for i := range 20 { // the free list runs out on the way
		wrid, off, n := uint64(300+i), 64*i, uint32(8*(i%3))
		errx := sx.PostRecv(wrid, ex.Addr(1, off), n, ex.LKey(1))
		erry := sy.BeginRecv(wrid).SGE(ex.Addr(1, off), n, ex.LKey(1)).FinishDoorbell()
		if erry == nil {
			require.NoError(t, errx, "post %d", i)
		} else {
			require.EqualError(t, errx, erry.Error(), "post %d", i)
			refused++
		}
		rx, dx := bytes(sx)
		ry, dy := bytes(sy)
		require.Equal(t, ry, rx, "post %d", i)
		require.Equal(t, dy, dx, "post %d", i)
		require.Equal(t, sy.Outstanding(), sx.Outstanding(), "post %d", i)
	}
	require.NotZero(t, sx.Outstanding())
	require.NotZero(t, refused, "the free list never ran out")
	require.NoError(t, sx.Close())
	require.NoError(t, sy.Close())
	errx := sx.PostRecv(1, ex.Addr(1, 0), 8, ex.LKey(1))
	require.Error(t, errx)
	require.EqualError(t, errx, sy.BeginRecv(1).SGE(ex.Addr(1, 0), 8, ex.LKey(1)).FinishDoorbell().Error())
}
