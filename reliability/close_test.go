package reliability

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// catchFault runs f with memory faults turned into panics (on this
// goroutine) and returns what such a panic carried, nil when f did not
// fault.
func catchFault(f func()) (fault any) {
	old := debug.SetPanicOnFault(true)
	defer debug.SetPanicOnFault(old)
	defer func() { fault = recover() }()
	f()
	return nil
}

// requireNoFault runs f and fails the test if it touched unmapped memory.
func requireNoFault(t *testing.T, what string, f func()) {
	t.Helper()
	if fault := catchFault(f); fault != nil {
		t.Fatalf("%s: memory fault: %v", what, fault)
	}
}

// sendDoorbell reads the send counter of a QP's doorbell record.
func sendDoorbell(d descriptor.QP) uint32 {
	return prm.Load32(unsafe.Add(d.DBRec, prm.DoorbellRecordSendB))
}

// closers are the two ways the tests close a queue pair under a stage:
// the transport's Close and the Context's.
var closers = []struct {
	name  string
	close func(t *testing.T, x *fabric, qp interface{ Close() error })
}{
	{"QP.Close", func(t *testing.T, _ *fabric, qp interface{ Close() error }) { require.NoError(t, qp.Close()) }},
	{"Context.Close", func(t *testing.T, x *fabric, _ interface{ Close() error }) { require.NoError(t, x.c[0].Close()) }},
}

// TestStageKeptAcrossClose begins a send WQE, closes the queue pair (or its
// Context) and then goes on with the stage: every write lands in memory
// that is still mapped, Finish fails with ErrClosed, and no doorbell rings.
func TestStageKeptAcrossClose(t *testing.T) {
	for _, cl := range closers {
		t.Run("rc/"+cl.name, func(t *testing.T) {
			x := newFabric(t, sim.Options{})
			p := newRCPair(t, x, rc.Config{SendDepth: 8, RecvDepth: 8, MaxInline: 32})
			q := p.qp[0]
			d := provider.QPDescriptor(q.Handle())
			db := sendDoorbell(d)
			st, err := q.Post(1, wqebuilder.Signaled)
			require.NoError(t, err)
			cl.close(t, x, q)
			var ferr error
			requireNoFault(t, "RDMA_WRITE finished after close", func() {
				ferr = st.RdmaWrite(p.r[1].addr(0), p.r[1].rkey()).
					SGE(p.r[0].addr(0), 64, p.r[0].lkey()).
					Inline([]byte("after close")).
					FinishBlueFlame()
			})
			require.ErrorIs(t, ferr, ctx.ErrClosed)
			require.Equal(t, db, sendDoorbell(d), "the doorbell record moved")
			require.Equal(t, transport.StateClosed, q.State())
			// The model saw nothing.
			require.NoError(t, x.f.RunUntilIdle())
			require.Zero(t, p.p[1].Poll(16, func(*transport.Completion) { t.Error("a completion at the peer") }))
		})
		t.Run("ud/"+cl.name, func(t *testing.T) {
			x := newFabric(t, sim.Options{})
			cq, err := x.c[0].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 15})
			require.NoError(t, err)
			u, err := ud.New(x.pd[0], cq, ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 1})
			require.NoError(t, err)
			remote, err := u.NewRemote(u.Endpoint())
			require.NoError(t, err)
			d := provider.QPDescriptor(u.Handle())
			db := sendDoorbell(d)
			st, err := u.Post(1, wqebuilder.Signaled, remote)
			require.NoError(t, err)
			cl.close(t, x, u)
			var ferr error
			requireNoFault(t, "UD SEND finished after close", func() {
				ferr = st.Send().Inline([]byte("after close")).FinishBlueFlame()
			})
			require.ErrorIs(t, ferr, ctx.ErrClosed)
			require.Equal(t, db, sendDoorbell(d), "the doorbell record moved")
		})
		t.Run("dc/"+cl.name, func(t *testing.T) {
			x := newFabric(t, sim.Options{})
			cq, err := x.c[0].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 15})
			require.NoError(t, err)
			rcq, err := x.c[1].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 15})
			require.NoError(t, err)
			dci, err := dc.NewDCI(x.pd[0], cq, dc.DCIConfig{SendDepth: 4, MaxInline: 32})
			require.NoError(t, err)
			srq, err := transport.NewSharedReceiveQueue(x.pd[1], ctx.SRQConfig{Depth: 4})
			require.NoError(t, err)
			dct, err := dc.NewDCT(x.pd[1], rcq, dc.DCTConfig{SRQ: srq, Key: 7})
			require.NoError(t, err)
			remote, err := dci.NewRemote(dct.Endpoint())
			require.NoError(t, err)
			d := provider.QPDescriptor(dci.Handle())
			db := sendDoorbell(d)
			st, err := dci.Post(1, wqebuilder.Signaled, remote)
			require.NoError(t, err)
			cl.close(t, x, dci)
			var ferr error
			requireNoFault(t, "DC SEND finished after close", func() {
				ferr = st.Send().Inline([]byte("after close")).Finish()
			})
			require.ErrorIs(t, ferr, ctx.ErrClosed)
			require.Equal(t, db, sendDoorbell(d), "the doorbell record moved")
		})
	}
}

