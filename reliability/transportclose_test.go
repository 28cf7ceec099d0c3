package reliability

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// closeRig is a data plane that one goroutine, its owner, drives (posting
// and polling its Pollers) while another closes one object of it with its
// transport's Close.
type closeRig struct {
	// round is one pass of the owner's loop: post what the rings take
	// (nothing more on the object under test once it is closed) and poll
	// every Poller once. It reports whether it found the object closed (a
	// post refused with ErrClosed, or its State), and the first thing
	// that went wrong: a completion with a status it may not have.
	round func(post bool) (closed bool, err error)
	// close is the transport's Close of the object under test.
	close func() error
	// gone reports whether the Pollers dropped the closed queue pair.
	gone func() bool
	// check runs on the test goroutine once the owner stopped: the
	// Pollers met no problem, dropped the closed queue pair and still
	// route the others.
	check func(t *testing.T)
}

// newRecvBuffers registers n receive buffers of size bytes in pd.
func newRecvBuffers(t *testing.T, pd *ctx.ProtectionDomain, n, size int) *ctx.MemoryRegion {
	t.Helper()
	buf, err := ctx.AllocBuffer(n*size, ctx.BufferOptions{})
	require.NoError(t, err)
	mr, err := pd.RegisterMemory(buf.Bytes(), ctx.AccessLocalWrite)
	require.NoError(t, err)
	t.Cleanup(func() { _ = mr.Close(); _ = buf.Close() })
	return mr
}

// statusCheck returns an error for a completion of a queue pair that must
// complete well: anything but MatchOK (MatchUnknownQPN above all, the
// status of a CQE whose queue left the Poller too early).
func statusCheck(what string, c *transport.Completion) error {
	if c.Match != transport.MatchOK {
		return fmt.Errorf("%s: completion of QPN %#x, WRID %d: status %v, error %v", what, c.QPN, c.WRID, c.Match, c.Err())
	}
	return nil
}

// newRCCloseRig is two RC pairs whose requesters share a CQ and a Poller
// and whose responders share another: the owner posts RDMA writes on both
// requesters, Close closes requester 0.
func newRCCloseRig(t *testing.T) *closeRig {
	x := newFabric(t, sim.Options{Mode: sim.Engine})
	var cq [2]*ctx.CompletionQueue
	var p [2]*transport.Poller
	for i := range 2 {
		var err error
		cq[i], err = x.c[i].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 255})
		require.NoError(t, err)
		p[i], err = transport.NewPoller(cq[i])
		require.NoError(t, err)
		p[i].EnableCounters()
	}
	cfg := rc.Config{SendDepth: 16, RecvDepth: 16, MaxInline: 32}
	var a, b [2]*rc.QP
	for k := range 2 {
		var err error
		a[k], err = rc.New(x.pd[0], cq[0], cfg)
		require.NoError(t, err)
		b[k], err = rc.New(x.pd[1], cq[1], cfg)
		require.NoError(t, err)
		require.NoError(t, a[k].Connect(b[k].Endpoint()))
		require.NoError(t, b[k].Connect(a[k].Endpoint()))
		require.NoError(t, p[0].Add(a[k]))
		require.NoError(t, p[1].Add(b[k]))
	}
	ar := newArena(t, x.pd[1], 16<<10)
	t.Cleanup(func() { _ = ar.buf.Close() })
	dst := ar.region(t, "target", 4096, allAccess, 1)
	closed := false
	wrid := uint64(0)
	return &closeRig{
		round: func(post bool) (bool, error) {
			if !closed && a[0].State() == transport.StateClosed {
				closed = true
				// A post now is refused, and its stage fails at Finish.
				st, err := a[0].Post(0, wqebuilder.Signaled)
				if err := requireClosed(err, st.RdmaWrite(dst.addr(0), dst.rkey()).Inline([]byte("late")).FinishBlueFlame(), ctx.ErrClosed); err != nil {
					return closed, err
				}
			}
			for k := range 2 {
				if !post || (k == 0 && closed) {
					continue
				}
				for a[k].SendQueue().Free() > a[k].SendQueue().Config().MaxWQEBBs+4 {
					wrid++
					st, err := a[k].Post(wrid, wqebuilder.Signaled)
					if err == nil {
						err = st.RdmaWrite(dst.addr(0), dst.rkey()).Inline([]byte("racing a close")).FinishBlueFlame()
					}
					if k == 0 && errors.Is(err, ctx.ErrClosed) {
						closed = true
						break
					}
					if err != nil {
						return closed, fmt.Errorf("post on requester %d: %w", k, err)
					}
				}
			}
			var err error
			for i := range 2 {
				p[i].Poll(16, func(c *transport.Completion) {
					if e := statusCheck(fmt.Sprintf("side %d", i), c); e != nil && err == nil {
						err = e
					}
				})
			}
			return closed, err
		},
		close: a[0].Close,
		gone:  func() bool { return p[0].Lookup(a[0].QPN()) == nil },
		check: func(t *testing.T) {
			for i := range 2 {
				require.NoError(t, p[i].Err())
				require.Zero(t, p[i].Counters().UnknownQPN)
			}
			require.Equal(t, transport.StateClosed, a[0].State())
			require.Nil(t, p[0].Lookup(a[0].QPN()), "the closed QP is still routed")
			require.Equal(t, 1, p[0].Len())
			require.Same(t, &a[1].Queue, p[0].Lookup(a[1].QPN()))
			require.Equal(t, 2, p[1].Len())
			// The other requester still completes through the Poller.
			st, err := a[1].Post(1<<40, wqebuilder.Signaled)
			require.NoError(t, err)
			require.NoError(t, st.RdmaWrite(dst.addr(0), dst.rkey()).Inline([]byte("after")).FinishBlueFlame())
			waitFor(t, p[0], 1<<40)
		},
	}
}

