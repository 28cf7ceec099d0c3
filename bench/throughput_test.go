package bench

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// Throughput geometry: 64 WQEs in flight, posted in batches of 16 with one
// doorbell each, the last WQE of a batch signaled (it retires the 15 before
// it).
const (
	tputDepth = 64
	tputBatch = 16
)

// tputSizes are the payloads of the throughput benchmark.
var tputSizes = []int{8, 64, 256, 1024, 4096, 65536}

// streamWrites runs n RDMA_WRITEs of size bytes from side 0 to side 1 with
// at most tputDepth outstanding. It returns false on an error.
func streamWrites(qp *rc.QP, p *transport.Poller, e *pingEnv, size, n int, inline bool, st *rtStats) bool {
	src, dst := &e.s[0], &e.s[1]
	raddr, rkey := dst.addr(pingOff), dst.mr.RKey()
	data := src.buf.Bytes()[srcOff : srcOff+size]
	laddr, lkey := src.addr(srcOff), src.mr.LKey()
	posted, outstanding := 0, 0
	ok := true
	for posted < n || outstanding > 0 {
		for outstanding+tputBatch <= tputDepth && posted < n {
			k := min(tputBatch, n-posted)
			for j := 0; j < k; j++ {
				flags := wqebuilder.Flags(0)
				if j == k-1 {
					flags = wqebuilder.Signaled
				}
				s, err := qp.Post(uint64(k), flags)
				if err != nil {
					return false
				}
				d := s.RdmaWrite(raddr, rkey)
				if inline {
					err = d.Inline(data).Finish()
				} else {
					err = d.SGE(laddr, uint32(size), lkey).Finish()
				}
				if err != nil {
					return false
				}
			}
			qp.RingDoorbell()
			posted += k
			outstanding += k
		}
		if p.Poll(4, func(c *transport.Completion) {
			if c.Match != transport.MatchOK {
				ok = false
			}
			// The wrid of a batch's signaled WQE is the batch size.
			outstanding -= int(c.WRID)
		}) == 0 {
			if st.step != nil {
				st.step()
			} else if st.spins++; st.spins%yieldEvery == 0 {
				runtime.Gosched()
			}
		}
		if !ok {
			return false
		}
	}
	return true
}

// newStreamPair connects a sender on side 0 (send depth tputDepth) to a
// receiver on side 1 and returns the sender and its poller.
func newStreamPair(tb testing.TB, e *pingEnv) (*rc.QP, *transport.Poller) {
	ps := newPeers(tb, e, 2*tputDepth)
	qp, err := rc.New(e.s[0].pd, ps[0].cq, rc.Config{SendDepth: tputDepth, MaxInline: pingMaxInline})
	require.NoError(tb, err)
	require.NoError(tb, ps[0].p.Add(qp))
	peer, err := rc.New(e.s[1].pd, ps[1].cq, rc.Config{SendDepth: 1})
	require.NoError(tb, err)
	tb.Cleanup(func() {
		require.NoError(tb, qp.Close())
		require.NoError(tb, peer.Close())
	})
	require.NoError(tb, qp.Connect(peer.Endpoint()))
	require.NoError(tb, peer.Connect(qp.Endpoint()))
	return qp, ps[0].p
}

// BenchmarkThroughput streams RC RDMA_WRITEs at queue depth 64 with one
// doorbell per 16 WQEs and one CQE per 16 (selective signaling): one op is
// one message; MB/s and msg/s are the rates.
func BenchmarkThroughput(b *testing.B) {
	e := sharedEnv(b)
	for _, size := range tputSizes {
		b.Run("rc-write/"+sizeName(size), func(b *testing.B) {
			qp, p := newStreamPair(b, e)
			inline := size <= int(qp.Limits().MaxInline)
			st := newRTStats()
			pin(b)
			require.True(b, streamWrites(qp, p, e, size, 1024, inline, st), "warm-up")
			b.SetBytes(int64(size))
			b.ReportAllocs()
			b.ResetTimer()
			t0 := time.Now()
			if !streamWrites(qp, p, e, size, b.N, inline, st) {
				b.Fatal("stream failed")
			}
			elapsed := time.Since(t0)
			b.StopTimer()
			b.ReportMetric(float64(b.N)/elapsed.Seconds(), "msg/s")
		})
	}
}
