package reliability

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// faultSink keeps the compiler from dropping the load in faults.
var faultSink byte

// faults reports whether reading the byte at p faults (a PROT_NONE page):
// with debug.SetPanicOnFault the fault becomes a panic the test recovers.
func faults(p unsafe.Pointer) (fault bool) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() {
		if r := recover(); r != nil {
			fault = true
		}
	}()
	faultSink = *(*byte)(p)
	return false
}

// pageOf returns the page-aligned memory [p rounded down, p+n rounded up).
func pageOf(p unsafe.Pointer, n int) []byte {
	ps := uintptr(os.Getpagesize())
	off := uintptr(p) & (ps - 1)
	size := (off + uintptr(n) + ps - 1) &^ (ps - 1)
	return unsafe.Slice((*byte)(unsafe.Add(p, -int(off))), size)
}

// requireGuarded checks that the memory [p, p+n) is surrounded by pages
// that fault: the page before p and the page after the pages it covers.
// It returns those pages.
func requireGuarded(t *testing.T, what string, p unsafe.Pointer, n int) []byte {
	t.Helper()
	pages := pageOf(p, n)
	first := unsafe.Pointer(unsafe.SliceData(pages))
	require.Equal(t, first, p, "%s starts at a page boundary", what)
	require.False(t, faults(p), "%s itself must be readable", what)
	require.True(t, faults(unsafe.Add(first, -1)), "%s: the byte before it is readable: no guard page", what)
	require.True(t, faults(unsafe.Add(first, len(pages))), "%s: the byte after its last page is readable: no guard page", what)
	return pages
}

// TestRingsHaveGuardPages checks that every ring, doorbell record and
// BlueFlame page the software HCA hands out sits between PROT_NONE pages,
// so that a stray access before or after it faults instead of touching
// other memory, and that a workload leaves the slack after a ring (up to
// its page end) untouched.
func TestRingsHaveGuardPages(t *testing.T) {
	x := newFabric(t, sim.Options{})
	p := newRCPair(t, x, rc.Config{SendDepth: 4, RecvDepth: 4, MaxInline: 32})
	srq, err := transport.NewSharedReceiveQueue(x.pd[1], ctx.SRQConfig{Depth: 5})
	require.NoError(t, err)
	d := provider.QPDescriptor(p.qp[0].Handle())
	type area struct {
		what  string
		p     unsafe.Pointer
		n     int
		pages []byte
		tail  []byte
	}
	cd := provider.CQDescriptor(p.cq[0])
	sd := provider.SRQDescriptor(srq.Handle())
	areas := []*area{
		{what: "send ring", p: d.SQ.Buf, n: int(d.SQ.WQECnt) * prm.WQEBBSize},
		{what: "receive ring", p: d.RQ.Buf, n: int(d.RQ.WQECnt * d.RQ.Stride)},
		{what: "QP doorbell record", p: d.DBRec, n: 8},
		{what: "BlueFlame register", p: unsafe.Add(d.BlueFlame, -0x800), n: 0x800 + 2*int(d.BlueFlameSize)},
		{what: "CQ ring", p: cd.Buf, n: int(cd.CQECnt * cd.CQESize)},
		{what: "CQ doorbell record", p: cd.DBRec, n: 8},
		{what: "SRQ ring", p: sd.Buf, n: int(sd.WQECnt * sd.Stride)},
	}
	for _, a := range areas {
		a.pages = requireGuarded(t, a.what, a.p, a.n)
		a.tail = bytes.Clone(a.pages[a.n:])
	}
	// Traffic through every ring, several laps of the small ones.
	for i := range 40 {
		require.NoError(t, p.qp[1].PostRecv(uint64(i), p.r[1].addr(0), 64, p.r[1].lkey()))
		st, err := p.qp[0].Post(uint64(i), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, st.Send().Inline([]byte("guarded")).FinishBlueFlame())
		got := p.drain(t)
		require.Len(t, got, 2)
		for _, c := range got {
			require.NoError(t, c.Err())
		}
	}
	for _, a := range areas {
		require.Equal(t, a.tail, a.pages[a.n:], "%s: bytes after it on its last page changed", a.what)
	}
}

// sendSide is what a misuse may not change on a QP's send side: its ring,
// doorbell record page and BlueFlame page.
type sendSide struct {
	pages [][]byte
	snaps [][]byte
}

