//go:build cgo && linux

package verbs

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
)

// TestCreateAttrSendOps checks what mlx5dv_create_qp is given: RC, UD and
// DCI QPs are created with IBV_QP_INIT_ATTR_SEND_OPS_FLAGS and exactly the
// operations the kit posts on them (no memory-window binds or local
// invalidations, whose UMR WQEs would make rdma-core size every slot for
// 192 bytes of overhead, 240 on a DCI), a DCI through ibv_qp_init_attr_ex
// like the others; a DCT, which has no send queue, with the PD alone, as
// rdma-core requires.
func TestCreateAttrSendOps(t *testing.T) {
	caps := ctx.QueuePairCaps{SendDepth: 64, RecvDepth: 32, MaxSendSGE: 2, MaxRecvSGE: 1, MaxInline: 64}
	for _, typ := range []ctx.QPType{ctx.QPTypeRC, ctx.QPTypeUD, ctx.QPTypeDCI} {
		for _, atomics := range []bool{true, false} {
			ops := sqsize.KitOps(typ, atomics)
			s, err := summarizeCreate(qpParams{typ: typ, caps: caps, ops: ops})
			require.NoError(t, err)
			require.True(t, s.sendOpsFlagged, "%v", typ)
			require.Equal(t, ops, s.sendOps, "%v", typ)
			require.Zero(t, s.sendOps&(sqsize.OpBindMW|sqsize.OpLocalInv), "%v", typ)
			require.False(t, s.dvSendOps, "%v: no mlx5-specific operations", typ)
			require.Equal(t, typ == ctx.QPTypeDCI, s.driverType, "%v", typ)
			require.Equal(t, typ == ctx.QPTypeDCI, s.dc, "%v", typ)
			require.Equal(t, caps.SendDepth, s.caps.SendDepth)
			require.Equal(t, caps.MaxSendSGE, s.caps.MaxSendSGE)
			require.Equal(t, caps.MaxInline, s.caps.MaxInline)
			// rdma-core sizes the slot for these operations.
			if typ != ctx.QPTypeUD {
				require.Equal(t, atomics, s.sendOps&sqsize.OpAtomicCS != 0, "%v", typ)
			}
		}
	}
	s, err := summarizeCreate(qpParams{typ: ctx.QPTypeDCT, caps: caps, ops: sqsize.KitOps(ctx.QPTypeRC, true), dcKey: 7})
	require.NoError(t, err)
	require.True(t, s.onlyPD, "a DCT takes no comp_mask but the PD")
	require.False(t, s.sendOpsFlagged)
	require.True(t, s.dc)
	require.Equal(t, ctx.QueuePairCaps{}, s.caps)

	_, err = summarizeCreate(qpParams{typ: ctx.QPType(9)})
	require.ErrorIs(t, err, ctx.ErrInvalidArgument)
}

// TestModifyDefaultsToInitPort checks that a transition without a port
// uses the one the QP was brought to INIT on (a QP on port 2 would
// otherwise be moved to RTR on port 1, which the device refuses), port 1
// before any INIT, and that a path without a port leaves from the QP's.
func TestModifyDefaultsToInitPort(t *testing.T) {
	q := &QueuePair{typ: ctx.QPTypeRC}
	a := ctx.QPAttr{State: ctx.QPStateInit}
	q.defaultPort(&a)
	require.Equal(t, uint8(1), a.Port, "no INIT yet: port 1")

	q.port = 2
	a = ctx.QPAttr{State: ctx.QPStateRTR, Path: ctx.AddressAttr{DLID: 4}}
	q.defaultPort(&a)
	require.Equal(t, uint8(2), a.Port)
	require.Equal(t, uint8(2), a.Path.Port)

	a = ctx.QPAttr{State: ctx.QPStateRTR, Port: 1, Path: ctx.AddressAttr{Port: 2}}
	q.defaultPort(&a)
	require.Equal(t, uint8(1), a.Port, "a port given is kept")
	require.Equal(t, uint8(2), a.Path.Port)
}

// TestShutUpBlueFlame checks that MLX5_SHUT_UP_BF is read as rdma-core
// reads it: set to anything but "0" turns BlueFlame off.
func TestShutUpBlueFlame(t *testing.T) {
	require.False(t, shutUpBlueFlame("", false))
	require.False(t, shutUpBlueFlame("0", true))
	require.True(t, shutUpBlueFlame("1", true))
	require.True(t, shutUpBlueFlame("", true))
	require.True(t, shutUpBlueFlame("yes", true))
}

// TestDedicatedBlueFlameNeedsBlueFlame checks that a thread domain alone
// does not count as a register of the QP's own: on a device without
// BlueFlame (bf_reg_size 0) rdma-core gives every thread domain the
// context's one doorbell-only register, and mlx5dv_init_obj reports
// bf.size 0 for it.
func TestDedicatedBlueFlameNeedsBlueFlame(t *testing.T) {
	var td _Ctype_struct_ibv_td
	q := &QueuePair{pd: &ProtectionDomain{d: &Device{}}, dom: dedicatedDomain{td: &td}}
	q.desc.BlueFlameSize = 256
	require.True(t, q.DedicatedBlueFlame(), "a thread domain's BlueFlame register")
	q.desc.BlueFlameSize = 0
	require.False(t, q.DedicatedBlueFlame(), "a thread domain on a device without BlueFlame shares the doorbell-only register")
	q.dom.td = nil
	require.False(t, q.DedicatedBlueFlame(), "no thread domain")
}
