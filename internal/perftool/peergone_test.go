package perftool

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/endpoint"
	"github.com/mlx5kit/mlx5kit/internal/toolproc"
)

// TestWaitSeesPeerGone: a wait for a message that does not come ends soon
// after the peer closes the tool's connection (endpoint.ErrPeerGone) or says it
// failed (ErrPeerFailed), busy or sleeping on completion events, not at
// the timeout; with the peer there and silent it ends at the timeout.
func TestWaitSeesPeerGone(t *testing.T) {
	for _, events := range []bool{false, true} {
		cfg := EndConfig{Size: 64, SendDepth: 8, RecvDepth: 8, CQDepth: 64, RecvSGE: true, Events: events,
			Inline: func(device int) int { return min(device, 64) }, Port: 1, Timeout: time.Minute}
		s, ends, err := OpenEnds(ctx.ProviderSoftware, "", cfg, func(x *End) *End { return x }, "a", "b")
		require.NoError(t, err)
		defer func() { require.NoError(t, s.Close()) }()
		a, b := ends[0], ends[1]
		require.NoError(t, a.QP.Connect(b.QP.Endpoint()))
		require.NoError(t, b.QP.Connect(a.QP.Endpoint()))

		for _, c := range []struct {
			name     string
			peer     func(far net.Conn)
			want     error
			deadline bool
		}{
			{"closed", func(far net.Conn) { _ = far.Close() }, endpoint.ErrPeerGone, false},
			{"failed", func(far net.Conn) { _, _ = far.Write([]byte{statusFailed}) }, ErrPeerFailed, false},
			// The connection's deadline (Sync's) long past: still seen.
			{"closed past the deadline", func(far net.Conn) { _ = far.Close() }, endpoint.ErrPeerGone, true},
		} {
			near, far := toolproc.TCPPair(t)
			if c.deadline {
				require.NoError(t, near.SetDeadline(time.Now().Add(-time.Hour)))
			}
			b.Peer = near
			time.AfterFunc(50*time.Millisecond, func() { c.peer(far) })
			start := time.Now()
			err := b.Await(OpWriteImm, 64, 1)
			require.ErrorIs(t, err, c.want, "events %v, peer %s", events, c.name)
			require.Less(t, time.Since(start), 10*time.Second, "events %v, peer %s: the wait ran on", events, c.name)
		}

		near, _ := toolproc.TCPPair(t)
		b.Peer, b.Timeout = near, 3*PeerCheck
		err = b.Await(OpWriteImm, 64, 1)
		require.ErrorContains(t, err, "no completion for message 1 within", "events %v", events)
		require.NotErrorIs(t, err, endpoint.ErrPeerGone)
	}
}

// TestIdleTimeoutCountsFromProgress: a stream whose messages keep
// completing (seq, the messages done, changes) runs on past the end's
// timeout; one whose count stands still fails a timeout after it last
// moved.
func TestIdleTimeoutCountsFromProgress(t *testing.T) {
	cfg := EndConfig{Size: 64, SendDepth: 8, RecvDepth: 8, CQDepth: 64, Inline: func(device int) int { return min(device, 64) }, Port: 1,
		Timeout: 100 * time.Millisecond}
	s, ends, err := OpenEnds(ctx.ProviderSoftware, "", cfg, func(x *End) *End { return x }, "a")
	require.NoError(t, err)
	defer func() { require.NoError(t, s.Close()) }()
	x := ends[0]
	var since time.Time
	start := time.Now()
	for seq := uint32(0); time.Since(start) < 5*cfg.Timeout; seq++ {
		require.NoError(t, x.Idle(SlowCheck, &since, seq), "after %v, done %d", time.Since(start), seq)
		time.Sleep(cfg.Timeout / 4)
	}
	var err2 error
	for time.Since(start) < 20*cfg.Timeout && err2 == nil {
		err2 = x.Idle(SlowCheck, &since, 7)
		time.Sleep(cfg.Timeout / 4)
	}
	require.ErrorContains(t, err2, "no completion for message 7 within")
}
