package transport_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// One Poller takes the queue pairs of every transport as they are (not
// their embedded Queue), routes by QPN (a DCT by its number), and refuses
// a nil queue pair, typed or not, with ctx.ErrInvalidArgument.
func TestPollerAddTakesEveryQueuePair(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 64)
	r, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4, RecvDepth: 4})
	require.NoError(t, err)
	u, err := ud.New(e.PD[0], cq, ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 1})
	require.NoError(t, err)
	dci, err := dc.NewDCI(e.PD[0], cq, dc.DCIConfig{SendDepth: 4})
	require.NoError(t, err)
	srq, err := transport.NewSharedReceiveQueue(e.PD[0], ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	dct, err := dc.NewDCT(e.PD[0], cq, dc.DCTConfig{SRQ: srq, Key: 7})
	require.NoError(t, err)

	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	qps := []transport.QueuePair{r, u, dci, dct}
	queues := []*transport.Queue{&r.Queue, &u.Queue, &dci.Queue, &dct.Queue}
	for _, qp := range qps {
		require.NoError(t, p.Add(qp))
	}
	require.Equal(t, len(qps), p.Len())
	for _, q := range queues {
		require.Same(t, q, p.Lookup(q.QPN()))
	}
	require.Same(t, &dct.Queue, p.Lookup(dct.QPN()))

	for _, bad := range []transport.QueuePair{nil, (*rc.QP)(nil), (*ud.QP)(nil), (*dc.DCI)(nil), (*dc.DCT)(nil), (*transport.Queue)(nil)} {
		require.ErrorIs(t, p.Add(bad), ctx.ErrInvalidArgument, "%T", bad)
		require.ErrorIs(t, p.Remove(bad), ctx.ErrInvalidArgument, "%T", bad)
	}
	require.Equal(t, len(qps), p.Len(), "a refused Add changes nothing")

	require.NoError(t, p.Remove(u))
	require.Nil(t, p.Lookup(u.QPN()))
	require.ErrorIs(t, p.Remove(u), monocq.ErrUnknownQPN)
	require.Equal(t, len(qps)-1, p.Len())
}

// TestPollerOnePerCQ: a second NewPoller for a completion queue that has
// a Poller is refused with ctx.ErrInvalidArgument: two consumer indexes
// over one ring lose or duplicate completions. Before, it succeeded.
// Another CQ gets its Poller, and the first still polls.
func TestPollerOnePerCQ(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq, other := e.CQ(0, 16), e.CQ(0, 16)
	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	second, err := transport.NewPoller(cq)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	require.ErrorContains(t, err, "has a Poller already")
	require.Nil(t, second)
	_, err = transport.NewPoller(other)
	require.NoError(t, err)

	q, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4, RecvDepth: 4})
	require.NoError(t, err)
	require.NoError(t, p.Add(q))
	require.NoError(t, q.Connect(q.Endpoint()))
	s, err := q.Post(7, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.Nop().FinishBlueFlame())
	e.Run()
	var got []uint64
	require.Equal(t, 1, p.Poll(4, func(c *transport.Completion) { got = append(got, c.WRID) }))
	require.Equal(t, []uint64{7}, got)

	require.NoError(t, cq.Close())
	_, err = transport.NewPoller(cq)
	require.ErrorIs(t, err, ctx.ErrClosed)
}

// TestPollerAddRefusesOtherCQ: Add refuses, with ctx.ErrInvalidArgument, a
// queue pair whose send and receive CQs are both another than the
// Poller's; before, it returned nil and the completions never came.
func TestPollerAddRefusesOtherCQ(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cqA, cqB := e.CQ(0, 16), e.CQ(0, 16)
	pB, err := transport.NewPoller(cqB)
	require.NoError(t, err)
	r, err := rc.New(e.PD[0], cqA, rc.Config{SendDepth: 4, RecvDepth: 4})
	require.NoError(t, err)
	u, err := ud.New(e.PD[0], cqA, ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 1})
	require.NoError(t, err)
	dci, err := dc.NewDCI(e.PD[0], cqA, dc.DCIConfig{SendDepth: 4})
	require.NoError(t, err)
	for _, qp := range []transport.QueuePair{r, u, dci} {
		err := pB.Add(qp)
		require.ErrorIs(t, err, ctx.ErrInvalidArgument, "%T", qp)
		require.ErrorContains(t, err, "the poller polls CQ")
	}
	require.Zero(t, pB.Len())
	// A queue pair whose receives alone complete on cqB is added.
	split, err := rc.New(e.PD[0], cqA, rc.Config{SendDepth: 4, RecvDepth: 4, RecvCQ: cqB})
	require.NoError(t, err)
	require.NoError(t, pB.Add(split))
}

