package dc_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

func byWRID(t *testing.T, cs []transport.Completion) map[uint64]transport.Completion {
	t.Helper()
	m := map[uint64]transport.Completion{}
	for _, c := range cs {
		_, dup := m[c.WRID]
		require.False(t, dup, "work request %d completed twice", c.WRID)
		m[c.WRID] = c
	}
	return m
}

func requireSyndrome(t *testing.T, c transport.Completion, s prm.Syndrome) {
	t.Helper()
	require.Equal(t, transport.MatchError, c.Match, "%+v", c)
	require.Equal(t, s, c.Syndrome, "syndrome %v", c.Syndrome)
	require.ErrorIs(t, c.Err(), monocq.ErrCompletion)
	require.ErrorIs(t, c.Err(), monocq.StatusOf(s).Sentinel())
	if s != prm.SyndromeWRFlush {
		require.NotErrorIs(t, c.Err(), monocq.ErrFlushed)
	}
	var cerr *monocq.CompletionError
	require.ErrorAs(t, c.Err(), &cerr)
	require.Equal(t, c.WRID, cerr.WRID)
}

// failThenFlush posts a good signaled write, then bad, then five more
// writes, and checks: the first succeeds, bad fails with want, the rest
// flush exactly once, and the DCI refuses further posts.
func failThenFlush(t *testing.T, f *fixture, want prm.Syndrome, bad func(s wqebuilder.OpStage) error) {
	t.Helper()
	e := f.e
	write := func(wrid uint64, flags wqebuilder.Flags) {
		s, err := f.dci.Post(wrid, flags, f.remotes[0])
		require.NoError(t, err)
		require.NoError(t, s.RdmaWrite(e.Addr(1, 0), e.RKey(1)).Inline([]byte("ok")).Finish())
	}
	write(1, wqebuilder.Signaled)
	s, err := f.dci.Post(2, wqebuilder.Signaled, f.remotes[len(f.remotes)-1])
	require.NoError(t, err)
	require.NoError(t, bad(s))
	for w := uint64(3); w < 8; w++ {
		write(w, wqebuilder.Flags(w%2)*wqebuilder.Signaled)
	}
	f.dci.RingDoorbell()
	got := byWRID(t, e.Drain(f.sp))
	require.Equal(t, transport.MatchOK, got[1].Match)
	requireSyndrome(t, got[2], want)
	for w := uint64(3); w < 8; w++ {
		requireSyndrome(t, got[w], prm.SyndromeWRFlush)
	}
	require.Len(t, got, 7)
	require.Equal(t, transport.StateError, f.dci.State())
	_, err = f.dci.Post(9, wqebuilder.Signaled, f.remotes[0])
	require.ErrorIs(t, err, transport.ErrQPError)
}

// targetsStillServe checks that the DCTs work for a new DCI.
func targetsStillServe(t *testing.T, f *fixture) {
	t.Helper()
	e := f.e
	dci, err := dc.NewDCI(e.PD[0], f.scq, dc.DCIConfig{SendDepth: 8, MaxInline: 32})
	require.NoError(t, err)
	require.NoError(t, f.sp.Add(dci))
	for i, dct := range f.dcts {
		require.Equal(t, transport.StateReady, dct.State())
		r, err := dci.NewRemote(dct.Endpoint())
		require.NoError(t, err)
		require.NoError(t, f.srq.PostRecv(uint64(700+i), e.Addr(1, 64*i), 64, e.LKey(1)))
		s, err := dci.Post(uint64(i), wqebuilder.Signaled, r)
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte("still here")).FinishBlueFlame())
		require.Equal(t, transport.MatchOK, e.One(f.sp).Match)
		c := e.One(f.rp)
		require.Equal(t, transport.MatchOK, c.Match)
		require.Equal(t, dct.QPN(), c.QPN)
		require.NoError(t, r.Close())
	}
}

func TestWrongDCKey(t *testing.T) {
	f := newFixture(t, dc.DCIConfig{SendDepth: 16, MaxInline: 32}, 2)
	ep := f.dcts[1].Endpoint()
	ep.DCAccessKey ^= 0xffff
	bad, err := f.dci.NewRemote(ep)
	require.NoError(t, err)
	f.remotes[1] = bad
	failThenFlush(t, f, prm.SyndromeRemoteAccess, func(s wqebuilder.OpStage) error {
		return s.Send().Inline([]byte("let me in")).Finish()
	})
	require.Empty(t, f.e.Drain(f.rp), "the DCT saw nothing")
	targetsStillServe(t, f)
}

func TestRemoteAccessThroughDC(t *testing.T) {
	f := newFixture(t, dc.DCIConfig{SendDepth: 16, MaxInline: 32}, 2)
	failThenFlush(t, f, prm.SyndromeRemoteAccess, func(s wqebuilder.OpStage) error {
		return s.RdmaWrite(f.e.Addr(1, 0), f.e.RKey(1)^0x7700).Inline([]byte("x")).Finish()
	})
	targetsStillServe(t, f)
}

