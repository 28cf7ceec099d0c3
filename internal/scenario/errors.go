package scenario

import (
	"errors"
	"fmt"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
	"github.com/mlx5kit/mlx5kit/wqebuilder"
)

// requireError checks an error completion: for wrid, with the syndrome,
// and matched to its work request.
func requireError(c transport.Completion, wrid uint64, opcode prm.CQEOpcode, syndrome prm.Syndrome) error {
	return firstErr(
		check("error completion status", c.Match, transport.MatchError),
		check("error completion opcode", c.Opcode, opcode),
		check("error completion wrid", c.WRID, wrid),
		check("error completion syndrome", c.Syndrome, syndrome),
	)
}

// requireRefused checks that the queue pair is in error and refuses a post.
func requireRefused(qp *rc.QP) error {
	if st := qp.State(); st != transport.StateError {
		return fmt.Errorf("QP %#x after an error completion: state %v, want %v", qp.QPN(), st, transport.StateError)
	}
	_, err := qp.Post(99, wqebuilder.Signaled)
	if !errors.Is(err, transport.ErrQPError) {
		return fmt.Errorf("post on QP %#x in error: %v, want %v", qp.QPN(), err, transport.ErrQPError)
	}
	return nil
}

// ErrorRemoteAccess makes three RDMA_WRITEs fail, each on a fresh pair of
// RC queue pairs: one with an rkey that names no region and one into a
// region registered without remote write complete with REMOTE_ACCESS_ERR,
// one whose local buffer is given with a wrong lkey completes with
// LOCAL_PROT_ERR. The destination must be untouched, the queue pair in
// error, and a further post refused with ErrQPError.
func ErrorRemoteAccess(c *ctx.Context, o Options) error {
	return run("ErrorRemoteAccess", c, o, func(e *env) error {
		const n, dst = 64, 4096
		local, err := e.pd.RegisterMemory(e.mem(1, 512<<10, 4096), ctx.AccessLocalWrite)
		if err != nil {
			return err
		}
		cases := []struct {
			what     string
			raddr    uint64
			rkey     uint32
			lkey     uint32
			syndrome prm.Syndrome
			dstSide  int
			dstOff   int
		}{
			{"wrong rkey", e.addr(1, dst), e.rkey(1) ^ 0x00ffff00, e.lkey(0), prm.SyndromeRemoteAccess, 1, dst},
			{"region without remote write", uint64(local.Addr()), local.RKey(), e.lkey(0), prm.SyndromeRemoteAccess, 1, 512 << 10},
			{"wrong lkey", e.addr(1, dst), e.rkey(1), e.lkey(0) ^ 0x00ffff00, prm.SyndromeLocalProt, 1, dst},
		}
		for k, x := range cases {
			a, _, err := e.rcPair(e.rcConfig(0), e.rcConfig(0))
			if err != nil {
				return err
			}
			e.fill(0, 0, n, uint64(k))
			e.poisonAt(x.dstSide, x.dstOff, n)
			untouched := make([]byte, n)
			for i := range untouched {
				untouched[i] = poison
			}
			wrid := uint64(k + 1)
			s, err := a.Post(wrid, wqebuilder.Signaled)
			if err != nil {
				return err
			}
			if err := s.RdmaWrite(x.raddr, x.rkey).SGE(e.addr(0, 0), n, x.lkey).FinishBlueFlame(); err != nil {
				return err
			}
			cs, err := e.wait(0, 1)
			if err != nil {
				return fmt.Errorf("%s: %w", x.what, err)
			}
			if err := firstErr(
				requireError(cs[0], wrid, prm.CQEReqErr, x.syndrome),
				check("error completion WQE opcode", cs[0].SendOpcode, prm.OpRdmaWrite),
				e.expect(x.dstSide, x.dstOff, untouched, x.what+": destination"),
				requireRefused(a),
			); err != nil {
				return fmt.Errorf("%s: %w", x.what, err)
			}
			if err := e.quiet(0); err != nil {
				return fmt.Errorf("%s: %w", x.what, err)
			}
		}
		return nil
	})
}

// ErrorFlush moves queue pairs to the error state with work outstanding:
// sixteen signaled RDMA_WRITEs posted behind one doorbell just before the
// move complete in order, each exactly once, those the device had not
// finished with WR_FLUSH_ERR; eight receives posted on the peer all flush,
// in order, each exactly once. Both queue pairs then refuse posts.
func ErrorFlush(c *ctx.Context, o Options) error {
	return run("ErrorFlush", c, o, func(e *env) error {
		a, b, err := e.rcPair(e.rcConfig(0), e.rcConfig(16))
		if err != nil {
			return err
		}
		const sends, recvs, n = 16, 8, 4096
		e.fill(0, 0, sends*n, 9)
		for k := range sends {
			s, err := a.Post(uint64(k+1), wqebuilder.Signaled)
			if err != nil {
				return err
			}
			if err := s.RdmaWrite(e.addr(1, k*n), e.rkey(1)).SGE(e.addr(0, k*n), n, e.lkey(0)).Finish(); err != nil {
				return err
			}
		}
		a.RingDoorbell()
		if err := a.Fail(); err != nil {
			return err
		}
		cs, err := e.wait(0, sends)
		if err != nil {
			return err
		}
		flushed := 0
		for k, c := range cs {
			if err := check("send completion order: wrid", c.WRID, uint64(k+1)); err != nil {
				return err
			}
			switch {
			case c.Match == transport.MatchOK && flushed == 0:
			case c.IsFlush():
				flushed++
			default:
				return fmt.Errorf("send %d: %s after %d flushes (want successes, then only WR_FLUSH_ERR)", k+1, describe(cs[k:k+1]), flushed)
			}
		}
		if err := firstErr(e.quiet(0), requireRefused(a)); err != nil {
			return err
		}

		for k := range recvs {
			if err := b.PostRecv(uint64(500+k), e.addr(1, 512<<10+k*256), 256, e.lkey(1)); err != nil {
				return err
			}
		}
		if err := b.Fail(); err != nil {
			return err
		}
		rs, err := e.wait(1, recvs)
		if err != nil {
			return err
		}
		for k, c := range rs {
			if err := firstErr(
				requireError(c, uint64(500+k), prm.CQERespErr, prm.SyndromeWRFlush),
				check("flushed receive QPN", c.QPN, b.QPN()),
			); err != nil {
				return fmt.Errorf("receive %d: %w", k, err)
			}
		}
		if err := firstErr(e.quiet(1), requireRefused(b), check("receives outstanding after the flush", b.RecvOutstanding(), uint32(0))); err != nil {
			return err
		}
		if err := b.PostRecv(1, e.addr(1, 0), 16, e.lkey(1)); !errors.Is(err, transport.ErrQPError) {
			return fmt.Errorf("post receive on QP %#x in error: %v, want %v", b.QPN(), err, transport.ErrQPError)
		}
		return nil
	})
}
