package sim

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// waitCQE polls until one CQE arrives or the deadline passes.
func waitCQE(t testing.TB, c *testCQ, d time.Duration) cqe {
	t.Helper()
	end := time.Now().Add(d)
	for time.Now().Before(end) {
		if x, ok := c.poll(); ok {
			return x
		}
		runtime.Gosched()
	}
	t.Fatalf("no CQE on CQN %#x within %v", c.d.CQN, d)
	return cqe{}
}

func TestEnginePingPong(t *testing.T) {
	e := newEnv(t, Options{Mode: Engine})
	a, b := e.rcPair(qpOpts{sendDepth: 64, recvDepth: 64})
	const rounds = 2000
	var wg sync.WaitGroup
	// Each side: post a receive, send write-with-immediate carrying the
	// round number, wait for the peer's.
	side := func(me, peer *testQP, remote func(int) uint64, rkey uint32, first bool) {
		defer wg.Done()
		for i := 0; i < 32; i++ {
			me.postRecv()
		}
		posted := 32
		for r := 0; r < rounds; r++ {
			if !first || r > 0 {
				c := waitCQE(t, me.rcq, 10*time.Second)
				if c.op != prm.CQERespWrImm || c.imm != uint32(r) {
					t.Errorf("round %d: %+v", r, c)
					return
				}
				me.postRecv()
				posted++
			}
			me.post(prm.OpRdmaWriteImm, 0, prm.FlagCQUpdate, uint32(r)+boolU32(first), raddrSeg(remote(r%64), rkey), inlineSeg([]byte{byte(r)}))
			c := waitCQE(t, me.scq, 10*time.Second)
			if c.op != prm.CQEReq {
				t.Errorf("round %d send: %+v", r, c)
				return
			}
		}
		if !first {
			return
		}
		c := waitCQE(t, me.rcq, 10*time.Second)
		if c.imm != rounds {
			t.Errorf("last: %+v", c)
		}
	}
	wg.Add(2)
	go side(a, b, e.addr2, e.mr2.RKey(), true)
	go side(b, a, e.addr, e.mr.RKey(), false)
	wg.Wait()
	st := e.f.Stats()
	require.GreaterOrEqual(t, st.WQEs, uint64(2*rounds))
}

func boolU32(b bool) uint32 {
	if b {
		return 0
	}
	return 1
}

func TestEngineIdlesAndStops(t *testing.T) {
	before := runtime.NumGoroutine()
	f := New(Options{Mode: Engine, IdleSleep: 2 * time.Millisecond})
	c, err := f.Open("")
	require.NoError(t, err)
	time.Sleep(50 * time.Millisecond)
	s1, t1 := f.Stats(), time.Now()
	// At least 100 ms, and until the engine has slept again: on a loaded
	// machine its goroutine may not run for a while.
	time.Sleep(100 * time.Millisecond)
	s2 := f.Stats()
	for end := time.Now().Add(10 * time.Second); s2.EngineSleeps == s1.EngineSleeps && time.Now().Before(end); s2 = f.Stats() {
		time.Sleep(10 * time.Millisecond)
	}
	elapsed := time.Since(t1)
	require.Greater(t, s2.EngineSleeps, s1.EngineSleeps, "an idle engine sleeps")
	// With a 2 ms cap, 100 ms of idling is at most a few hundred rounds
	// (spins happen only after work): fewer than 20 a millisecond.
	require.Less(t, s2.StepsExecuted-s1.StepsExecuted, uint64(20*elapsed.Milliseconds()))
	_, err = f.Step()
	require.ErrorIs(t, err, ErrWrongMode)
	require.ErrorIs(t, f.RunUntilIdle(), ErrWrongMode)
	require.NoError(t, c.Close())
	require.NoError(t, f.Close())
	for i := 0; i < 1000 && runtime.NumGoroutine() > before; i++ {
		time.Sleep(time.Millisecond)
	}
	require.LessOrEqual(t, runtime.NumGoroutine(), before, "the engine goroutine is gone")
}