// Config.RecvCQ of rc and ud puts the receive completions on a CQ of their
// own; without it they arrive with the send completions on the CQ given to
// New.
func TestRecvCQConfig(t *testing.T) {
	for _, separate := range []bool{false, true} {
		t.Run(map[bool]string{false: "one CQ", true: "RecvCQ"}[separate], func(t *testing.T) {
			e := transporttest.New(t, sim.Options{})
			scq, rcq := e.CQ(1, 16), e.CQ(1, 16)
			sendP, err := transport.NewPoller(scq)
			require.NoError(t, err)
			recvP, err := transport.NewPoller(rcq)
			require.NoError(t, err)
			bcfg := rc.Config{SendDepth: 4, RecvDepth: 4}
			ucfg := ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 9}
			if separate {
				bcfg.RecvCQ, ucfg.RecvCQ = rcq, rcq
			}
			a, err := rc.New(e.PD[0], e.CQ(0, 16), rc.Config{SendDepth: 4, MaxInline: 16})
			require.NoError(t, err)
			b, err := rc.New(e.PD[1], scq, bcfg)
			require.NoError(t, err)
			require.NoError(t, a.Connect(b.Endpoint()))
			require.NoError(t, b.Connect(a.Endpoint()))
			us, err := ud.New(e.PD[0], e.CQ(0, 16), ud.Config{SendDepth: 4, MaxInline: 16, QKey: 9})
			require.NoError(t, err)
			ur, err := ud.New(e.PD[1], scq, ucfg)
			require.NoError(t, err)
			remote, err := us.NewRemote(ur.Endpoint())
			require.NoError(t, err)
			t.Cleanup(func() { _ = remote.Close() })
			for _, q := range []transport.QueuePair{b, ur} {
				require.NoError(t, sendP.Add(q))
				if separate {
					require.NoError(t, recvP.Add(q))
				} else {
					require.ErrorIs(t, recvP.Add(q), ctx.ErrInvalidArgument, "none of its completions arrive on rcq")
				}
			}
			require.NoError(t, b.PostRecv(1, e.Addr(1, 0), 64, e.LKey(1)))
			require.NoError(t, ur.PostRecv(2, e.Addr(1, 4096), 64+ud.GRHSize, e.LKey(1)))
			s, err := a.Post(10, 0)
			require.NoError(t, err)
			require.NoError(t, s.Send().Inline([]byte("rc")).FinishBlueFlame())
			d, err := us.Post(11, 0, remote)
			require.NoError(t, err)
			require.NoError(t, d.Send().Inline([]byte("ud")).FinishBlueFlame())
			e.Run()

			var onSend, onRecv []uint64
			sendP.Poll(8, func(c *transport.Completion) { onSend = append(onSend, c.WRID) })
			recvP.Poll(8, func(c *transport.Completion) { onRecv = append(onRecv, c.WRID) })
			slices.Sort(onSend)
			slices.Sort(onRecv)
			if separate {
				require.Empty(t, onSend)
				require.Equal(t, []uint64{1, 2}, onRecv)
			} else {
				require.Equal(t, []uint64{1, 2}, onSend)
				require.Empty(t, onRecv)
			}
		})
	}
}