// requireClosed checks the error of a post on a closed queue pair and the
// error of its stage's Finish: both must wrap want.
func requireClosed(post, finish, want error) error {
	if !errors.Is(post, want) || !errors.Is(finish, want) {
		return fmt.Errorf("a post after Close: %v, and its Finish: %v; want %v", post, finish, want)
	}
	return nil
}

// waitFor polls p until the completion of wrid, which must be MatchOK.
func waitFor(t *testing.T, p *transport.Poller, wrid uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for seen := false; !seen; {
		require.True(t, time.Now().Before(deadline), "no completion of WRID %d", wrid)
		p.Poll(16, func(c *transport.Completion) {
			require.NoError(t, statusCheck("after the close", c))
			seen = seen || c.WRID == wrid
		})
		runtime.Gosched()
	}
}

// newUDCloseRig is two UD QPs on one CQ and Poller that send to each
// other and receive: Close closes QP 0.
func newUDCloseRig(t *testing.T) *closeRig {
	x := newFabric(t, sim.Options{Mode: sim.Engine})
	cq, err := x.c[0].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 255})
	require.NoError(t, err)
	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	p.EnableCounters()
	const depth, size = 8, 128
	var u [2]*ud.QP
	for k := range 2 {
		u[k], err = ud.New(x.pd[0], cq, ud.Config{SendDepth: 8, RecvDepth: depth, MaxInline: 32, QKey: 0x11})
		require.NoError(t, err)
		require.NoError(t, p.Add(u[k]))
	}
	var to [2]*ud.Remote
	for k := range 2 {
		to[k], err = u[k].NewRemote(u[1-k].Endpoint())
		require.NoError(t, err)
		t.Cleanup(func() { _ = to[k].Close() })
	}
	mr := newRecvBuffers(t, x.pd[0], 2*depth, size)
	closed := false
	wrid := uint64(0)
	return &closeRig{
		round: func(post bool) (bool, error) {
			if !closed && u[0].State() == transport.StateClosed {
				closed = true
				st, err := u[0].Post(0, wqebuilder.Signaled, to[0])
				if err := requireClosed(err, st.Send().Inline([]byte("late")).FinishBlueFlame(), ctx.ErrClosed); err != nil {
					return closed, err
				}
				if err := u[0].PostRecv(0, uint64(mr.Addr()), size, mr.LKey()); !errors.Is(err, ctx.ErrClosed) {
					return closed, fmt.Errorf("a receive post after Close: %v", err)
				}
			}
			for k := range 2 {
				if !post || (k == 0 && closed) {
					continue
				}
				for u[k].RecvOutstanding() < depth {
					wrid++
					slot := uint64(k*depth) + wrid%depth
					err := u[k].PostRecv(wrid, uint64(mr.Addr())+slot*size, size, mr.LKey())
					if k == 0 && errors.Is(err, ctx.ErrClosed) {
						closed = true
						break
					}
					if err != nil {
						return closed, fmt.Errorf("post receive on QP %d: %w", k, err)
					}
				}
				for !closed || k == 1 {
					if u[k].SendQueue().Free() <= u[k].SendQueue().Config().MaxWQEBBs+2 {
						break
					}
					wrid++
					st, err := u[k].Post(wrid, wqebuilder.Signaled, to[k])
					if err == nil {
						err = st.Send().Inline([]byte("racing a close")).FinishBlueFlame()
					}
					if k == 0 && errors.Is(err, ctx.ErrClosed) {
						closed = true
						break
					}
					if err != nil {
						return closed, fmt.Errorf("post on QP %d: %w", k, err)
					}
				}
			}
			var err error
			p.Poll(16, func(c *transport.Completion) {
				if e := statusCheck("UD", c); e != nil && err == nil {
					err = e
				}
			})
			return closed, err
		},
		close: u[0].Close,
		gone:  func() bool { return p.Lookup(u[0].QPN()) == nil },
		check: func(t *testing.T) {
			require.NoError(t, p.Err())
			require.Zero(t, p.Counters().UnknownQPN)
			require.Equal(t, transport.StateClosed, u[0].State())
			require.Nil(t, p.Lookup(u[0].QPN()), "the closed QP is still routed")
			require.Equal(t, 1, p.Len())
			require.Same(t, &u[1].Queue, p.Lookup(u[1].QPN()))
		},
	}
}

