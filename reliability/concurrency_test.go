package reliability

import (
	"bytes"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// The threading model under test (docs/reliability.md): a queue pair, its
// CQs, their pollers and its SRQ belong to one goroutine at a time, and
// queue pairs with their own CQs may be driven by different goroutines at
// once with no lock; control-plane objects (ctx) and the software HCA
// (sim.Fabric) may be shared by any number of goroutines, also while the
// data plane runs. Run with -race: the race detector sees the Go memory
// those share (the object trees, the model's maps); the rings are mmap'd
// outside the Go heap, where it does not look, and are ordered by the
// doorbell records and CQE owner bits as on a device.

// TestQueuePairsOwnedByGoroutines runs one RC ping-pong per goroutine, each
// on its own queue pairs and CQs, against the software HCA's engine
// goroutine, while another goroutine keeps creating and destroying
// control-plane objects on the same Contexts and reading the model's state.
func TestQueuePairsOwnedByGoroutines(t *testing.T) {
	x := newFabric(t, sim.Options{Mode: sim.Engine, IdleSleep: 50 * time.Microsecond})
	workers, rounds := 4, 300
	if testing.Short() {
		rounds = 60
	}
	pairs := make([]*rcPair, workers)
	for i := range pairs {
		pairs[i] = newRCPair(t, x, rc.Config{SendDepth: 16, RecvDepth: 16, MaxInline: 64})
	}
	stop := make(chan struct{})
	var churn sync.WaitGroup
	var churned atomic.Int64
	churn.Add(1)
	go func() {
		defer churn.Done()
		// A round before each look at stop: under an emulated CPU the
		// workers can finish before this goroutine first runs.
		for i := 0; ; i++ {
			c := x.c[i%2]
			if err := controlPlaneRound(c, x.f, pairs[i%workers].qp[0].QPN()); err != nil {
				t.Errorf("control plane: %v", err)
				return
			}
			churned.Add(1)
			select {
			case <-stop:
				return
			default:
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for i, p := range pairs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := pingPong(p, i, rounds); err != nil {
				errs <- fmt.Errorf("worker %d: %w", i, err)
			}
		}()
	}
	wg.Wait()
	close(stop)
	churn.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	require.NotZero(t, churned.Load(), "the control plane ran alongside")
	for _, p := range pairs {
		for i := range 2 {
			require.NoError(t, p.ar[i].checkCanaries(true))
		}
	}
}

// controlPlaneRound creates and destroys a PD, a buffer and its MR, a CQ
// and an RC QP on c, and reads the model's state of a busy QP.
func controlPlaneRound(c *ctx.Context, f *sim.Fabric, busy uint32) error {
	pd, err := c.AllocProtectionDomain()
	if err != nil {
		return err
	}
	defer pd.Close()
	buf, err := ctx.AllocBuffer(4096, ctx.BufferOptions{})
	if err != nil {
		return err
	}
	defer buf.Close()
	if _, err := pd.RegisterBuffer(buf, allAccess); err != nil {
		return err
	}
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 7})
	if err != nil {
		return err
	}
	defer cq.Close()
	q, err := rc.New(pd, cq, rc.Config{SendDepth: 2, RecvDepth: 2})
	if err != nil {
		return err
	}
	if _, err := c.Query(); err != nil {
		return err
	}
	if busy != 0 {
		if st, err := f.QPState(busy); err != nil || st != ctx.QPStateRTS {
			return fmt.Errorf("busy QP %#x: %v, %v", busy, st, err)
		}
	}
	_ = f.Stats()
	if _, _, err := provider.ReadAsyncEvent(c); err != nil {
		return err
	}
	return q.Close()
}

// pingPong sends rounds RDMA writes with immediate from side 0 to side 1
// and back, each carrying its round number, and checks every byte and
// completion. Only this goroutine touches the pair.
func pingPong(p *rcPair, id, rounds int) error {
	payload := make([]byte, 48)
	for r := 0; r < rounds; r++ {
		for side := range 2 {
			from, to := p.qp[side], p.qp[1-side]
			if err := to.PostRecv(uint64(r), 0, 0, 0); err != nil {
				return err
			}
			genBytes(payload, uint64(id)<<32|uint64(r)<<1|uint64(side))
			st, err := from.Post(uint64(r), wqebuilder.Signaled)
			if err != nil {
				return err
			}
			off := 64 * (r % 16)
			dst := p.r[1-side]
			if err := st.RdmaWriteImm(dst.addr(off), dst.rkey(), uint32(r)).Inline(payload).FinishBlueFlame(); err != nil {
				return err
			}
			// Wait for the send completion and the receive completion.
			var send, recv bool
			deadline := time.Now().Add(10 * time.Second)
			for !send || !recv {
				if time.Now().After(deadline) {
					return errors.New("no completion within 10 s")
				}
				var bad error
				for i, poller := range p.p {
					poller.Poll(8, func(c *transport.Completion) {
						switch {
						case c.Err() != nil:
							bad = c.Err()
						case c.WRID != uint64(r):
							bad = fmt.Errorf("round %d: completion for wrid %d", r, c.WRID)
						case i == side && c.IsSend():
							send = true
						case i != side && !c.IsSend() && c.Immediate == uint32(r) && int(c.ByteCount) == len(payload):
							recv = true
						default:
							bad = fmt.Errorf("round %d: unexpected completion %+v", r, *c)
						}
					})
				}
				if bad != nil {
					return bad
				}
				runtime.Gosched()
			}
			if !bytes.Equal(dst.mem[off:off+len(payload)], payload) {
				return fmt.Errorf("round %d side %d: payload differs", r, side)
			}
			copy(dst.shadow[off:], payload)
		}
	}
	for i := range 2 {
		if err := p.r[i].check(); err != nil {
			return err
		}
	}
	return nil
}

// TestContextSharedByGoroutines creates and closes control-plane objects
// on one Context from several goroutines at once, then closes the Context
// while they still run: every call either works or fails with ErrClosed,
// and nothing is left open.
func TestContextSharedByGoroutines(t *testing.T) {
	f := sim.New(sim.Options{})
	t.Cleanup(func() { require.NoError(t, f.Close()) })
	c, err := f.Open("sim0")
	require.NoError(t, err)
	var wg sync.WaitGroup
	var made, refused atomic.Int64
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				err := controlPlaneRound(c, f, 0)
				switch {
				case err == nil:
					made.Add(1)
				case errors.Is(err, ctx.ErrClosed) || errors.Is(err, ctx.ErrNotFound):
					refused.Add(1)
				default:
					t.Errorf("goroutine %d: %v", g, err)
					return
				}
				if i == 50 && g == 0 {
					if err := c.Close(); err != nil {
						t.Errorf("close: %v", err)
					}
				}
			}
		}()
	}
	wg.Wait()
	require.NotZero(t, made.Load())
	require.NotZero(t, refused.Load(), "calls after Close are refused")
	require.True(t, c.Closed())
	require.NoError(t, c.Close())
}
