package asyncevent

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// TestMapping checks every verbs event number (enum ibv_event_type, in its
// order) against ctx's type, whose String is the verbs name without the
// IBV_EVENT_ prefix, and its element; each type has one number, which
// Verbs gives back; a number newer than the package has no type and no
// element, and a type without a number none.
func TestMapping(t *testing.T) {
	want := []struct {
		name string
		typ  ctx.AsyncEventType
		elem Element
	}{
		{"CQ_ERR", ctx.EventCQError, ElementCQ},
		{"QP_FATAL", ctx.EventQPFatal, ElementQP},
		{"QP_REQ_ERR", ctx.EventQPRequestError, ElementQP},
		{"QP_ACCESS_ERR", ctx.EventQPAccessError, ElementQP},
		{"COMM_EST", ctx.EventCommEstablished, ElementQP},
		{"SQ_DRAINED", ctx.EventSQDrained, ElementQP},
		{"PATH_MIG", ctx.EventPathMigrated, ElementQP},
		{"PATH_MIG_ERR", ctx.EventPathMigrationError, ElementQP},
		{"DEVICE_FATAL", ctx.EventDeviceFatal, ElementDevice},
		{"PORT_ACTIVE", ctx.EventPortActive, ElementPort},
		{"PORT_ERR", ctx.EventPortError, ElementPort},
		{"LID_CHANGE", ctx.EventLIDChange, ElementPort},
		{"PKEY_CHANGE", ctx.EventPKeyChange, ElementPort},
		{"SM_CHANGE", ctx.EventSMChange, ElementPort},
		{"SRQ_ERR", ctx.EventSRQError, ElementSRQ},
		{"SRQ_LIMIT_REACHED", ctx.EventSRQLimitReached, ElementSRQ},
		{"QP_LAST_WQE_REACHED", ctx.EventQPLastWQEReached, ElementQP},
		{"CLIENT_REREGISTER", ctx.EventClientReregister, ElementPort},
		{"GID_CHANGE", ctx.EventGIDChange, ElementPort},
		{"WQ_FATAL", ctx.EventWQFatal, ElementWQ},
	}
	require.Equal(t, len(want), Count)
	seen := map[ctx.AsyncEventType]bool{}
	for n, w := range want {
		require.Equal(t, w.typ, Type(uint32(n)), "verbs event %d", n)
		require.Equal(t, w.name, Type(uint32(n)).String(), "verbs event %d", n)
		require.Equal(t, w.elem, ElementOf(uint32(n)), "verbs event %d", n)
		require.False(t, seen[w.typ], "%v twice", w.typ)
		seen[w.typ] = true
		back, ok := Verbs(w.typ)
		require.True(t, ok, "%v", w.typ)
		require.Equal(t, uint32(n), back, "%v", w.typ)
	}
	require.Zero(t, Type(uint32(Count)), "a number newer than the package")
	require.Equal(t, ElementNone, ElementOf(uint32(Count)))
	require.Zero(t, Type(1<<31))
	for _, typ := range []ctx.AsyncEventType{0, ctx.EventWQFatal + 1, 255} {
		_, ok := Verbs(typ)
		require.False(t, ok, "type %d", typ)
	}
}