func TestLocalProtectionThroughDC(t *testing.T) {
	f := newFixture(t, dc.DCIConfig{SendDepth: 16, MaxInline: 32}, 1)
	failThenFlush(t, f, prm.SyndromeLocalProt, func(s wqebuilder.OpStage) error {
		return s.RdmaRead(f.e.Addr(1, 0), f.e.RKey(1)).SGE(f.e.Addr(0, 0), 8, f.e.LKey(0)^0x1100).Finish()
	})
}

func TestRNRRetryExceededOnEmptySRQ(t *testing.T) {
	f := newFixture(t, dc.DCIConfig{SendDepth: 16, MaxInline: 32, RNRRetry: 2}, 1)
	failThenFlush(t, f, prm.SyndromeRNRRetryExc, func(s wqebuilder.OpStage) error {
		return s.Send().Inline([]byte("nobody listens")).Finish()
	})
	require.Equal(t, uint64(2), f.e.Fabric.Stats().RNRNaks)
	targetsStillServe(t, f)
}

func TestUnknownDCT(t *testing.T) {
	f := newFixture(t, dc.DCIConfig{SendDepth: 16, MaxInline: 32, Timeout: 1, RetryCount: 1}, 2)
	ep := f.dcts[1].Endpoint()
	require.NoError(t, f.dcts[1].Close())
	require.NoError(t, f.dcts[1].Close())
	gone, err := f.dci.NewRemote(ep)
	require.NoError(t, err)
	f.remotes[1] = gone
	failThenFlush(t, f, prm.SyndromeTransportRetryExc, func(s wqebuilder.OpStage) error {
		return s.Send().Inline([]byte("hello?")).Finish()
	})
}

func TestFailFlushes(t *testing.T) {
	f := newFixture(t, dc.DCIConfig{SendDepth: 32, MaxInline: 32, RNRRetry: 7}, 1)
	e := f.e
	for w := uint64(1); w <= 10; w++ {
		s, err := f.dci.Post(w, wqebuilder.Signaled, f.remotes[0])
		require.NoError(t, err)
		require.NoError(t, s.Send().Inline([]byte("waits on RNR")).Finish())
	}
	f.dci.RingDoorbell()
	_, err := e.Fabric.Step()
	require.NoError(t, err)
	require.NoError(t, f.dci.Fail())
	got := byWRID(t, e.Drain(f.sp))
	require.Len(t, got, 10)
	for _, c := range got {
		require.True(t, c.IsFlush())
	}
}

func TestDCMisuse(t *testing.T) {
	e := transporttest.New(t, sim.Options{})
	cq := e.CQ(0, 16)
	srq, err := transport.NewSharedReceiveQueue(e.PD[0], ctx.SRQConfig{Depth: 4})
	require.NoError(t, err)
	for _, c := range []struct {
		name string
		err  error
	}{
		{"DCI send depth 0", func() error { _, err := dc.NewDCI(e.PD[0], cq, dc.DCIConfig{}); return err }()},
		{"DCI nil CQ", func() error { _, err := dc.NewDCI(e.PD[0], nil, dc.DCIConfig{SendDepth: 1}); return err }()},
		{"DCI nil PD", func() error { _, err := dc.NewDCI(nil, cq, dc.DCIConfig{SendDepth: 1}); return err }()},
		{"DCI inline too large", func() error {
			_, err := dc.NewDCI(e.PD[0], cq, dc.DCIConfig{SendDepth: 1, MaxInline: 1 << 20})
			return err
		}()},
		{"DCI RNR retry 9", func() error { _, err := dc.NewDCI(e.PD[0], cq, dc.DCIConfig{SendDepth: 1, RNRRetry: 9}); return err }()},
		{"DCT without SRQ", func() error { _, err := dc.NewDCT(e.PD[0], cq, dc.DCTConfig{}); return err }()},
		{"DCT nil CQ", func() error { _, err := dc.NewDCT(e.PD[0], nil, dc.DCTConfig{SRQ: srq}); return err }()},
		{"DCT bad access", func() error {
			_, err := dc.NewDCT(e.PD[0], cq, dc.DCTConfig{SRQ: srq, RemoteAccess: 1 << 7})
			return err
		}()},
		{"SRQ depth 0", func() error { _, err := transport.NewSharedReceiveQueue(e.PD[0], ctx.SRQConfig{}); return err }()},
	} {
		require.Error(t, c.err, c.name)
		require.ErrorIs(t, c.err, ctx.ErrInvalidArgument, c.name)
	}

	dci, err := dc.NewDCI(e.PD[0], cq, dc.DCIConfig{SendDepth: 4})
	require.NoError(t, err)
	dct, err := dc.NewDCT(e.PD[0], cq, dc.DCTConfig{SRQ: srq, Key: 5})
	require.NoError(t, err)
	ep := dct.Endpoint()
	require.Equal(t, endpoint.TransportDC, ep.Transport)
	require.Equal(t, dct.QPN(), ep.DCTNumber)
	require.Equal(t, uint64(5), ep.DCAccessKey)
	require.NoError(t, ep.Validate())
	rcEP := ep
	rcEP.Transport, rcEP.DCTNumber, rcEP.DCAccessKey = endpoint.TransportRC, 0, 0
	_, err = dci.NewRemote(rcEP)
	require.ErrorIs(t, err, transport.ErrTransport)
	_, err = dci.NewRemote(endpoint.Endpoint{})
	require.Error(t, err)
	r, err := dci.NewRemote(ep)
	require.NoError(t, err)
	require.Equal(t, dct.QPN(), r.DCTNumber())
	require.Equal(t, uint64(5), r.Key())

	// A DCT receives only through its SRQ.
	require.ErrorIs(t, dct.PostRecv(1, 0, 0, 0), transport.ErrNoReceiveQueue)
	require.ErrorIs(t, dci.PostRecv(1, 0, 0, 0), transport.ErrNoReceiveQueue)

	require.NoError(t, dci.Close())
	require.NoError(t, dci.Close())
	s, err := dci.Post(1, wqebuilder.Signaled, r)
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.Error(t, s.Send().Inline([]byte("x")).Finish(), "the refused stage writes nothing")

	// Closing the SRQ closes the DCT attached to it.
	require.NoError(t, srq.Close())
	require.Equal(t, transport.StateClosed, dct.State())
	require.ErrorIs(t, srq.PostRecv(1, e.Addr(0, 0), 8, e.LKey(0)), ctx.ErrClosed)
	_, err = dc.NewDCT(e.PD[0], cq, dc.DCTConfig{SRQ: srq})
	require.ErrorIs(t, err, ctx.ErrClosed)
	require.NoError(t, r.Close())
	require.NoError(t, r.Close())
}