// Handle, Limits, Fail and Close are the same on every transport: Fail
// moves the queue pair to StateError and its posts are refused with
// ErrQPError; Close is idempotent and leaves StateClosed.
func TestSharedQueuePairMethods(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 64)
	r, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4, RecvDepth: 4})
	require.NoError(t, err)
	u, err := ud.New(e.PD[0], cq, ud.Config{SendDepth: 4, RecvDepth: 4, QKey: 1})
	require.NoError(t, err)
	dci, err := dc.NewDCI(e.PD[0], cq, dc.DCIConfig{SendDepth: 4})
	require.NoError(t, err)
	for _, q := range []struct {
		name string
		q    *transport.Queue
		post func() error
	}{
		{"rc", &r.Queue, func() error { _, err := r.Post(1, wqebuilder.Signaled); return err }},
		{"ud", &u.Queue, func() error { return u.PostRecv(1, e.Addr(0, 0), 64, e.LKey(0)) }},
		{"dc", &dci.Queue, nil},
	} {
		t.Run(q.name, func(t *testing.T) {
			require.Equal(t, q.q.QPN(), q.q.Handle().QPN())
			l := q.q.Limits()
			require.GreaterOrEqual(t, l.SendWQEBBs, uint32(4))
			require.NotZero(t, l.MaxWQEBBs)
			require.NoError(t, q.q.Fail())
			require.Equal(t, transport.StateError, q.q.State())
			st, err := q.q.Handle().State()
			require.NoError(t, err)
			require.Equal(t, ctx.QPStateError, st)
			if q.post != nil {
				require.ErrorIs(t, q.post(), transport.ErrQPError)
			}
			require.NoError(t, q.q.Close())
			require.NoError(t, q.q.Close(), "Close is idempotent")
			require.Equal(t, transport.StateClosed, q.q.State())
			require.ErrorIs(t, q.q.Fail(), ctx.ErrClosed)
			require.True(t, strings.HasPrefix(q.q.Fail().Error(), q.name+": move"), "%v", q.q.Fail())
		})
	}
}

// A DCT has no error state: Fail refuses it with ErrTransport before
// asking the provider, and the DCT keeps receiving (stays RTR).
func TestDCTFailIsRefused(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	srq, err := transport.NewSharedReceiveQueue(e.PD[0], ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	dct, err := dc.NewDCT(e.PD[0], e.CQ(0, 16), dc.DCTConfig{SRQ: srq, Key: 7})
	require.NoError(t, err)
	err = dct.Fail()
	require.ErrorIs(t, err, transport.ErrTransport)
	require.Contains(t, err.Error(), "dc: move DCT to error")
	st, err := dct.Handle().State()
	require.NoError(t, err)
	require.Equal(t, ctx.QPStateRTR, st)
	require.Equal(t, transport.StateReady, dct.State())
}

// Packages rc, dc and ud export only what is theirs: no second name for a
// type, constant, variable or function of package transport.
func TestTransportsExportOnlyTheirOwn(t *testing.T) {
	shared := exported(t, ".")
	require.Contains(t, shared, "Poller")
	require.Contains(t, shared, "Completion")
	for _, pkg := range []string{"rc", "dc", "ud"} {
		for _, n := range exported(t, filepath.Join("..", pkg)) {
			require.NotContains(t, shared, n, "%s.%s names transport.%s again", pkg, n, n)
		}
	}
}

// exported returns the exported top-level names of the package in dir
// (test files excluded).
func exported(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	require.NoError(t, err)
	var names []string
	fset := token.NewFileSet()
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, parser.SkipObjectResolution)
		require.NoError(t, err)
		for _, d := range file.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil && d.Name.IsExported() {
					names = append(names, d.Name.Name)
				}
			case *ast.GenDecl:
				for _, s := range d.Specs {
					switch s := s.(type) {
					case *ast.TypeSpec:
						if s.Name.IsExported() {
							names = append(names, s.Name.Name)
						}
					case *ast.ValueSpec:
						for _, n := range s.Names {
							if n.IsExported() {
								names = append(names, n.Name)
							}
						}
					}
				}
			}
		}
	}
	require.NotEmpty(t, names, dir)
	return names
}