// dcCloseTarget names the object a DC rig closes.
type dcCloseTarget int

const (
	closeDCI dcCloseTarget = iota
	closeDCT
	closeSRQ
)

// newDCCloseRig is two DCIs on one CQ and Poller, each sending to a DCT of
// its own; the DCTs share the other side's CQ and Poller, and each
// receives through an SRQ of its own. Close closes DCI 0, DCT 0 or SRQ 0
// (and DCT 0 with it).
func newDCCloseRig(t *testing.T, what dcCloseTarget) *closeRig {
	x := newFabric(t, sim.Options{Mode: sim.Engine})
	scq, err := x.c[0].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 255})
	require.NoError(t, err)
	rcq, err := x.c[1].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 255})
	require.NoError(t, err)
	sp, err := transport.NewPoller(scq)
	require.NoError(t, err)
	sp.EnableCounters()
	rp, err := transport.NewPoller(rcq)
	require.NoError(t, err)
	rp.EnableCounters()
	const depth, size = 16, 64
	var dci [2]*dc.DCI
	var dct [2]*dc.DCT
	var srq [2]*transport.SharedReceiveQueue
	var to [2]*dc.Remote
	for k := range 2 {
		dci[k], err = dc.NewDCI(x.pd[0], scq, dc.DCIConfig{SendDepth: 8, MaxInline: 32})
		require.NoError(t, err)
		require.NoError(t, sp.Add(dci[k]))
		srq[k], err = transport.NewSharedReceiveQueue(x.pd[1], ctx.SRQConfig{Depth: depth})
		require.NoError(t, err)
		dct[k], err = dc.NewDCT(x.pd[1], rcq, dc.DCTConfig{SRQ: srq[k], Key: 0x77, MinRNRTimer: 1})
		require.NoError(t, err)
		require.NoError(t, rp.Add(dct[k]))
		to[k], err = dci[k].NewRemote(dct[k].Endpoint())
		require.NoError(t, err)
		t.Cleanup(func() { _ = to[k].Close() })
	}
	mr := newRecvBuffers(t, x.pd[1], 2*depth, size)
	// DCI 0 sends to DCT 0 alone: once DCT 0 is gone, what it sent last
	// may fail (retry exceeded, then flushes), and only there.
	mayFail := func(c *transport.Completion) bool {
		return what != closeDCI && c.QPN == dci[0].QPN()
	}
	closed := false
	wrid := uint64(0)
	rig := &closeRig{
		round: func(post bool) (bool, error) {
			if !closed {
				switch what {
				case closeDCI:
					if dci[0].State() == transport.StateClosed {
						closed = true
						st, err := dci[0].Post(0, wqebuilder.Signaled, to[0])
						if err := requireClosed(err, st.Send().Inline([]byte("late")).FinishBlueFlame(), ctx.ErrClosed); err != nil {
							return closed, err
						}
					}
				case closeDCT:
					closed = dct[0].State() == transport.StateClosed
				case closeSRQ:
					if srq[0].Closed() {
						closed = true
						if err := srq[0].PostRecv(0, uint64(mr.Addr()), size, mr.LKey()); !errors.Is(err, ctx.ErrClosed) {
							return closed, fmt.Errorf("a receive post after Close: %v", err)
						}
					}
				}
			}
			for k := range 2 {
				if !post || (k == 0 && closed) {
					continue
				}
				for srq[k].Free() > 0 {
					wrid++
					slot := uint64(k*depth) + wrid%depth
					err := srq[k].PostRecv(wrid, uint64(mr.Addr())+slot*size, size, mr.LKey())
					if k == 0 && errors.Is(err, ctx.ErrClosed) {
						closed = true
						break
					}
					if err != nil {
						return closed, fmt.Errorf("post receive on SRQ %d: %w", k, err)
					}
				}
				for !closed || k == 1 {
					if dci[k].SendQueue().Free() <= dci[k].SendQueue().Config().MaxWQEBBs+2 {
						break
					}
					wrid++
					st, err := dci[k].Post(wrid, wqebuilder.Signaled, to[k])
					if err == nil {
						err = st.Send().Inline([]byte("racing a close")).FinishBlueFlame()
					}
					if k == 0 && errors.Is(err, ctx.ErrClosed) {
						closed = true
						break
					}
					if k == 0 && errors.Is(err, transport.ErrQPError) && what != closeDCI {
						break
					}
					if err != nil {
						return closed, fmt.Errorf("post on DCI %d: %w", k, err)
					}
				}
			}
			var err error
			sp.Poll(16, func(c *transport.Completion) {
				if e := statusCheck("DCI", c); e != nil && err == nil && !mayFail(c) {
					err = e
				}
			})
			rp.Poll(16, func(c *transport.Completion) {
				if e := statusCheck("DCT", c); e != nil && err == nil {
					err = e
				}
			})
			return closed, err
		},
	}
	closedQP, closedPoller, other := &dci[0].Queue, sp, &dci[1].Queue
	switch what {
	case closeDCI:
		rig.close = dci[0].Close
	case closeDCT:
		rig.close = dct[0].Close
		closedQP, closedPoller, other = &dct[0].Queue, rp, &dct[1].Queue
	case closeSRQ:
		rig.close = srq[0].Close
		closedQP, closedPoller, other = &dct[0].Queue, rp, &dct[1].Queue
	}
	rig.gone = func() bool { return closedPoller.Lookup(closedQP.QPN()) == nil }
	rig.check = func(t *testing.T) {
		for _, p := range []*transport.Poller{sp, rp} {
			require.NoError(t, p.Err())
			require.Zero(t, p.Counters().UnknownQPN)
		}
		require.Equal(t, transport.StateClosed, closedQP.State())
		require.Nil(t, closedPoller.Lookup(closedQP.QPN()), "the closed queue pair is still routed")
		require.Equal(t, 1, closedPoller.Len())
		require.Same(t, other, closedPoller.Lookup(other.QPN()))
	}
	return rig
}