func snapSend(d descriptor.QP) *sendSide {
	s := &sendSide{pages: [][]byte{
		pageOf(d.SQ.Buf, int(d.SQ.WQECnt)*prm.WQEBBSize),
		pageOf(d.DBRec, 8),
		pageOf(d.BlueFlame, 2*int(d.BlueFlameSize)),
	}}
	if d.RQ.WQECnt > 0 {
		s.pages = append(s.pages, pageOf(d.RQ.Buf, int(d.RQ.WQECnt*d.RQ.Stride)))
	}
	for _, p := range s.pages {
		s.snaps = append(s.snaps, bytes.Clone(p))
	}
	return s
}

func (s *sendSide) requireUnchanged(t *testing.T, what string) {
	t.Helper()
	for i, p := range s.pages {
		require.True(t, bytes.Equal(s.snaps[i], p), "%s changed the queue pair's memory (area %d)", what, i)
	}
}

// requireOnlyWindow checks a WQE that failed while it was built: its
// segments may have been written in the WQEBBs it was given (from the
// producer index pi on, window bytes), nothing else in the ring, the
// doorbell record or the register.
func (s *sendSide) requireOnlyWindow(t *testing.T, what string, pi uint32, window int) {
	t.Helper()
	ring, before := s.pages[0], s.snaps[0]
	start := int(pi) * prm.WQEBBSize % len(ring)
	for i := range ring {
		if (i-start+len(ring))%len(ring) < window {
			continue
		}
		require.Equal(t, before[i], ring[i], "%s changed ring byte %d, outside the WQE's WQEBBs", what, i)
	}
	for i := 1; i < len(s.pages); i++ {
		require.True(t, bytes.Equal(s.snaps[i], s.pages[i]), "%s changed the queue pair's memory (area %d)", what, i)
	}
}

// requireRefused checks a refused post: the error wraps want and names the
// transport and the QP, the stage it returned writes nothing and its
// Finish fails too.
func requireRefused(t *testing.T, st wqebuilder.OpStage, err, want error, qpn uint32) {
	t.Helper()
	require.ErrorIs(t, err, want)
	var pe *wqebuilder.PostError
	require.ErrorAs(t, err, &pe)
	require.Equal(t, qpn, pe.QPN)
	require.Equal(t, err, st.Send().SGE(1, 2, 3).Inline([]byte("ignored")).FinishBlueFlame(),
		"a refused stage must not finish, and says why")
}

