//go:build cgo && linux

package emulate

import (
	"syscall"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
)

const mmAltPath = 1 << 14 // IB_QP_ALT_PATH

// altPath is an alternate path of a MODIFY_QP: alt_port_num, and the
// alternate address's port, GRH flag and SGID index.
type altPath struct {
	port, destPort, sgid uint8
	global               bool
}

// modifyQPAltCmd sends MODIFY_QP m with the alternate path alt.
func modifyQPAltCmd(k *kernel, a *arena, fd int, m modifyQP, alt altPath) syscall.Errno {
	b := modifyQPBytes(m)
	b[qpDestSize+24] = alt.sgid
	if alt.global {
		b[qpDestSize+30] = 1
	}
	b[qpDestSize+31] = alt.destPort
	b[2*qpDestSize+44] = alt.port
	buf, n := a.writeCmd(cmdModifyQP, b, 0)
	_, en := k.write(fd, buf, n)
	return en
}

// TestModifyQPAlternatePath: the kernel refuses an alternate path before
// mlx5_ib sees it, with EINVAL, when uverbs' modify_qp finds alt_port_num
// or the alternate address's port invalid or different, when
// _ib_modify_qp's rdma_fill_sgid_attr finds its SGID index outside the
// GID table, and when the alternate path or the QP's port is not
// InfiniBand ("Today the core code can only handle alternate paths and
// APM for IB"). Only an alternate path a ConnectX would take meets what
// the model has not: EOPNOTSUPP. Nothing changes on a refusal.
func TestModifyQPAlternatePath(t *testing.T) {
	for _, ll := range []ctx.LinkLayer{ctx.LinkLayerInfiniBand, ctx.LinkLayerEthernet} {
		k := testKernel(t, ll)
		a := newArena(t)
		fd := openNode(t, k, 0)
		en, _, _ := getContext(k, a, fd, ucontextReq(4, 0, 0))
		require.Zero(t, en)
		pd, cq := pdAndCQ(t, k, a, fd)
		h, qpn := qpNumbered(t, k, a, fd, pd, cq, qptRC)
		require.Zero(t, modifyQPCmd(k, a, fd, modifyQP{h: h, mask: mmState | mmPKey | mmPort | mmAccess, state: 1, port: 1, access: accessLocalWrite}))
		rtr := modifyQP{h: h, mask: mmState | mmAV | mmMTU | mmDestQPN | mmRQPSN | mmDestRdAtom | mmMinRNR | mmAltPath,
			state: 2, mtu: 3, pathPort: 1, destQPN: qpn, minRNR: 1, rdAtom: 1}
		gids := k.files[fd].dev.Ports[0].GIDTableLen
		cases := map[string]struct {
			alt  altPath
			want syscall.Errno
		}{
			"alt_port_num 0":            {altPath{0, 1, 0, ll == ctx.LinkLayerEthernet}, unix.EINVAL},
			"alternate address port 0":  {altPath{1, 0, 0, ll == ctx.LinkLayerEthernet}, unix.EINVAL},
			"alt_port_num 2 of 1":       {altPath{2, 2, 0, ll == ctx.LinkLayerEthernet}, unix.EINVAL},
			"SGID index past the table": {altPath{1, 1, uint8(gids), true}, unix.EINVAL},
		}
		if ll == ctx.LinkLayerEthernet {
			cases["a RoCE port"] = struct {
				alt  altPath
				want syscall.Errno
			}{altPath{1, 1, 0, true}, unix.EINVAL}
		} else {
			cases["an InfiniBand port"] = struct {
				alt  altPath
				want syscall.Errno
			}{altPath{1, 1, 0, false}, unix.EOPNOTSUPP}
		}
		for name, c := range cases {
			require.Equal(t, c.want, modifyQPAltCmd(k, a, fd, rtr, c.alt), "%v: %s", ll, name)
			st, err := k.files[fd].uctx.objects[h].qp.State()
			require.NoError(t, err)
			require.Equal(t, ctx.QPStateInit, st, "%v: %s: nothing changes", ll, name)
		}
	}
}
