package sim

import (
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// TestParseSendSmallAgrees: for WQEs of the shapes small messages take and
// of others near them (other opcodes, an SGE instead of inline data, two
// segments, bytes of the control, address or inline segment changed, a
// doorbell that announces less than the WQE), parseSendSmall either
// declines or leaves the WQE exactly as parseSendAt does, with no
// syndrome and no violation. It must take most of the unchanged small
// WQEs, or it would not be the fast path it is for.
func TestParseSendSmallAgrees(t *testing.T) {
	e := newEnv(t, Options{Strict: true})
	e.allowViolations = true // the changed WQEs' faults, found on purpose
	a, _ := e.rcPair(qpOpts{sendDepth: 64})
	q := e.f.qps[a.qp.QPN()]
	rng := rand.New(rand.NewPCG(20, 26))
	ops := []prm.Opcode{prm.OpSend, prm.OpSendImm, prm.OpRdmaWrite, prm.OpRdmaWriteImm,
		prm.OpRdmaRead, prm.OpNop, prm.OpAtomicFA, prm.OpSendInval}
	took, plain := 0, 0
	for i := 0; i < 20000; i++ {
		op := ops[rng.IntN(len(ops))]
		var segs [][]byte
		if op.HasRaddr() {
			segs = append(segs, raddrSeg(rng.Uint64(), rng.Uint32()))
		}
		data := make([]byte, 1+rng.IntN(120))
		for j := range data {
			data[j] = byte(rng.Uint32())
		}
		switch rng.IntN(8) {
		case 0:
			segs = append(segs, dataSeg(uint32(len(data)), e.mr.LKey(), e.addr(0)))
		case 1:
			segs = append(segs, inlineSeg(data[:1]), inlineSeg(data))
		default:
			segs = append(segs, inlineSeg(data))
		}
		w := a.build(op, 0, uint8(rng.IntN(256)), rng.Uint32(), segs...)
		changed := rng.IntN(2) == 0
		if changed {
			for k := 1 + rng.IntN(3); k > 0; k-- {
				w[rng.IntN(min(len(w), 64))] ^= byte(1 << rng.IntN(8))
			}
		}
		at := a.write(w)
		q.sqPI = a.pi
		if rng.IntN(10) == 0 {
			q.sqPI = at + 1 // the doorbell announced one WQEBB
		}
		var small, full sendWQE
		before := e.f.stats.Violations
		took1 := e.f.parseSendSmall(q, &small, at)
		synd := e.f.parseSendAt(q, &full, at)
		if !took1 {
			continue
		}
		took++
		require.Zero(t, synd, "WQE %d (%x): parseSendSmall took what parseSendAt refuses", i, w)
		require.Equal(t, before, e.f.stats.Violations, "WQE %d (%x): parseSendSmall took a WQE with a violation", i, w)
		require.Equal(t, full, small, "WQE %d (%x)", i, w)
		if !changed {
			plain++
		}
	}
	require.Greater(t, plain, 2000, "small WQEs taken by parseSendSmall")
	require.Greater(t, took, plain, "changed WQEs that are still small are taken too")
	require.NotZero(t, e.f.stats.Violations, "parseSendAt found the changed WQEs' faults")
	t.Logf("%d WQEs taken, %d of them unchanged", took, plain)
}
