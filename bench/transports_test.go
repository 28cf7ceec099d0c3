package bench

import (
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/dc"
	"github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/ud"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// pingDepth is the queue depth of the latency benchmarks' queue pairs:
// one message is in flight, the rest is headroom.
const pingDepth = 16

// peer is one side's completion queue and poller. One transport.Poller serves
// queue pairs of every transport (their Queue type is shared).
type peer struct {
	cq *ctx.CompletionQueue
	p  *transport.Poller
}

func newPeers(tb testing.TB, e *pingEnv, depth uint32) [2]peer {
	var ps [2]peer
	for i := range ps {
		cq, err := e.s[i].c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: depth})
		require.NoError(tb, err)
		p, err := transport.NewPoller(cq)
		require.NoError(tb, err)
		ps[i] = peer{cq: cq, p: p}
		tb.Cleanup(func() { require.NoError(tb, cq.Close()) })
	}
	return ps
}

// wait polls p until a completion of the wanted kind (a receive, or a
// send) arrives, taking the other kind on the way. Only the poll that finds
// completions counts as software cost; the empty ones are waiting for the
// device. It returns false on an error completion.
func wait(p *transport.Poller, send bool, st *rtStats) bool {
	ok, got := true, false
	for !got {
		t0 := cycles.Start()
		n := p.Poll(4, func(c *transport.Completion) {
			if c.Match != transport.MatchOK {
				ok = false
			}
			if c.IsSend() == send {
				got = true
			}
		})
		if n == 0 {
			if st.step != nil {
				st.step()
			} else if st.spins++; st.spins%yieldEvery == 0 {
				runtime.Gosched()
			}
			continue
		}
		st.pollCycles += st.span(t0)
		if !ok {
			return false
		}
	}
	return true
}

// payload finishes a WQE with size bytes from side s: inline when it fits
// the queue pair's inline limit, else one SGE; BlueFlame either way.
func payload(d wqebuilder.DataStage, s *side, size int, inline bool) error {
	if inline {
		return d.Inline(s.buf.Bytes()[srcOff : srcOff+size]).FinishBlueFlame()
	}
	return d.SGE(s.addr(srcOff), uint32(size), s.mr.LKey()).FinishBlueFlame()
}

// roundTrip is one measured round trip with work request id id.
type roundTrip func(id uint64, st *rtStats) bool

// recvOff is where the message side i receives lands in its buffer: side
// 1 gets the ping, side 0 the pong.
func recvOff(i int) int {
	if i == 1 {
		return pingOff
	}
	return pongOff
}

// pingPong is the two-sided round trip: side 0 sends id, side 1 waits for
// its receive completion, rearms its receive and sends id back, side 0
// waits for that and rearms its own receive. send and rearm are given the
// side; the posts and the polls that found a completion are counted as
// software cost, the whole as the round trip.
func pingPong(ps [2]peer, send, rearm func(i int, id uint64) bool) roundTrip {
	return func(id uint64, st *rtStats) bool {
		t0 := cycles.Start()
		if !send(0, id) {
			return false
		}
		st.postCycles += st.span(t0)
		if !wait(ps[1].p, false, st) {
			return false
		}
		t1 := cycles.Start()
		if !rearm(1, id) || !send(1, id) {
			return false
		}
		st.postCycles += st.span(t1)
		if !wait(ps[0].p, false, st) {
			return false
		}
		t2 := cycles.Start()
		if !rearm(0, id) {
			return false
		}
		st.postCycles += st.span(t2)
		st.hist.Record(cycles.Stop() - t0)
		return true
	}
}

// pingCase is one transport and opcode of the ping-pong: setup builds its
// queue pairs for a payload size and returns the round trip, or a reason to
// skip that size.
type pingCase struct {
	name  string
	setup func(tb testing.TB, e *pingEnv, size int) (roundTrip, string)
	// oneSided: only side 0 acts, reading side 1's source into its pong
	// area. Otherwise side 0's source lands in side 1's ping area and
	// back into side 0's pong area, after grh bytes of GRH space.
	oneSided bool
	grh      int
}

var pingCases = []pingCase{
	{name: "rc-write-imm", setup: setupRCWriteImm},
	{name: "rc-send", setup: setupRCSend},
	{name: "rc-read", setup: setupRCRead, oneSided: true},
	{name: "dc-write-imm", setup: setupDCWriteImm},
	{name: "ud-send", setup: setupUDSend, grh: ud.GRHSize},
}

