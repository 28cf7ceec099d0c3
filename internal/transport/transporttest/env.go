// Package transporttest sets up the software HCA for the tests of packages
// rc, dc and ud: a private Fabric in manual, strict mode with two HCAs, a
// protection domain and a registered buffer on each, and completion helpers.
package transporttest

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/monocq"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
)

// AllAccess is every access flag.
const AllAccess = ctx.AccessLocalWrite | ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic

// Env is two simulated HCAs with a PD and a registered buffer each.
type Env struct {
	T      testing.TB
	Fabric *sim.Fabric
	Ctx    [2]*ctx.Context
	PD     [2]*ctx.ProtectionDomain
	Buf    [2]*ctx.Buffer
	MR     [2]*ctx.MemoryRegion
	// AllowViolations lets a test expect strict-mode violations.
	AllowViolations bool
}

// BufSize is the size of each Env buffer.
const BufSize = 4 << 20

// New builds an Env. opts.Strict is forced on; the mode is manual unless
// opts says Engine. Everything is closed when the test ends, and the test
// fails if the model recorded a strict-mode violation.
func New(t testing.TB, opts sim.Options) *Env {
	t.Helper()
	return newEnv(t, opts, nil)
}

// newEnv builds an Env whose contexts are opened on the Fabric itself, or
// through log's recording provider when log is not nil.
func newEnv(t testing.TB, opts sim.Options, log *Log) *Env {
	t.Helper()
	opts.Strict = true
	e := &Env{T: t, Fabric: sim.New(opts)}
	for i := range 2 {
		var err error
		name := []string{"sim0", "sim1"}[i]
		if log == nil {
			e.Ctx[i], err = e.Fabric.Open(name)
		} else {
			e.Ctx[i], err = provider.Open(ctx.ProviderSoftware, recordingProvider{e.Fabric, log}, name)
		}
		require.NoError(t, err)
		e.PD[i], err = e.Ctx[i].AllocProtectionDomain()
		require.NoError(t, err)
		e.Buf[i], err = ctx.AllocBuffer(BufSize, ctx.BufferOptions{Guard: true})
		require.NoError(t, err)
		e.MR[i], err = e.PD[i].RegisterBuffer(e.Buf[i], AllAccess)
		require.NoError(t, err)
	}
	t.Cleanup(func() {
		if !e.AllowViolations {
			require.Empty(t, e.Fabric.Violations(), "strict-mode violations")
		}
		for i := range 2 {
			require.NoError(t, e.Ctx[i].Close())
		}
		require.NoError(t, e.Fabric.Close())
		for i := range 2 {
			require.NoError(t, e.Buf[i].Close())
		}
	})
	return e
}

// CQ creates a completion queue on HCA i.
func (e *Env) CQ(i int, depth uint32) *ctx.CompletionQueue {
	e.T.Helper()
	cq, err := e.Ctx[i].CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: depth})
	require.NoError(e.T, err)
	return cq
}

// Poller is what the Pollers of packages rc, dc and ud have in common.
type Poller interface {
	Poll(max int, fn func(*transport.Completion)) int
	Err() error
}

// Run runs the model until it is idle.
func (e *Env) Run() {
	e.T.Helper()
	require.NoError(e.T, e.Fabric.RunUntilIdle())
}

// Addr returns the address of byte off of buffer i.
func (e *Env) Addr(i, off int) uint64 { return uint64(e.MR[i].Addr()) + uint64(off) }

// Mem returns n bytes at off of buffer i.
func (e *Env) Mem(i, off, n int) []byte { return e.Buf[i].Bytes()[off : off+n] }

// LKey and RKey return the keys of buffer i.
func (e *Env) LKey(i int) uint32 { return e.MR[i].LKey() }

// RKey returns the rkey of buffer i.
func (e *Env) RKey(i int) uint32 { return e.MR[i].RKey() }

// Drain runs the model and returns every completion the pollers have now,
// copied. It fails the test on a poller error other than ErrUnknownQPN
// (which the tests that provoke it check themselves).
func (e *Env) Drain(ps ...Poller) []transport.Completion {
	e.T.Helper()
	e.Run()
	var out []transport.Completion
	for _, p := range ps {
		for p.Poll(64, func(c *transport.Completion) { out = append(out, *c) }) > 0 {
		}
		if err := p.Err(); err != nil && !errors.Is(err, monocq.ErrUnknownQPN) {
			require.NoError(e.T, err)
		}
	}
	return out
}

// One runs the model and requires exactly one completion from p.
func (e *Env) One(p Poller) transport.Completion {
	e.T.Helper()
	got := e.Drain(p)
	require.Len(e.T, got, 1, "completions: %+v", got)
	return got[0]
}