// transportCloseRigs are the rigs of TestTransportCloseWhileOwnerRuns, one
// per transport Close.
var transportCloseRigs = []struct {
	name string
	rig  func(t *testing.T) *closeRig
}{
	{"rc.QP.Close", newRCCloseRig},
	{"ud.QP.Close", newUDCloseRig},
	{"dc.DCI.Close", func(t *testing.T) *closeRig { return newDCCloseRig(t, closeDCI) }},
	{"dc.DCT.Close", func(t *testing.T) *closeRig { return newDCCloseRig(t, closeDCT) }},
	{"transport.SharedReceiveQueue.Close", func(t *testing.T) *closeRig { return newDCCloseRig(t, closeSRQ) }},
}

// TestTransportCloseWhileOwnerRuns calls a transport's Close (rc.QP, ud.QP,
// dc.DCI, dc.DCT, an SRQ) on one goroutine while the owner goroutine posts
// on it and on a queue pair beside it and polls their Pollers: the owner's
// posts on the closed object end in ErrClosed; every completion polled,
// those of the closed queue pair that were still in the CQ too, is
// matched to its queue pair (no MatchUnknownQPN, no Poller error); the
// Pollers drop the closed queue pair on the owner's goroutine and still
// route the others; nothing faults. Under -race it also checks that Close
// and the owner's loop share no unsynchronized Go memory.
func TestTransportCloseWhileOwnerRuns(t *testing.T) {
	rounds := 100
	if testing.Short() {
		rounds = 10
	}
	for _, c := range transportCloseRigs {
		t.Run(c.name, func(t *testing.T) {
			for i := range rounds {
				runCloseRig(t, c.rig(t), i)
				if t.Failed() {
					return
				}
			}
		})
	}
}

