//go:build cgo && linux

package verbs

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestLayoutMatchesHeaders compares, entry by entry, the size and offset of
// every struct member the package touches and every constant it mirrors,
// as the C compiler computes them from the installed rdma-core headers and
// as cgo's Go rendering (and this package's constants) see them.
func TestLayoutMatchesHeaders(t *testing.T) {
	c, g := cLayout(), goLayout()
	require.NotEmpty(t, c)
	cm := make(map[string]uintptr, len(c))
	for _, e := range c {
		_, dup := cm[e.name]
		require.False(t, dup, "C table lists %s twice", e.name)
		cm[e.name] = e.value
	}
	gm := make(map[string]bool, len(g))
	for _, e := range g {
		require.False(t, gm[e.name], "Go table lists %s twice", e.name)
		gm[e.name] = true
		cv, ok := cm[e.name]
		if !ok {
			t.Errorf("%s: checked in Go but not in C", e.name)
			continue
		}
		if cv != e.value {
			t.Errorf("%s: C says %d, Go says %d", e.name, cv, e.value)
		}
	}
	for _, e := range c {
		if !gm[e.name] {
			t.Errorf("%s: checked in C but not in Go", e.name)
		}
	}
}

// TestLayoutKnownSizes pins the sizes the data plane relies on regardless
// of how cgo renders them: the values come from the C compiler and the
// numbers are those of the PRM and the rdma-core ABI on 64-bit Linux.
func TestLayoutKnownSizes(t *testing.T) {
	c := map[string]uintptr{}
	for _, e := range cLayout() {
		c[e.name] = e.value
	}
	for name, want := range map[string]uintptr{
		"sizeof(struct mlx5_wqe_av)":             48,
		"sizeof(union ibv_gid)":                  16,
		"offsetof(struct mlx5dv_qp, dbrec)":      0,
		"offsetof(struct mlx5dv_qp, sq.buf)":     8,
		"offsetof(struct mlx5dv_qp, bf.reg)":     40,
		"offsetof(struct mlx5dv_cq, buf)":        0,
		"offsetof(struct mlx5dv_cq, cq_uar)":     24,
		"offsetof(struct ibv_gid_entry, gid)":    0,
		"offsetof(struct ibv_qp_attr, qp_state)": 0,
		"IBV_QPS_ERR":                            6,
		"IBV_ACCESS_REMOTE_ATOMIC":               8,
		// Where rdma-core 47 and later declare max_dc_rd_atom and
		// max_dc_init_rd_atom in struct mlx5dv_context.
		"offsetof(union mk_dv_context, dc.max_dc_rd_atom)":      152,
		"offsetof(union mk_dv_context, dc.max_dc_init_rd_atom)": 160,
		"MK_DV_CONTEXT_MASK_MAX_DC_RD_ATOM":                     1 << 14,
		// Where rdma-core 49 and later declare active_speed_ex in
		// struct ibv_port_attr.
		"offsetof(union mk_port_attr, ex.active_speed_ex)": 52,
	} {
		got, ok := c[name]
		require.True(t, ok, "%s missing from the C table", name)
		require.Equal(t, want, got, name)
	}
}
