package monocq

import (
	"math/rand/v2"
	"testing"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/stretchr/testify/require"
)

type testQueue struct{ qpn uint32 }

func TestTableAgainstMap(t *testing.T) {
	var tab Table[testQueue]
	ref := map[uint32]*testQueue{}
	rng := rand.New(rand.NewPCG(5, 6))
	// QPNs cluster the way devices hand them out, plus some far apart.
	pick := func() uint32 {
		if rng.IntN(4) == 0 {
			return rng.Uint32() & 0xffffff
		}
		return 0x1200 + uint32(rng.IntN(8192))
	}
	for i := 0; i < 20000; i++ {
		qpn := pick()
		switch rng.IntN(3) {
		case 0, 1:
			q := &testQueue{qpn: qpn}
			err := tab.Register(qpn, q)
			if ref[qpn] != nil {
				require.ErrorIs(t, err, ErrDuplicateQPN)
			} else {
				require.NoError(t, err)
				ref[qpn] = q
			}
		default:
			q, err := tab.Unregister(qpn)
			if ref[qpn] == nil {
				require.ErrorIs(t, err, ErrUnknownQPN)
				require.Nil(t, q)
			} else {
				require.NoError(t, err)
				require.Same(t, ref[qpn], q)
				delete(ref, qpn)
			}
		}
		probe := pick()
		require.Equal(t, ref[probe], tab.Lookup(probe))
		require.Equal(t, len(ref), tab.Len())
	}
	for qpn, q := range ref {
		require.Same(t, q, tab.Lookup(qpn))
		got, err := tab.get(qpn)
		require.NoError(t, err)
		require.Same(t, q, got)
	}
	// Emptying the table frees every page.
	for qpn := range ref {
		_, err := tab.Unregister(qpn)
		require.NoError(t, err)
	}
	for i, p := range tab.pages {
		require.Nil(t, p, "page %d", i)
	}
	require.Zero(t, tab.Len())
}

func TestTableRefusesBadInput(t *testing.T) {
	var tab Table[testQueue]
	q := &testQueue{}
	require.ErrorIs(t, tab.Register(1<<24, q), ctx.ErrInvalidArgument)
	require.ErrorIs(t, tab.Register(5, nil), ctx.ErrInvalidArgument)
	require.Zero(t, tab.Len())
	require.NoError(t, tab.Register(5, q))
	require.ErrorIs(t, tab.Register(5, &testQueue{}), ErrDuplicateQPN)
	require.Same(t, q, tab.Lookup(5), "a refused Register changes nothing")

	_, err := tab.get(6)
	require.ErrorIs(t, err, ErrUnknownQPN)
	require.Contains(t, err.Error(), "QPN 0x6")
	_, err = tab.get(5 | 1<<24)
	require.ErrorIs(t, err, ErrUnknownQPN, "a QPN wider than 24 bits is never found")
}

func TestTableLookupAllocatesNothing(t *testing.T) {
	tab := new(Table[testQueue])
	for qpn := uint32(100); qpn < 200; qpn++ {
		require.NoError(t, tab.Register(qpn, &testQueue{qpn: qpn}))
	}
	var sum uint32
	require.Zero(t, testing.AllocsPerRun(100, func() {
		for qpn := uint32(90); qpn < 210; qpn++ {
			if q := tab.Lookup(qpn); q != nil {
				sum += q.qpn
			}
		}
		if q, err := tab.get(150); err == nil {
			sum += q.qpn
		}
	}))
	require.Equal(t, uint32(101*(14950+150)), sum)
}