// runCloseRig runs one rig: the owner's loop on a goroutine of its own,
// the Close on this one once the owner is under way (after a number of
// rounds that varies with i, so the close lands at different points of
// the loop).
func runCloseRig(t *testing.T, r *closeRig, i int) {
	t.Helper()
	type result struct {
		err   error
		fault any
	}
	started := make(chan struct{})
	done := make(chan result, 1)
	go func() {
		var res result
		res.fault = catchFault(func() {
			warm := 20 + 7*i%50
			for n := 0; ; n++ {
				if n == warm {
					close(started)
				}
				closed, err := r.round(true)
				if err != nil {
					res.err = err
					return
				}
				if closed {
					break
				}
				if n > 1_000_000 {
					res.err = errors.New("the close was never seen")
					return
				}
				runtime.Gosched()
			}
			// Keep polling, without posting, until the Pollers dropped
			// the closed queue pair.
			deadline := time.Now().Add(10 * time.Second)
			for !r.gone() {
				if time.Now().After(deadline) {
					res.err = errors.New("the Pollers never dropped the closed queue pair")
					return
				}
				if _, err := r.round(false); err != nil {
					res.err = err
					return
				}
				runtime.Gosched()
			}
		})
		done <- res
	}()
	select {
	case <-started:
	case res := <-done:
		t.Fatalf("round %d: the owner stopped before the close: %+v", i, res)
	case <-time.After(20 * time.Second):
		t.Fatalf("round %d: no progress", i)
	}
	require.NoError(t, r.close())
	var res result
	select {
	case res = <-done:
	case <-time.After(30 * time.Second):
		t.Fatalf("round %d: the owner never stopped", i)
	}
	require.Nil(t, res.fault, "round %d: the owner faulted", i)
	require.NoError(t, res.err, "round %d", i)
	r.check(t)
	require.NoError(t, r.close(), "a second Close")
}

// TestCompletionsOfAClosedQueuePair closes both QPs of an RC pair, from
// another goroutine, while the CQEs of their sends and receives are still
// in the CQs: the owner's Pollers hand every one of them over as the
// device wrote it (MatchOK, the work request's id, the byte count), then
// drop the QPs, and the Pollers report no problem.
func TestCompletionsOfAClosedQueuePair(t *testing.T) {
	const n = 12
	x := newFabric(t, sim.Options{})
	p := newRCPair(t, x, rc.Config{SendDepth: 16, RecvDepth: 16})
	for i := range n {
		require.NoError(t, p.qp[1].PostRecv(uint64(100+i), p.r[1].addr(64*i), 64, p.r[1].lkey()))
		st, err := p.qp[0].Post(uint64(i), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, st.Send().SGE(p.r[0].addr(8*i), 8, p.r[0].lkey()).FinishBlueFlame())
	}
	require.NoError(t, x.f.RunUntilIdle())
	closed := make(chan error)
	go func() { closed <- errors.Join(p.qp[0].Close(), p.qp[1].Close()) }()
	require.NoError(t, <-closed)

	for side := range 2 {
		var got []transport.Completion
		for p.p[side].Poll(5, func(c *transport.Completion) { got = append(got, *c) }) > 0 {
		}
		require.Len(t, got, n, "side %d", side)
		for i, c := range got {
			require.Equal(t, transport.MatchOK, c.Match, "side %d, completion %d", side, i)
			require.NoError(t, c.Err())
			require.Equal(t, p.qp[side].QPN(), c.QPN)
			if side == 0 {
				require.True(t, c.IsSend())
				require.Equal(t, uint64(i), c.WRID)
			} else {
				require.False(t, c.IsSend())
				require.Equal(t, uint64(100+i), c.WRID)
				require.Equal(t, uint32(8), c.ByteCount)
				require.Equal(t, p.r[0].mem[8*i:8*i+8], p.r[1].mem[64*i:64*i+8], "receive %d", i)
			}
		}
		require.NoError(t, p.p[side].Err())
		require.Zero(t, p.p[side].Counters().UnknownQPN)
		require.Nil(t, p.p[side].Lookup(p.qp[side].QPN()), "side %d: the closed QP is still routed", side)
		require.Zero(t, p.p[side].Len())
	}
	_, err := p.qp[0].Post(n, wqebuilder.Signaled)
	require.ErrorIs(t, err, ctx.ErrClosed)
}
