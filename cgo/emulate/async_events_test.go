//go:build cgo && linux

package emulate_test

import (
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// TestAsyncEventsUnderPreload compiles testdata/async_events.c and runs it
// with the emulation preloaded over both ABIs and both link layers:
// ibv_get_async_event returns communication established for a QP in RTR
// that receives its first packet (once), an SRQ limit reached (once, the limit then
// reading 0), a CQ error and the QP fatal error of a CQ overrun, and a
// last WQE reached, each naming its object; a QP destroyed with its event
// unread takes the event with it, and every destroy after acknowledged
// events returns (libibverbs waits for as many acknowledgements as the
// destroy response reports).
func TestAsyncEventsUnderPreload(t *testing.T) {
	prog, lib := cProgram(t, "async_events")

	for _, abi := range []string{"", emulate.ABIWrite} {
		for _, link := range []string{"infiniband", "ethernet"} {
			t.Run("abi="+abi+",link="+link, func(t *testing.T) {
				out := runPreloaded(t, prog, lib, abi, link)
				require.Equal(t, "async fd readable: 0\n"+
					"event communication established: qp b\n"+
					"after the second packet: readable 0\n"+
					"srq limit armed: 3\n"+
					"one below four: readable 0\n"+
					"event SRQ limit reached: srq\n"+
					"srq limit after the event: 0\n"+
					"disarmed: readable 0\n"+
					"event CQ error: send cq\n"+
					"event local work queue catastrophic error: qp a\n"+
					"event last WQE reached: qp b\n"+
					"after destroying qc: readable 0\n"+
					"done\n", out)
			})
		}
	}
}

// TestContextAsyncEventsThroughRdmaCore goes through the kit's control
// plane with the hardware provider (the cgo provider over libibverbs and
// libmlx5 on the emulated device): the SRQ limit arms and reads back
// through ibv_modify_srq / ibv_query_srq (ctx.SharedReceiveQueue.ArmLimit,
// Limit), a QP on the SRQ moved to error raises QP_LAST_WQE_REACHED, read
// with provider.ReadAsyncEvent (ibv_get_async_event, acknowledged), and
// closing the Context then destroys the QP without waiting.
func TestContextAsyncEventsThroughRdmaCore(t *testing.T) {
	maps := emulate.MappingCount()
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware})
	require.NoError(t, err)
	defer c.Close()
	pd, err := c.AllocProtectionDomain()
	require.NoError(t, err)
	cq, err := c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 31})
	require.NoError(t, err)
	srq, err := pd.CreateSRQ(ctx.SRQConfig{Depth: 15, MaxSGE: 1})
	require.NoError(t, err)

	require.ErrorIs(t, srq.ArmLimit(1<<20), ctx.ErrInvalidArgument, "a limit beyond the WQE count")
	require.NoError(t, srq.ArmLimit(4))
	n, err := srq.Limit()
	require.NoError(t, err)
	require.Equal(t, uint32(4), n)
	require.NoError(t, srq.ArmLimit(0))
	n, err = srq.Limit()
	require.NoError(t, err)
	require.Zero(t, n)

	qp, err := pd.CreateQueuePair(ctx.QueuePairConfig{Type: ctx.QPTypeRC, SendCQ: cq, RecvCQ: cq, SRQ: srq,
		Caps: ctx.QueuePairCaps{SendDepth: 8, MaxSendSGE: 1}})
	require.NoError(t, err)
	require.NoError(t, qp.Modify(ctx.QPAttr{State: ctx.QPStateInit, Port: 1, Access: ctx.AccessLocalWrite}))
	ev, ok, err := provider.ReadAsyncEvent(c)
	require.NoError(t, err)
	require.False(t, ok, "no event yet: %v", ev)
	require.NoError(t, qp.Modify(ctx.QPAttr{State: ctx.QPStateError}))
	deadline := time.Now().Add(5 * time.Second)
	for !ok && time.Now().Before(deadline) {
		ev, ok, err = provider.ReadAsyncEvent(c)
		require.NoError(t, err)
		time.Sleep(time.Millisecond)
	}
	require.True(t, ok, "no async event")
	require.Equal(t, ctx.EventQPLastWQEReached, ev.Type)
	require.Equal(t, qp.QPN(), ev.QPN)
	require.NoError(t, c.Close())
	// The device closes once the queue memory is collected.
	deadline = time.Now().Add(10 * time.Second)
	for emulate.MappingCount() != maps && time.Now().Before(deadline) {
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	require.Equal(t, maps, emulate.MappingCount())
}

// TestContextPortEventsThroughRdmaCore: a port flap the model raises
// (sim.Fabric.SetPortState) reaches a Context of the hardware provider
// through the emulated kernel's async descriptor and libibverbs'
// ibv_get_async_event, as PORT_ERR and then PORT_ACTIVE naming the port,
// and QueryPort follows the state.
func TestContextPortEventsThroughRdmaCore(t *testing.T) {
	c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware})
	require.NoError(t, err)
	defer c.Close()
	f := emulate.Fabric()
	require.NotNil(t, f)
	next := func() ctx.AsyncEvent {
		t.Helper()
		deadline := time.Now().Add(5 * time.Second)
		for time.Now().Before(deadline) {
			ev, ok, err := provider.ReadAsyncEvent(c)
			require.NoError(t, err)
			if ok {
				return ev
			}
			time.Sleep(time.Millisecond)
		}
		t.Fatal("no async event")
		return ctx.AsyncEvent{}
	}
	require.NoError(t, f.SetPortState(c.DeviceName(), 1, false))
	ev := next()
	require.Equal(t, ctx.EventPortError, ev.Type, "%v", ev)
	require.Equal(t, uint8(1), ev.Port)
	pa, err := c.QueryPort(1)
	require.NoError(t, err)
	require.Equal(t, ctx.PortStateDown, pa.State)
	require.NoError(t, f.SetPortState(c.DeviceName(), 1, true))
	ev = next()
	require.Equal(t, ctx.EventPortActive, ev.Type, "%v", ev)
	require.Equal(t, uint8(1), ev.Port)
	pa, err = c.QueryPort(1)
	require.NoError(t, err)
	require.Equal(t, ctx.PortStateActive, pa.State)
}