// TestReceiveStageKeptAcrossClose is the same for receive WQEs: one on a
// QP's own receive queue and one on an SRQ.
func TestReceiveStageKeptAcrossClose(t *testing.T) {
	for _, cl := range closers {
		t.Run("rq/"+cl.name, func(t *testing.T) {
			x := newFabric(t, sim.Options{})
			p := newRCPair(t, x, rc.Config{SendDepth: 8, RecvDepth: 8})
			q := p.qp[0]
			st := q.BeginRecv(1)
			cl.close(t, x, q)
			var ferr error
			requireNoFault(t, "receive WQE finished after close", func() {
				ferr = st.SGE(p.r[0].addr(0), 64, p.r[0].lkey()).FinishDoorbell()
			})
			require.ErrorIs(t, ferr, ctx.ErrClosed)
			require.Zero(t, q.RecvOutstanding())
		})
		t.Run("srq/"+cl.name, func(t *testing.T) {
			x := newFabric(t, sim.Options{})
			srq, err := transport.NewSharedReceiveQueue(x.pd[0], ctx.SRQConfig{Depth: 8})
			require.NoError(t, err)
			st := srq.BeginRecv(1)
			cl.close(t, x, srq)
			var ferr error
			requireNoFault(t, "SRQ WQE finished after close", func() {
				ferr = st.SGE(0x1000, 64, 1).FinishDoorbell()
			})
			require.ErrorIs(t, ferr, ctx.ErrClosed)
			require.Zero(t, srq.Outstanding())
		})
	}
}

// TestSendQueueAfterClose posts straight on the send queue of a closed UD
// QP: the queue handed out after Close is the refusing one, and one taken
// before Close refuses at Finish.
func TestSendQueueAfterClose(t *testing.T) {
	x := newFabric(t, sim.Options{})
	cq, err := x.c[0].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 15})
	require.NoError(t, err)
	u, err := ud.New(x.pd[0], cq, ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 1})
	require.NoError(t, err)
	before := u.SendQueue()
	d := provider.QPDescriptor(u.Handle())
	db := sendDoorbell(d)
	require.NoError(t, u.Close())
	var av [prm.AVSize]byte
	for _, c := range []struct {
		what string
		sq   *wqebuilder.SendQueue
	}{{"taken after Close", u.SendQueue()}, {"taken before Close", before}} {
		var ferr error
		requireNoFault(t, c.what, func() {
			ferr = c.sq.Begin(1, wqebuilder.Signaled).UD(&av, u.QPN(), 1).Send().Inline([]byte("late")).FinishBlueFlame()
		})
		require.ErrorIs(t, ferr, ctx.ErrClosed, c.what)
		requireNoFault(t, c.what, c.sq.RingDoorbell)
	}
	require.NotSame(t, before, u.SendQueue(), "a closed QP hands out its refusing queue")
	require.Less(t, u.SendQueue().Free(), u.SendQueue().Config().MaxWQEBBs, "the refusing queue is always full")
	require.Equal(t, db, sendDoorbell(d), "the doorbell record moved")
}