// TestMisuseIsRefused goes through the misuses of the data plane on the
// software HCA. Each returns a clear error wrapping its sentinel, and none
// changes a byte of the queue pair's ring, doorbell record or BlueFlame
// register (nor of the memory regions).
func TestMisuseIsRefused(t *testing.T) {
	x := newFabric(t, sim.Options{})

	t.Run("unconnected RC", func(t *testing.T) {
		cq, err := x.c[0].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 15})
		require.NoError(t, err)
		qp, err := rc.New(x.pd[0], cq, rc.Config{SendDepth: 4, RecvDepth: 4})
		require.NoError(t, err)
		snap := snapSend(provider.QPDescriptor(qp.Handle()))
		st, err := qp.Post(1, wqebuilder.Signaled)
		requireRefused(t, st, err, transport.ErrNotConnected, qp.QPN())
		require.Contains(t, err.Error(), "rc: post send on QP")
		qp.RingDoorbell()
		snap.requireUnchanged(t, "a post on an unconnected QP")
		// Receives may be posted before Connect.
		require.NoError(t, qp.PostRecv(1, 0, 0, 0))
		require.NoError(t, qp.Close())
	})

	t.Run("send queue overfilled", func(t *testing.T) {
		p := newRCPair(t, x, rc.Config{SendDepth: 8, MaxInline: 16})
		q := p.qp[0]
		n := 0
		for ; ; n++ {
			require.Less(t, n, 1000)
			before := snapSend(provider.QPDescriptor(q.Handle()))
			pi := q.SendQueue().ProducerIndex()
			st, err := q.Post(uint64(n), 0)
			require.NoError(t, err)
			err = st.RdmaWrite(p.r[1].addr(0), p.r[1].rkey()).Inline([]byte("abc")).Finish()
			if err != nil {
				require.ErrorIs(t, err, wqebuilder.ErrQueueFull)
				require.EqualError(t, err, fmt.Sprintf("rc: post RDMA_WRITE on QP %#x: send queue full", q.QPN()))
				require.Equal(t, pi, q.SendQueue().ProducerIndex())
				before.requireUnchanged(t, "a post on a full send queue")
				break
			}
		}
		require.GreaterOrEqual(t, n, 8, "the queue holds at least its send depth")
		// The doorbell never rang: the HCA saw nothing; ring it now and
		// retire the lot with one signaled NOP... which does not fit.
		q.RingDoorbell()
		st, err := q.Post(999, wqebuilder.Signaled)
		require.NoError(t, err)
		require.ErrorIs(t, st.Nop().Finish(), wqebuilder.ErrQueueFull)
		require.Empty(t, p.drain(t), "unsignaled WQEs complete silently")
		require.Empty(t, x.f.Violations())
	})

	t.Run("inline longer than max inline", func(t *testing.T) {
		p := newRCPair(t, x, rc.Config{SendDepth: 8, MaxInline: 16})
		q := p.qp[0]
		lim := q.Limits().MaxInline
		before := snapSend(provider.QPDescriptor(q.Handle()))
		st, err := q.Post(1, wqebuilder.Signaled)
		require.NoError(t, err)
		window := int(transportMaxWQEBBs(q)) * prm.WQEBBSize
		err = st.Send().Inline(make([]byte, lim+1)).FinishBlueFlame()
		require.ErrorIs(t, err, wqebuilder.ErrInlineTooLong)
		require.EqualError(t, err, fmt.Sprintf("rc: post SEND on QP %#x: inline data longer than max inline", q.QPN()))
		before.requireOnlyWindow(t, "an inline payload over the limit", 0, window)
		st, err = q.Post(2, wqebuilder.Signaled)
		require.NoError(t, err)
		err = st.Send().Inline(make([]byte, lim/2+1)).Inline(make([]byte, lim/2+1)).Finish()
		require.ErrorIs(t, err, wqebuilder.ErrInlineTooLong, "inline pieces add up")
		before.requireOnlyWindow(t, "inline pieces over the limit", 0, window)
		require.Zero(t, q.SendQueue().ProducerIndex())
	})

	t.Run("too many SGEs", func(t *testing.T) {
		p := newRCPair(t, x, rc.Config{SendDepth: 8, RecvDepth: 8, MaxSendSGE: 2, MaxRecvSGE: 2})
		q := p.qp[0]
		before := snapSend(provider.QPDescriptor(q.Handle()))
		st, err := q.Post(1, wqebuilder.Signaled)
		require.NoError(t, err)
		ds := st.RdmaWrite(p.r[1].addr(0), p.r[1].rkey())
		for i := uint32(0); i <= q.Limits().MaxSendSGE; i++ {
			ds = ds.SGE(p.r[0].addr(int(i)), 1, p.r[0].lkey())
		}
		err = ds.FinishBlueFlame()
		require.Error(t, err)
		require.True(t, errors.Is(err, wqebuilder.ErrTooManySGE) || errors.Is(err, wqebuilder.ErrWQETooLarge), "%v", err)
		require.Zero(t, q.SendQueue().ProducerIndex())
		before.requireOnlyWindow(t, "an SGE over the limit", 0, int(transportMaxWQEBBs(q))*prm.WQEBBSize)
		// Receive side: too many scatter entries.
		rq := p.qp[1]
		rs := rq.BeginRecv(1)
		for i := uint32(0); i <= rq.Limits().MaxRecvSGE; i++ {
			rs = rs.SGE(p.r[1].addr(0), 1, p.r[1].lkey())
		}
		require.ErrorIs(t, rs.FinishDoorbell(), wqebuilder.ErrTooManySGE)
	})

	t.Run("receive queue full and no receive queue", func(t *testing.T) {
		p := newRCPair(t, x, rc.Config{SendDepth: 4, RecvDepth: 4})
		q := p.qp[1]
		n := 0
		var err error
		for ; err == nil; n++ {
			require.Less(t, n, 1000)
			err = q.PostRecv(uint64(n), p.r[1].addr(0), 8, p.r[1].lkey())
		}
		require.ErrorIs(t, err, transport.ErrReceiveQueueFull)
		require.Equal(t, int(q.RecvOutstanding())+1, n)
		srq, err := transport.NewSharedReceiveQueue(x.pd[0], ctx.SRQConfig{Depth: 4})
		require.NoError(t, err)
		cq, err := x.c[0].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 15})
		require.NoError(t, err)
		withSRQ, err := rc.New(x.pd[0], cq, rc.Config{SendDepth: 4, SRQ: srq})
		require.NoError(t, err)
		require.ErrorIs(t, withSRQ.PostRecv(1, p.r[0].addr(0), 8, p.r[0].lkey()), transport.ErrNoReceiveQueue)
	})

	t.Run("SGE outside its memory region", func(t *testing.T) {
		p := newRCPair(t, x, rc.Config{SendDepth: 8, RecvDepth: 8})
		q := p.qp[0]
		src, dst := p.r[0], p.r[1]
		// 16 bytes from the last 8 of the source region: half of the SGE
		// lies in the canary gap after it.
		st, err := q.Post(1, wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, st.RdmaWrite(dst.addr(0), dst.rkey()).SGE(src.addr(len(src.mem)-8), 16, src.lkey()).FinishBlueFlame())
		// An RDMA read into a buffer that runs past the end of its region.
		st, err = q.Post(2, wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, st.RdmaRead(dst.addr(0), dst.rkey()).SGE(src.addr(len(src.mem)-8), 16, src.lkey()).FinishBlueFlame())
		got := p.drain(t)
		require.Len(t, got, 2)
		require.Equal(t, prm.SyndromeLocalProt, got[0].Syndrome)
		err = got[0].Err()
		require.Error(t, err)
		require.Contains(t, err.Error(), "LOCAL_PROT_ERR")
		require.True(t, got[1].IsFlush(), "the next one flushes: %+v", got[1])
		for i := range 2 {
			require.NoError(t, p.ar[i].checkCanaries(true))
			require.NoError(t, p.r[i].check())
		}
		// The data plane knows the QP failed.
		st, err = q.Post(3, wqebuilder.Signaled)
		requireRefused(t, st, err, transport.ErrQPError, q.QPN())
		require.Equal(t, transport.StateError, q.State())
	})

	t.Run("errored QP", func(t *testing.T) {
		p := newRCPair(t, x, rc.Config{SendDepth: 8, RecvDepth: 8})
		q := p.qp[0]
		require.NoError(t, q.Fail())
		snap := snapSend(provider.QPDescriptor(q.Handle()))
		st, err := q.Post(1, wqebuilder.Signaled)
		requireRefused(t, st, err, transport.ErrQPError, q.QPN())
		require.ErrorIs(t, q.PostRecv(1, p.r[0].addr(0), 8, p.r[0].lkey()), transport.ErrQPError)
		q.RingDoorbell()
		q.RingRecvDoorbell()
		snap.requireUnchanged(t, "posts on a QP in error")
		require.ErrorIs(t, q.Connect(p.qp[1].Endpoint()), transport.ErrQPError)
	})

	t.Run("closed QPs of every transport", func(t *testing.T) {
		cq, err := x.c[0].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 63})
		require.NoError(t, err)
		rcq, err := x.c[1].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 63})
		require.NoError(t, err)
		poller, err := transport.NewPoller(cq)
		require.NoError(t, err)

		r, err := rc.New(x.pd[0], cq, rc.Config{SendDepth: 4, RecvDepth: 4})
		require.NoError(t, err)
		dci, err := dc.NewDCI(x.pd[0], cq, dc.DCIConfig{SendDepth: 4})
		require.NoError(t, err)
		srq, err := transport.NewSharedReceiveQueue(x.pd[1], ctx.SRQConfig{Depth: 4})
		require.NoError(t, err)
		dct, err := dc.NewDCT(x.pd[1], rcq, dc.DCTConfig{SRQ: srq, Key: 7})
		require.NoError(t, err)
		remote, err := dci.NewRemote(dct.Endpoint())
		require.NoError(t, err)
		u, err := ud.New(x.pd[0], cq, ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 1})
		require.NoError(t, err)
		uremote, err := u.NewRemote(u.Endpoint())
		require.NoError(t, err)
		for _, q := range []*transport.Queue{&r.Queue, &dci.Queue, &u.Queue} {
			require.NoError(t, poller.Add(q))
		}

		for _, c := range []struct {
			name  string
			close func() error
			post  func() (wqebuilder.OpStage, error)
			recv  func() error
			qpn   uint32
		}{
			{"rc", r.Close, func() (wqebuilder.OpStage, error) { return r.Post(1, wqebuilder.Signaled) },
				func() error { return r.PostRecv(1, 0, 0, 0) }, r.QPN()},
			{"dc", dci.Close, func() (wqebuilder.OpStage, error) { return dci.Post(1, wqebuilder.Signaled, remote) },
				nil, dci.QPN()},
			{"ud", u.Close, func() (wqebuilder.OpStage, error) {
				st, err := u.Post(1, wqebuilder.Signaled, uremote)
				require.Error(t, st.Send().Inline([]byte("x")).Finish())
				return wqebuilder.OpStage{}, err
			}, func() error { return u.PostRecv(1, 0, 0, 0) }, u.QPN()},
		} {
			require.NoError(t, c.close(), c.name)
			require.NoError(t, c.close(), "%s: a second Close", c.name)
			st, err := c.post()
			require.ErrorIs(t, err, ctx.ErrClosed, c.name)
			if c.name != "ud" {
				requireRefused(t, st, err, ctx.ErrClosed, c.qpn)
			}
			if c.recv != nil {
				require.ErrorIs(t, c.recv(), ctx.ErrClosed, c.name)
			}
		}
		require.Equal(t, transport.StateClosed, r.State())
		r.RingDoorbell() // its ring is gone: nothing may be written
		r.RingRecvDoorbell()
		require.ErrorIs(t, r.Connect(dct.Endpoint()), transport.ErrTransport, "a DC endpoint is refused first")
		ep := r.Endpoint()
		require.ErrorIs(t, r.Connect(ep), ctx.ErrClosed)

		// The DCT and its SRQ.
		require.NoError(t, dct.Close())
		require.NoError(t, dct.Close())
		require.NoError(t, srq.Close())
		require.NoError(t, srq.Close())
		require.ErrorIs(t, srq.PostRecv(1, 0, 0, 0), ctx.ErrClosed)
		srq.RingRecvDoorbell()
		require.NoError(t, remote.Close())
		require.NoError(t, remote.Close())

		// A closed CQ: its poller polls nothing and says why; its ring is
		// not read.
		require.NoError(t, cq.Close())
		require.NoError(t, cq.Close())
		require.Zero(t, poller.Poll(16, func(*transport.Completion) { t.Fatal("completion from a closed CQ") }))
		require.ErrorIs(t, poller.Err(), ctx.ErrClosed)
		_, err = transport.NewPoller(cq)
		require.ErrorIs(t, err, ctx.ErrClosed)
		_, err = rc.New(x.pd[0], cq, rc.Config{SendDepth: 4})
		require.ErrorIs(t, err, ctx.ErrClosed)
	})

	t.Run("closed parents", func(t *testing.T) {
		// Closing a PD takes its QPs down; the transports see it.
		pd, err := x.c[0].AllocProtectionDomain()
		require.NoError(t, err)
		cq, err := x.c[0].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 15})
		require.NoError(t, err)
		q, err := rc.New(pd, cq, rc.Config{SendDepth: 4, RecvDepth: 4})
		require.NoError(t, err)
		buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{Guard: true})
		require.NoError(t, err)
		mr, err := pd.RegisterBuffer(buf, allAccess)
		require.NoError(t, err)
		require.NoError(t, pd.Close())
		require.True(t, q.Handle().Closed())
		require.True(t, mr.Closed())
		st, err := q.Post(1, 0)
		requireRefused(t, st, err, ctx.ErrClosed, q.QPN())
		require.ErrorIs(t, q.PostRecv(1, 0, 0, 0), ctx.ErrClosed)
		require.NoError(t, q.Close())
		require.NoError(t, mr.Close())
		_, err = pd.RegisterBuffer(buf, allAccess)
		require.ErrorIs(t, err, ctx.ErrClosed)
		require.NoError(t, buf.Close())
		require.NoError(t, buf.Close())
		require.Nil(t, buf.Bytes())
		_, err = pd.RegisterBuffer(buf, allAccess)
		require.ErrorIs(t, err, ctx.ErrClosed)
	})
	require.Empty(t, x.f.Violations())
}

// transportMaxWQEBBs is the largest WQE of q in WQEBBs.
func transportMaxWQEBBs(q *rc.QP) uint32 { return q.Limits().MaxWQEBBs }