// rcConnected creates a connected RC queue pair on each side.
func rcConnected(tb testing.TB, e *pingEnv, ps [2]peer, recvDepth uint32) [2]*rc.QP {
	var qp [2]*rc.QP
	for i := range qp {
		q, err := rc.New(e.s[i].pd, ps[i].cq, rc.Config{SendDepth: pingDepth, RecvDepth: recvDepth, MaxInline: pingMaxInline})
		require.NoError(tb, err)
		require.NoError(tb, ps[i].p.Add(q))
		qp[i] = q
		tb.Cleanup(func() { require.NoError(tb, q.Close()) })
	}
	require.NoError(tb, qp[0].Connect(qp[1].Endpoint()))
	require.NoError(tb, qp[1].Connect(qp[0].Endpoint()))
	return qp
}

// setupRCWriteImm: side 0 writes with immediate to side 1, side 1 sees the
// receive completion, reposts the receive and writes back; side 0 sees the
// receive completion.
func setupRCWriteImm(tb testing.TB, e *pingEnv, size int) (roundTrip, string) {
	ps := newPeers(tb, e, 2*pingDepth+2)
	qp := rcConnected(tb, e, ps, pingDepth)
	inline := size <= int(qp[0].Limits().MaxInline)
	for i := range qp {
		require.NoError(tb, qp[i].PostRecv(0, 0, 0, 0))
	}
	write := func(i int, id uint64) bool {
		s, err := qp[i].Post(id, wqebuilder.Signaled)
		if err != nil {
			return false
		}
		peer := &e.s[1-i]
		return payload(s.RdmaWriteImm(peer.addr(recvOff(1-i)), peer.mr.RKey(), uint32(id)), &e.s[i], size, inline) == nil
	}
	rearm := func(i int, id uint64) bool { return qp[i].PostRecv(id, 0, 0, 0) == nil }
	return pingPong(ps, write, rearm), ""
}

// setupRCSend: SEND into a posted receive buffer and back.
func setupRCSend(tb testing.TB, e *pingEnv, size int) (roundTrip, string) {
	ps := newPeers(tb, e, 2*pingDepth+2)
	qp := rcConnected(tb, e, ps, pingDepth)
	inline := size <= int(qp[0].Limits().MaxInline)
	recv := func(i int, id uint64) bool {
		s := &e.s[i]
		return qp[i].PostRecv(id, s.addr(recvOff(i)), uint32(size), s.mr.LKey()) == nil
	}
	send := func(i int, id uint64) bool {
		s, err := qp[i].Post(id, wqebuilder.Signaled)
		return err == nil && payload(s.Send(), &e.s[i], size, inline) == nil
	}
	require.True(tb, recv(0, 0) && recv(1, 0))
	return pingPong(ps, send, recv), ""
}

// setupRCRead: side 0 reads size bytes of side 1's memory; the round trip
// ends with the read's completion.
func setupRCRead(tb testing.TB, e *pingEnv, size int) (roundTrip, string) {
	ps := newPeers(tb, e, 2*pingDepth+2)
	qp := rcConnected(tb, e, ps, 0)
	local, remote := &e.s[0], &e.s[1]
	return func(id uint64, st *rtStats) bool {
		t0 := cycles.Start()
		s, err := qp[0].Post(id, wqebuilder.Signaled)
		if err != nil || s.RdmaRead(remote.addr(srcOff), remote.mr.RKey()).SGE(local.addr(pongOff), uint32(size), local.mr.LKey()).FinishBlueFlame() != nil {
			return false
		}
		st.postCycles += st.span(t0)
		if !wait(ps[0].p, true, st) {
			return false
		}
		st.hist.Record(cycles.Stop() - t0)
		return true
	}, ""
}

// dcKey is the DC access key of the benchmark's targets.
const dcKey = 0x6d6c7835

// setupDCWriteImm: each side has a DC initiator and a DC target over an
// SRQ; side 0's initiator writes with immediate to side 1's target, which
// answers through its own initiator to side 0's target.
func setupDCWriteImm(tb testing.TB, e *pingEnv, size int) (roundTrip, string) {
	ps := newPeers(tb, e, 2*pingDepth+2)
	var (
		srq  [2]*transport.SharedReceiveQueue
		dct  [2]*dc.DCT
		dci  [2]*dc.DCI
		rmts [2]*dc.Remote
	)
	for i := range 2 {
		var err error
		srq[i], err = transport.NewSharedReceiveQueue(e.s[i].pd, ctx.SRQConfig{Depth: pingDepth})
		require.NoError(tb, err)
		dct[i], err = dc.NewDCT(e.s[i].pd, ps[i].cq, dc.DCTConfig{SRQ: srq[i], Key: dcKey})
		require.NoError(tb, err)
		dci[i], err = dc.NewDCI(e.s[i].pd, ps[i].cq, dc.DCIConfig{SendDepth: pingDepth, MaxInline: pingMaxInline})
		require.NoError(tb, err)
		require.NoError(tb, ps[i].p.Add(dct[i]))
		require.NoError(tb, ps[i].p.Add(dci[i]))
		require.NoError(tb, srq[i].PostRecv(0, 0, 0, 0))
	}
	for i := range 2 {
		var err error
		rmts[i], err = dci[i].NewRemote(dct[1-i].Endpoint())
		require.NoError(tb, err)
	}
	tb.Cleanup(func() {
		for i := range 2 {
			require.NoError(tb, rmts[i].Close())
			require.NoError(tb, dci[i].Close())
			require.NoError(tb, dct[i].Close())
			require.NoError(tb, srq[i].Close())
		}
	})
	inline := size <= int(dci[0].Limits().MaxInline)
	write := func(i int, id uint64) bool {
		s, err := dci[i].Post(id, wqebuilder.Signaled, rmts[i])
		if err != nil {
			return false
		}
		peer := &e.s[1-i]
		return payload(s.RdmaWriteImm(peer.addr(recvOff(1-i)), peer.mr.RKey(), uint32(id)), &e.s[i], size, inline) == nil
	}
	rearm := func(i int, id uint64) bool { return srq[i].PostRecv(id, 0, 0, 0) == nil }
	return pingPong(ps, write, rearm), ""
}