func TestDCAllocatesNothing(t *testing.T) {
	f := newFixture(t, dc.DCIConfig{SendDepth: 256, MaxInline: 32}, 3)
	e := f.e
	const runs = 50 // the SRQ holds 63
	k := 0
	allocs := testing.AllocsPerRun(runs, func() {
		k++
		if err := f.srq.BeginRecv(uint64(k)).SGE(e.Addr(1, 64*k), 64, e.LKey(1)).FinishDoorbell(); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs, "SRQ post")
	i := 0
	allocs = testing.AllocsPerRun(runs, func() {
		i++
		s, _ := f.dci.Post(uint64(i), wqebuilder.Signaled, f.remotes[i%3])
		if err := s.SendImm(uint32(i)).Inline([]byte("abc")).FinishBlueFlame(); err != nil {
			panic(err)
		}
	})
	require.Zero(t, allocs, "DCI post")
	e.Run()
	n := 0
	for _, p := range []*transport.Poller{f.sp, f.rp} {
		allocs = testing.AllocsPerRun(runs, func() {
			n += p.Poll(1, func(c *transport.Completion) {
				if c.Match != transport.MatchOK {
					panic(c.Err())
				}
			})
		})
		require.Zero(t, allocs, "poll")
	}
	require.Equal(t, 2*(runs+1), n)
	require.Zero(t, f.srq.Outstanding())
}

// TestDCTOutlivesReceiveError sends a DCT more than its SRQ's receive
// holds: the initiator's WQE fails with REMOTE_INVAL_REQ and the DCT's
// receive with a RESP_ERR (LOC_LEN_ERR), after which the DCT, unlike an RC
// QP, stays ready and serves the next initiator.
func TestDCTOutlivesReceiveError(t *testing.T) {
	f := newFixture(t, dc.DCIConfig{SendDepth: 16, MaxInline: 64}, 1)
	e := f.e
	require.NoError(t, f.srq.PostRecv(1, e.Addr(1, 0), 4, e.LKey(1)))
	s, err := f.dci.Post(1, wqebuilder.Signaled, f.remotes[0])
	require.NoError(t, err)
	require.NoError(t, s.Send().Inline([]byte("more than four bytes")).FinishBlueFlame())
	requireSyndrome(t, e.One(f.sp), prm.SyndromeRemoteInvalReq)
	c := e.One(f.rp)
	require.Equal(t, prm.CQERespErr, c.Opcode)
	requireSyndrome(t, c, prm.SyndromeLocalLength)
	require.Equal(t, uint64(1), c.WRID)
	require.Equal(t, f.dcts[0].QPN(), c.QPN)
	require.Equal(t, transport.StateReady, f.dcts[0].State(), "a DCT outlives a bad request")
	require.Zero(t, f.srq.Outstanding())
	targetsStillServe(t, f)
}