func TestDefaultProvider(t *testing.T) {
	t.Setenv(ctx.EnvProvider, ctx.ProviderSoftware)
	c, err := ctx.Open(ctx.Options{})
	require.NoError(t, err)
	defer c.Close()
	require.Equal(t, ctx.KindSoftware, c.Kind())
	require.Equal(t, "sim", c.Provider())
	require.Equal(t, "sim0", c.DeviceName())
	require.Same(t, Default(), FromContext(c))
	c2, err := ctx.Open(ctx.Options{Provider: "sim", Device: "sim1"})
	require.NoError(t, err)
	require.Equal(t, "sim1", c2.DeviceName())
	require.NoError(t, c2.Close())
	_, err = ctx.Open(ctx.Options{Provider: "sim", Device: "nope"})
	require.ErrorIs(t, err, ctx.ErrNotFound)
	_, err = ctx.Open(ctx.Options{Provider: "mlx5-absent"})
	require.ErrorIs(t, err, ctx.ErrNotFound)
}

func TestQueryDevice(t *testing.T) {
	e := newEnv(t, Options{})
	a, err := e.c.Query()
	require.NoError(t, err)
	require.True(t, a.DC)
	require.Equal(t, uint32(256), a.BlueFlameSize)
	require.Greater(t, a.MaxInline, uint32(256))
	require.Equal(t, ctx.SupportYes, a.MaskedAtomics, "the model executes masked atomics")
	gids, err := e.c.QueryGIDs(1)
	require.NoError(t, err)
	require.NotEmpty(t, gids)
	for _, g := range gids {
		require.Equal(t, uint8(1), g.Port, "GID %d", g.Index)
		require.Zero(t, g.NetdevIfindex, "GID %d: the model has no network device", g.Index)
	}
	pa, err := e.c.QueryPort(1)
	require.NoError(t, err)
	require.Equal(t, ctx.LinkLayerInfiniBand, pa.LinkLayer)
	require.Equal(t, uint16(1), pa.LID)
	require.Equal(t, ctx.PortStateActive, pa.State)
	_, err = e.c.QueryPort(2)
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	devs, err := e.f.devices()
	require.NoError(t, err)
	require.Len(t, devs, 2)
}

// TestCQOptions: the model refuses CQE compression (it writes full CQEs,
// and says so in its attributes), accepts padding of 128-byte CQEs and
// completion vectors below the number it reports.
func TestCQOptions(t *testing.T) {
	e := newEnv(t, Options{})
	a, err := e.c.Query()
	require.NoError(t, err)
	require.False(t, a.CQECompression)
	require.False(t, a.CQECompressionChecksum)
	require.Zero(t, a.MaxCQECompression)
	require.True(t, a.CQEPadding)
	require.NotZero(t, a.CompVectors)

	for _, format := range []ctx.CQECompression{ctx.CQECompressionHash, ctx.CQECompressionChecksum} {
		_, err := e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16, Compression: format})
		require.ErrorIs(t, err, ctx.ErrNotSupported, "%v", format)
		require.Contains(t, err.Error(), format.String())
	}
	_, err = e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16, Compression: 7})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
	_, err = e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16, CQEPadding: true})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument, "padding needs 128-byte CQEs")
	_, err = e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16, CompVector: a.CompVectors})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)

	cq, err := e.c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 16, CQESize: 128, CQEPadding: true, CompVector: a.CompVectors - 1})
	require.NoError(t, err)
	require.Equal(t, uint32(128), provider.CQDescriptor(cq).CQESize)
	require.True(t, cq.Config().CQEPadding)
	require.Equal(t, a.CompVectors-1, cq.Config().CompVector)
	// The padded CQ completes like any other.
	qp, err := e.pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, Caps: ctx.QueuePairCaps{SendDepth: 8}})
	require.NoError(t, err)
	q := &testQP{e: e, qp: qp, d: provider.QPDescriptor(qp), scq: &testCQ{cq: cq, d: provider.CQDescriptor(cq)}}
	b := e.newQP(e.pd2, qpOpts{typ: ctx.QPTypeRC})
	e.connectRC(q, b, 7, 1)
	q.post(prm.OpNop, 0, prm.FlagCQUpdate, 0)
	e.run()
	require.Equal(t, prm.CQEReq, q.scq.one(t).op)
}