// udQKey is the qkey of the benchmark's UD queue pairs.
const udQKey = 0x11111111

// setupUDSend: a UD SEND to the other side's QP by address handle and
// back; receive buffers start with the 40 bytes of GRH space.
func setupUDSend(tb testing.TB, e *pingEnv, size int) (roundTrip, string) {
	ps := newPeers(tb, e, 2*pingDepth+2)
	var (
		qp   [2]*ud.QP
		rmts [2]*ud.Remote
	)
	for i := range 2 {
		var err error
		qp[i], err = ud.New(e.s[i].pd, ps[i].cq, ud.Config{SendDepth: pingDepth, RecvDepth: pingDepth, MaxInline: pingMaxInline, QKey: udQKey})
		require.NoError(tb, err)
		require.NoError(tb, ps[i].p.Add(qp[i]))
	}
	if mtu := qp[0].Endpoint().MTU.Bytes(); size > mtu {
		for i := range 2 {
			require.NoError(tb, qp[i].Close())
		}
		return nil, "payload larger than the UD MTU"
	}
	for i := range 2 {
		var err error
		rmts[i], err = qp[i].NewRemote(qp[1-i].Endpoint())
		require.NoError(tb, err)
	}
	tb.Cleanup(func() {
		for i := range 2 {
			require.NoError(tb, rmts[i].Close())
			require.NoError(tb, qp[i].Close())
		}
	})
	inline := size <= int(qp[0].Limits().MaxInline)
	recv := func(i int, id uint64) bool {
		s := &e.s[i]
		return qp[i].PostRecv(id, s.addr(recvOff(i)), uint32(ud.GRHSize+size), s.mr.LKey()) == nil
	}
	send := func(i int, id uint64) bool {
		s, err := qp[i].Post(id, wqebuilder.Signaled, rmts[i])
		return err == nil && payload(s.Send(), &e.s[i], size, inline) == nil
	}
	require.True(tb, recv(0, 0) && recv(1, 0))
	return pingPong(ps, send, recv), ""
}

// BenchmarkPingpong is the latency ping-pong at queue depth 1, signaled,
// with BlueFlame, inline up to pingMaxInline bytes: one op is one round
// trip (for rc-read, one read). It runs on the first mlx5 device when there
// is one and on the software HCA otherwise (the "provider:" line says
// which). Besides ns/op it reports cycles/op, the p50, p99 and p99.9 round
// trip in ns, and the software cost per round trip: cycles in posts and in
// the polls that found a completion.
func BenchmarkPingpong(b *testing.B) {
	e := sharedEnv(b)
	for _, c := range pingCases {
		for _, size := range pingSizes {
			b.Run(c.name+"/"+sizeName(size), func(b *testing.B) {
				rt, skip := c.setup(b, e, size)
				if skip != "" {
					b.Skip(skip)
				}
				st := e.newStats()
				pin(b)
				// Warm up outside the measurement: the first round
				// trips fault pages in and wake the engine.
				for i := uint64(0); i < 100; i++ {
					require.True(b, rt(i, st), "warm-up round trip %d", i)
				}
				st = e.newStats()
				sleeps := e.engineSleeps()
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if !rt(uint64(i), st) {
						b.Fatalf("round trip %d failed", i)
					}
				}
				b.StopTimer()
				st.report(b)
				if e.fabric != nil {
					b.ReportMetric(float64(e.engineSleeps()-sleeps)/float64(b.N), "engine-sleeps/op")
				}
				st.writeHistogram(b, e.provider)
			})
		}
	}
}