// A nil function takes nothing: Poll returns 0 and the completions stay
// for the next Poll, which hands them over.
func TestPollerNilFunctionTakesNothing(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 16)
	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	a, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4, MaxInline: 16})
	require.NoError(t, err)
	b, err := rc.New(e.PD[1], e.CQ(1, 16), rc.Config{SendDepth: 4, RecvDepth: 4})
	require.NoError(t, err)
	require.NoError(t, a.Connect(b.Endpoint()))
	require.NoError(t, b.Connect(a.Endpoint()))
	require.NoError(t, p.Add(a))
	for i := range 2 {
		s, err := a.Post(uint64(20+i), wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.RdmaWrite(e.Addr(1, 0), e.RKey(1)).Inline([]byte("x")).FinishBlueFlame())
	}
	e.Run()
	var nilFn func(*transport.Completion)
	require.Zero(t, p.Poll(8, nilFn))
	require.Zero(t, p.Poll(1, nilFn))
	var got []uint64
	require.Equal(t, 2, p.Poll(8, func(c *transport.Completion) { got = append(got, c.WRID) }))
	require.Equal(t, []uint64{20, 21}, got)
	require.NoError(t, p.Err())
}

// TestPollerCloseGivesTheCQBack: Close drops the Poller's queue pairs and
// gives its completion queue back; the next NewPoller for it (refused
// while the first was open) goes on from the first's consumer index, so
// that each completion is handed over once. A closed Poller polls nothing,
// refuses Add and says ErrClosed; Close inside Poll is refused with
// ErrBusy; a second Close does nothing. Before, a Poller could not be
// closed, and its CQ never got another.
func TestPollerCloseGivesTheCQBack(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 16)
	q, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 8, RecvDepth: 4})
	require.NoError(t, err)
	require.NoError(t, q.Connect(q.Endpoint()))
	post := func(ids ...uint64) {
		for _, id := range ids {
			s, err := q.Post(id, wqebuilder.Signaled)
			require.NoError(t, err)
			require.NoError(t, s.Nop().FinishBlueFlame())
		}
		e.Run()
	}
	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	require.NoError(t, p.Add(q))
	post(1, 2, 3)
	var got []uint64
	take := func(c *transport.Completion) { got = append(got, c.WRID) }
	require.Equal(t, 1, p.Poll(1, take))
	require.Equal(t, []uint64{1}, got)

	// Close inside Poll is refused, and changes nothing.
	var inside error
	require.Equal(t, 1, p.Poll(1, func(c *transport.Completion) {
		take(c)
		inside = p.Close()
	}))
	require.ErrorIs(t, inside, ctx.ErrBusy)
	require.Equal(t, []uint64{1, 2}, got)
	_, err = transport.NewPoller(cq)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument, "the Poller is still open")

	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "a second Close does nothing")
	require.Zero(t, p.Len())
	require.Zero(t, p.Poll(4, take), "a closed Poller polls nothing")
	require.ErrorIs(t, p.Err(), ctx.ErrClosed)
	require.ErrorIs(t, p.Add(q), ctx.ErrClosed)

	p2, err := transport.NewPoller(cq)
	require.NoError(t, err, "the CQ was given back")
	require.NoError(t, p2.Add(q))
	post(4)
	got = nil
	for p2.Poll(4, take) > 0 {
	}
	require.Equal(t, []uint64{3, 4}, got, "the second Poller goes on where the first stopped")
	require.NoError(t, p2.Err())
	_, err = transport.NewPoller(cq)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument, "one Poller at a time")

	require.NoError(t, p2.Close())
	require.NoError(t, q.Close())
	require.NoError(t, cq.Close())
	_, err = transport.NewPoller(cq)
	require.ErrorIs(t, err, ctx.ErrClosed)
}

// TestZeroPoller: a Poller not made by NewPoller polls nothing, holds no
// queue pair, refuses Add with ctx.ErrInvalidArgument, says so in Err, and
// closes without error; Poll, Len, Lookup, Err and Close panicked.
func TestZeroPoller(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	q, err := rc.New(e.PD[0], e.CQ(0, 16), rc.Config{SendDepth: 4, RecvDepth: 4})
	require.NoError(t, err)
	var p transport.Poller
	require.NotPanics(t, func() {
		require.Zero(t, p.Poll(4, func(*transport.Completion) { t.Fatal("a completion from a zero Poller") }))
		require.Zero(t, p.Len())
		require.Nil(t, p.Lookup(q.QPN()))
		require.ErrorIs(t, p.Add(q), ctx.ErrInvalidArgument)
		require.ErrorIs(t, p.Err(), ctx.ErrInvalidArgument)
		require.ErrorIs(t, p.Remove(q), monocq.ErrUnknownQPN)
		require.NoError(t, p.Close())
	})
}

