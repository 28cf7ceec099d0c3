package transport_test

import (
	"bytes"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/internal/transport/transporttest"
	"github.com/mlx5kit/mlx5kit/sim"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// A scatter entry of 2^31 bytes or more (bit 31 of the byte count set) is
// refused with ErrSGETooLong, on a QP's own receive queue and on an SRQ:
// nothing is written to the ring or the doorbell record, and the error
// stays when entries follow. The longest entry, 2^31-1 bytes, is posted
// as it is.
func TestReceiveSGETooLong(t *testing.T) {
	for name, mk := range map[string]func(*testing.T, *transporttest.Env) recvTarget{"RQ": ownRQ, "SRQ": sharedRQ} {
		t.Run(name, func(t *testing.T) {
			e := transporttest.New(t, sim.Options{})
			q := mk(t, e)
			addr, lkey := e.Addr(1, 0), e.LKey(1)
			for _, n := range []uint32{1 << 31, 1<<31 + 64, 0xffffffff} {
				// Each case adds good entries (before), the bad one, then
				// good ones again (after): the ring holds what the good
				// entries before it wrote, in the stage's free slot, and
				// nothing more.
				for i, c := range []struct {
					before, after int
					doorbell      bool
				}{{0, 0, true}, {1, 0, false}, {0, 1, true}, {3, 0, false}, {1, 5, true}} {
					ring, dbrec, out := bytes.Clone(q.ring), bytes.Clone(q.dbrec), q.outstanding()
					s := q.begin(1)
					for range c.before {
						s = s.SGE(addr, 8, lkey)
					}
					mid := bytes.Clone(q.ring)
					s = s.SGE(addr, n, lkey)
					for range c.after {
						s = s.SGE(addr, 8, lkey)
					}
					var err error
					if c.doorbell {
						err = s.FinishDoorbell()
					} else {
						err = s.Finish()
					}
					require.ErrorIs(t, err, wqebuilder.ErrSGETooLong, "%#x case %d", n, i)
					require.ErrorIs(t, err, wqebuilder.ErrSGETooLong)
					var pe *wqebuilder.PostError
					require.True(t, errors.As(err, &pe))
					require.Equal(t, "post receive", pe.Op)
					require.Equal(t, mid, q.ring, "%#x case %d: written after the refused entry", n, i)
					if c.before == 0 {
						require.Equal(t, ring, q.ring)
					}
					require.Equal(t, dbrec, q.dbrec)
					require.Equal(t, out, q.outstanding())
				}
				ring := bytes.Clone(q.ring)
				require.ErrorIs(t, q.post(1, addr, n, lkey), wqebuilder.ErrSGETooLong)
				require.Equal(t, ring, q.ring)
			}
			require.NoError(t, q.begin(2).SGE(addr, wqebuilder.MaxSGELength, lkey).FinishDoorbell())
			require.Equal(t, uint32(1), q.outstanding())
			require.Zero(t, testing.AllocsPerRun(50, func() {
				_ = q.begin(3).SGE(addr, 1<<31, lkey).Finish()
			}))
		})
	}
}
