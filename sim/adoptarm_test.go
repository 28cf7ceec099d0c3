package sim

import (
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/simadopt"
)

// TestAdoptedCQArmsFromRecord arms an adopted CQ by writing its doorbell
// record's arm word, as libmlx5's ibv_req_notify_cq does, and checks that
// the first arm (all zeros) counts, that one arm raises one event, that
// arming behind the producer raises it at once, and that a solicited arm
// ignores unsolicited CQEs.
func TestAdoptedCQArmsFromRecord(t *testing.T) {
	f := New(Options{})
	defer f.Close()
	dev, err := f.openDevice("")
	require.NoError(t, err)
	defer dev.Close()
	ring, err := ctx.AllocBuffer(8*prm.CQE64Size, ctx.BufferOptions{})
	require.NoError(t, err)
	defer ring.Close()
	db, err := ctx.AllocBuffer(64, ctx.BufferOptions{})
	require.NoError(t, err)
	defer db.Close()
	rb := unsafe.Slice((*byte)(ring.Pointer()), 8*prm.CQE64Size)
	for i := 0; i < 8; i++ {
		rb[i*prm.CQE64Size+prm.CQEOpOwn] = prm.CQEInvalidOpOwn | prm.CQEOwnerMask
	}
	var events atomic.Int32
	c, err := adoptCompletionQueue(dev, simadopt.CQConfig{Ring: ring.Pointer(), Count: 8, CQESize: prm.CQE64Size,
		DBRec: db.Pointer(), Event: func() { events.Add(1) }})
	require.NoError(t, err)
	defer c.Close()
	cqn := c.Descriptor().CQN
	armWord := unsafe.Add(db.Pointer(), prm.DoorbellRecordSendB)
	require.Equal(t, uint32(armRecordUnarmed), *(*uint32)(armWord), "the record is marked unarmed")
	arm := func(sn, cmd, ci uint32) { prm.Store32(armWord, sn<<prm.CQArmSNShift|cmd|ci) }
	var img [prm.CQE64Size]byte
	img[prm.CQEOpOwn] = prm.OpOwn(prm.CQEReq, prm.CQEFormatNone, false, 0)

	require.NoError(t, f.InjectCQE(cqn, img))
	require.Zero(t, events.Load(), "not armed")

	arm(0, 0, 1) // sn 0, next completion, consumer index 1
	require.NoError(t, f.InjectCQE(cqn, img))
	require.Equal(t, int32(1), events.Load(), "armed: one event")
	require.NoError(t, f.InjectCQE(cqn, img))
	require.Equal(t, int32(1), events.Load(), "an arm raises one event")

	// Consumer index 1, three CQEs written: behind, the event is raised at
	// the engine's next look.
	arm(1, 0, 1)
	f.mu.Lock()
	f.takeArm(f.cqs[cqn])
	f.mu.Unlock()
	require.Equal(t, int32(2), events.Load(), "arming behind the producer")

	arm(2, prm.CQArmSolicited, 3)
	require.NoError(t, f.InjectCQE(cqn, img))
	require.Equal(t, int32(2), events.Load(), "a solicited arm ignores an unsolicited CQE")

	// All zeros is an arm too once the record held something else.
	f2, err := adoptCompletionQueue(dev, simadopt.CQConfig{Ring: ring.Pointer(), Count: 8, CQESize: prm.CQE64Size,
		DBRec: unsafe.Add(db.Pointer(), 8), Event: func() { events.Add(10) }})
	require.NoError(t, err)
	defer f2.Close()
	prm.Store32(unsafe.Add(db.Pointer(), 8+prm.DoorbellRecordSendB), 0)
	require.NoError(t, f.InjectCQE(f2.Descriptor().CQN, img))
	require.Equal(t, int32(12), events.Load(), "the first arm, all zeros")
}