// TestContextCloseWhilePolling closes a Context from one goroutine while
// another polls its CQ, with CQEs in the ring: the poller hands out at most
// the CQEs the model wrote, then finds nothing, and learns of the close
// from the CQ (raw monocq) or from the Poller's Err, never by a fault.
// Under -race it also checks that the close and the poll share no
// unsynchronized Go memory.
func TestContextCloseWhilePolling(t *testing.T) {
	const sends = 24
	setup := func(t *testing.T) (*fabric, *rcPair) {
		x := newFabric(t, sim.Options{})
		p := newRCPair(t, x, rc.Config{SendDepth: 32, RecvDepth: 32})
		for i := range sends {
			require.NoError(t, p.qp[1].PostRecv(uint64(i), p.r[1].addr(0), 8, p.r[1].lkey()))
			st, err := p.qp[0].Post(uint64(i), wqebuilder.Signaled)
			require.NoError(t, err)
			require.NoError(t, st.Send().SGE(p.r[0].addr(0), 8, p.r[0].lkey()).FinishBlueFlame())
		}
		require.NoError(t, x.f.RunUntilIdle())
		return x, p
	}
	type result struct {
		delivered, afterClose int
		err                   error
		fault                 any
	}
	// poll runs the loop on a goroutine of its own: it reports when it
	// has started, and polls until closed() and then a while longer.
	poll := func(pollOnce func() int, closed func() bool) (started chan struct{}, done chan result) {
		started, done = make(chan struct{}), make(chan result, 1)
		go func() {
			var r result
			r.fault = catchFault(func() {
				once := false
				for extra := 0; extra < 2000; {
					wasClosed := closed()
					n := pollOnce()
					r.delivered += n
					if !once {
						once = true
						close(started)
					}
					if wasClosed {
						r.afterClose += n
						extra++
					}
					runtime.Gosched()
				}
			})
			if r.delivered > sends {
				r.err = fmt.Errorf("%d CQEs from a ring the model wrote %d to", r.delivered, sends)
			}
			done <- r
		}()
		return started, done
	}

	t.Run("monocq", func(t *testing.T) {
		x, p := setup(t)
		cq, handle := p.p[0].CQ(), p.cq[0]
		var last uint32
		started, done := poll(func() int {
			return cq.Poll(1, func(c *monocq.CQE) { last = c.QPN() })
		}, handle.Closed)
		<-started
		require.NoError(t, x.c[0].Close())
		r := <-done
		require.Nil(t, r.fault, "the poller faulted")
		require.NoError(t, r.err)
		require.NotZero(t, r.delivered)
		require.Equal(t, p.qp[0].QPN(), last)
		require.Zero(t, cq.Poll(16, func(*monocq.CQE) {}), "a closed CQ, drained")
		require.NoError(t, cq.Err())
	})

	t.Run("Poller", func(t *testing.T) {
		x, p := setup(t)
		poller := p.p[0]
		started, done := poll(func() int {
			return poller.Poll(1, func(c *transport.Completion) {})
		}, func() bool { return errors.Is(poller.Err(), ctx.ErrClosed) })
		<-started
		require.NoError(t, x.c[0].Close())
		r := <-done
		require.Nil(t, r.fault, "the poller faulted")
		require.NoError(t, r.err)
		require.Zero(t, r.afterClose, "a Poller polls nothing once its CQ is closed")
		require.Equal(t, transport.StateClosed, p.qp[0].State())
	})
}

// TestContextCloseWhilePosting closes a Context from one goroutine while
// another posts and polls on an engine-mode model: every post after the
// close fails with ErrClosed, and none faults.
func TestContextCloseWhilePosting(t *testing.T) {
	x := newFabric(t, sim.Options{Mode: sim.Engine})
	p := newRCPair(t, x, rc.Config{SendDepth: 16, RecvDepth: 16, MaxInline: 32})
	q, poller := p.qp[0], p.p[0]
	started := make(chan struct{})
	type result struct {
		posted int
		err    error
		fault  any
	}
	done := make(chan result, 1)
	go func() {
		var r result
		r.fault = catchFault(func() {
			for i := uint64(0); ; i++ {
				if i == 64 {
					close(started)
				}
				for q.SendQueue().Free() < 4 && !q.Handle().Closed() {
					poller.Poll(16, func(*transport.Completion) {})
					runtime.Gosched()
				}
				st, err := q.Post(i, wqebuilder.Signaled)
				if err == nil {
					err = st.RdmaWrite(p.r[1].addr(0), p.r[1].rkey()).Inline([]byte("racing a close")).FinishBlueFlame()
				}
				if err != nil {
					r.err = err
					return
				}
				r.posted++
			}
		})
		done <- r
	}()
	select {
	case <-started:
	case r := <-done:
		t.Fatalf("the poster stopped before the close: %+v", r)
	case <-time.After(10 * time.Second):
		t.Fatal("no progress")
	}
	require.NoError(t, x.c[0].Close())
	r := <-done
	require.Nil(t, r.fault, "the poster faulted")
	require.ErrorIs(t, r.err, ctx.ErrClosed)
	require.GreaterOrEqual(t, r.posted, 64)
}