// TestZeroQueue: a Queue not made by a constructor (the zero rc.QP, ud.QP,
// dc.DCI and dc.DCT embed one) is closed, has zero Limits, refuses Fail
// and WatchEvents with ctx.ErrInvalidArgument, and closes without error;
// State, Limits, Fail and WatchEvents panicked.
func TestZeroQueue(t *testing.T) {
	for _, q := range []*transport.Queue{new(transport.Queue), &new(rc.QP).Queue, &new(ud.QP).Queue, &new(dc.DCT).Queue} {
		require.NotPanics(t, func() {
			require.Equal(t, transport.StateClosed, q.State())
			require.Zero(t, q.Limits())
			require.ErrorIs(t, q.Fail(), ctx.ErrInvalidArgument)
			_, err := q.WatchEvents(func(ctx.AsyncEvent) {})
			require.ErrorIs(t, err, ctx.ErrInvalidArgument)
			require.NoError(t, q.Close())
		})
	}
}

// TestNewCQIsTheCQsOneRing: NewCQ returns one ring poller per completion
// queue, the one its Poller polls, so that a CQE taken through either is
// not taken again through the other; before, each call made a poller with
// a consumer index of its own at 0.
func TestNewCQIsTheCQsOneRing(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 16)
	r1, err := transport.NewCQ(cq)
	require.NoError(t, err)
	r2, err := transport.NewCQ(cq)
	require.NoError(t, err)
	require.Same(t, r1, r2)
	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	require.Same(t, r1, p.CQ())

	q, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4, RecvDepth: 4})
	require.NoError(t, err)
	require.NoError(t, p.Add(q))
	require.NoError(t, q.Connect(q.Endpoint()))
	for id := uint64(1); id <= 2; id++ {
		s, err := q.Post(id, wqebuilder.Signaled)
		require.NoError(t, err)
		require.NoError(t, s.Nop().FinishBlueFlame())
	}
	e.Run()
	var counters []uint16
	require.Equal(t, 1, r2.Poll(1, func(c *monocq.CQE) { counters = append(counters, c.WQECounter()) }))
	var got []uint64
	for p.Poll(4, func(c *transport.Completion) { got = append(got, c.WRID) }) > 0 {
	}
	require.Equal(t, []uint64{2}, got, "the Poller goes on after the CQE taken through NewCQ's ring")
	require.Len(t, counters, 1)

	require.NoError(t, q.Close())
	require.NoError(t, cq.Close())
	_, err = transport.NewCQ(cq)
	require.ErrorIs(t, err, ctx.ErrClosed)
	_, err = transport.NewCQ(nil)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}

// TestPollerOfClosedCQPollsNothing: once its completion queue is closed, a
// Poller hands over nothing, not even the CQEs left in the ring, and Err
// says ErrClosed; the close flags the Poller (the claim's hook), so that
// Poll looks at one flag of its own, not at the CQ.
func TestPollerOfClosedCQPollsNothing(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 16)
	p, err := transport.NewPoller(cq)
	require.NoError(t, err)
	q, err := rc.New(e.PD[0], cq, rc.Config{SendDepth: 4, RecvDepth: 4}) // not added: closing it flags nothing
	require.NoError(t, err)
	require.NoError(t, q.Connect(q.Endpoint()))
	s, err := q.Post(1, wqebuilder.Signaled)
	require.NoError(t, err)
	require.NoError(t, s.Nop().FinishBlueFlame())
	e.Run()
	require.Equal(t, 1, p.CQ().Ready(1), "a CQE in the ring")
	require.NoError(t, q.Close())
	require.NoError(t, cq.Close())
	require.Zero(t, p.Poll(4, func(*transport.Completion) { t.Fatal("a completion from a closed CQ") }))
	require.ErrorIs(t, p.Err(), ctx.ErrClosed)
}
