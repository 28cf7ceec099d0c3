package sim

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSharedRoundTripsExactlyOnce: a fault-free run of round trips with
// another process (an RC write with immediate each way) executes every
// request once. Requests the responder sees twice (Stats.RepeatsServed)
// come only from a requester's ACK timeout; with an ACK timeout of
// seconds none fires on a fault-free run, so none is repeated, and every
// message is completed exactly once at both ends.
func TestSharedRoundTripsExactlyOnce(t *testing.T) {
	skipOnEmulatedCPU(t)
	const n = 500
	// ACK timeout 20: 4.3 s, far above any round trip of a loaded
	// machine.
	p := startEcho(t, 20)
	before := p.e.f.Stats()
	for i := 0; i < n; i++ {
		p.round(t, i)
	}
	mine := p.e.f.Stats()
	child := p.ch.stats(t)
	require.Zero(t, mine.Retries-before.Retries, "ACK timeouts of this process's requests")
	require.Zero(t, child.Retries, "ACK timeouts of the child's requests")
	require.Zero(t, child.RepeatsServed, "this process's requests the child saw twice")
	require.Zero(t, mine.RepeatsServed, "the child's requests this process saw twice")
	// Each end: n receive completions and n send completions, no more.
	require.Equal(t, uint64(2*n), child.CQEs, "the child's completions")
	require.Equal(t, uint64(2*n), mine.CQEs-before.CQEs, "this process's completions")
	require.Zero(t, child.ErrorCQEs+mine.ErrorCQEs)
}
