package reliability

import (
	"fmt"

	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/transport"
)

// The reference model. It knows, per queue pair, the work requests that
// are outstanding in the order they were posted and what each should do,
// and it checks every completion against that:
//
//   - a completion names a work request that is outstanding (else it is a
//     duplicate or names nothing: an error);
//   - before the queue pair fails, a completion retires the unsignaled work
//     requests before it, which ran successfully, and no signaled one may be
//     skipped (that one would be lost);
//   - the first error completion carries the syndrome the model predicted
//     for that work request (a wrong rkey, an SGE outside its region, RNR
//     retries exhausted, a receive too small …), or is a flush after the
//     queue pair was moved to error;
//   - after it, every outstanding work request completes with WR_FLUSH_ERR,
//     exactly once, in order;
//   - a successful work request's effect (RDMA write, read, atomic) is
//     applied to the shadow memory when it is retired, so that memory can be
//     compared byte for byte.
//
// Receives are matched by work request id (in order for a receive queue of
// the QP's own, in any order for an SRQ); the payload of every SEND carries
// its sequence number and is checked against the message that number names.

// sendWR is a send work request the model waits for.
type sendWR struct {
	wrid     uint64
	signaled bool
	nop      bool
	// expect is the error the model predicts for this work request if it
	// runs (0: success); a flush overrides it.
	expect prm.Syndrome
	// local marks a predicted error found before the request leaves the
	// HCA (an SGE outside its region), which wins over a dead peer.
	local bool
	apply func()   // the effect of a successful execution on the shadows
	msg   *message // the message a SEND or RDMA_WRITE_IMM carries
}

// message is what a receive-consuming work request delivers.
type message struct {
	seq       uint64
	n         int           // payload bytes
	op        prm.CQEOpcode // the receive completion's opcode
	imm       uint32
	to        *rqModel
	ud        bool
	sent      bool // its send work request completed successfully
	delivered int
}

// sqModel is the send side of a queue pair.
type sqModel struct {
	s        *soak
	name     string
	out      []sendWR
	errored  bool // an error or flush completion was seen
	mayFlush bool // it was moved to error (a flush is expected)
	// dead is set when the model predicted a failure in the current batch:
	// the work requests after it will be flushed.
	dead bool
}

// recvWR is a receive work request the model waits for.
type recvWR struct {
	wrid uint64
	slot int // offset of its buffer in the receive region
	size int
}

// rqModel is a receive queue (a QP's own, or an SRQ).
type rqModel struct {
	s        *soak
	name     string
	fifo     bool
	region   *region
	skip     int // bytes before the payload (the GRH space of UD)
	out      []recvWR
	errored  bool
	mayFlush bool
	// lengthErrors is the number of LOCAL_LENGTH receive errors expected
	// (a SEND larger than the receive buffer).
	lengthErrors int
}

func (m *sqModel) fail(format string, args ...any) {
	m.s.t.Helper()
	m.s.t.Fatalf("%s: %s", m.name, fmt.Sprintf(format, args...))
}

func (m *rqModel) fail(format string, args ...any) {
	m.s.t.Helper()
	m.s.t.Fatalf("%s: %s", m.name, fmt.Sprintf(format, args...))
}

// succeed records a successful execution.
func (m *sqModel) succeed(w *sendWR, how string) {
	if w.expect != 0 {
		m.fail("wrid %d: predicted %v, %s", w.wrid, w.expect, how)
	}
	if w.apply != nil {
		w.apply()
	}
	if w.msg != nil {
		w.msg.sent = true
	}
	m.s.n.succeeded++
}

// complete checks one send completion.
func (m *sqModel) complete(c *transport.Completion) {
	i := -1
	for k := range m.out {
		if m.out[k].wrid == c.WRID {
			i = k
			break
		}
	}
	if c.Match != transport.MatchOK && c.Match != transport.MatchError {
		m.fail("completion %v for wrid %d (%v)", c.Match, c.WRID, c.Err())
	}
	if i < 0 {
		m.fail("completion (%v, %v) for wrid %d, which is not outstanding: duplicated", c.Opcode, c.Syndrome, c.WRID)
	}
	w := &m.out[i]
	flush := c.Match == transport.MatchError && c.Syndrome == prm.SyndromeWRFlush
	switch {
	case c.Match == transport.MatchOK:
		if m.errored {
			m.fail("wrid %d completed successfully after the queue pair failed", c.WRID)
		}
		if !w.signaled {
			m.fail("wrid %d is unsignaled but has a successful completion", c.WRID)
		}
		m.retireBefore(i)
		m.succeed(w, "completed successfully")
		m.s.n.signaled++
	case flush:
		if m.errored {
			if i != 0 {
				m.fail("flush of wrid %d skips %d outstanding work requests (wrid %d first): they are lost", c.WRID, i, m.out[0].wrid)
			}
		} else {
			if !m.mayFlush {
				m.fail("wrid %d flushed, but nothing moved the queue pair to error", c.WRID)
			}
			m.retireBefore(i)
		}
		m.errored = true
		m.s.n.flushed++
	default:
		if m.errored {
			m.fail("wrid %d: error %v after the queue pair had failed (want WR_FLUSH_ERR)", c.WRID, c.Syndrome)
		}
		if c.Syndrome != w.expect {
			if w.expect == 0 {
				m.fail("wrid %d: error completion %v, the model predicted success", c.WRID, c.Syndrome)
			}
			m.fail("wrid %d: error completion %v, the model predicted %v", c.WRID, c.Syndrome, w.expect)
		}
		m.retireBefore(i)
		m.errored = true
		m.s.n.errorCQEs[c.Syndrome]++
	}
	m.out = m.out[i+1:]
}

// retireBefore retires the work requests before index i, which a
// completion retires with it: they must be unsignaled and ran successfully.
func (m *sqModel) retireBefore(i int) {
	for k := 0; k < i; k++ {
		w := &m.out[k]
		if w.signaled {
			m.fail("signaled wrid %d was retired without its completion: lost", w.wrid)
		}
		m.succeed(w, "retired by a later completion")
		m.s.n.implicit++
	}
}

// findRecv returns the index of the receive wrid names, checking the order
// of a receive queue of the QP's own.
func (m *rqModel) findRecv(c *transport.Completion) int {
	for k := range m.out {
		if m.out[k].wrid == c.WRID {
			if m.fifo && k != 0 {
				m.fail("receive wrid %d completed before wrid %d, which was posted first", c.WRID, m.out[0].wrid)
			}
			return k
		}
	}
	m.fail("receive completion (%v, %v) for wrid %d, which is not outstanding: duplicated", c.Opcode, c.Syndrome, c.WRID)
	return -1
}

// complete checks one receive completion, and the bytes it delivered.
func (m *rqModel) complete(c *transport.Completion) {
	if c.Match != transport.MatchOK && c.Match != transport.MatchError {
		m.fail("receive completion %v for wrid %d (%v)", c.Match, c.WRID, c.Err())
	}
	i := m.findRecv(c)
	r := m.out[i]
	m.out = append(m.out[:i], m.out[i+1:]...)
	if c.Match == transport.MatchError {
		switch {
		case c.Syndrome == prm.SyndromeWRFlush:
			if !m.errored && !m.mayFlush {
				m.fail("receive wrid %d flushed, but nothing moved the queue pair to error", c.WRID)
			}
			m.s.n.recvFlushed++
		case c.Syndrome == prm.SyndromeLocalLength && m.lengthErrors > 0:
			m.lengthErrors--
			m.s.n.recvErrors[c.Syndrome]++
		default:
			m.fail("receive wrid %d: unexpected error %v", c.WRID, c.Syndrome)
		}
		if m.fifo {
			// A receive queue of the QP's own fails with its QP; an SRQ
			// behind a DCT does not.
			m.errored = true
		}
		return
	}
	if m.errored {
		m.fail("receive wrid %d completed successfully after the queue pair had failed", c.WRID)
	}
	s := m.s
	s.n.received++
	slot := m.region.mem[r.slot : r.slot+r.size]
	shadow := m.region.shadow[r.slot : r.slot+r.size]
	var msg *message
	switch c.Opcode {
	case prm.CQERespWrImm:
		msg = s.byImm[c.Immediate]
		if msg == nil || msg.op != prm.CQERespWrImm {
			m.fail("RDMA_WRITE_IMM receive with immediate %#x names no message", c.Immediate)
		}
	case prm.CQERespSend, prm.CQERespSendImm:
		n := int(c.ByteCount) - m.skip
		if n < 8 || m.skip+n > r.size {
			m.fail("receive wrid %d: byte count %d in a buffer of %d", c.WRID, c.ByteCount, r.size)
		}
		seq, ok := checkMessage(slot[m.skip : m.skip+n])
		if !ok {
			m.fail("receive wrid %d: %d bytes that are not the message they claim to be (seq %d)", c.WRID, n, seq)
		}
		msg = s.bySeq[seq]
		if msg == nil {
			m.fail("receive wrid %d: message %d was never sent", c.WRID, seq)
		}
		copy(shadow[m.skip:], slot[m.skip:m.skip+n])
		if c.GRH && m.skip > 0 {
			copy(shadow[:m.skip], slot[:m.skip])
		}
	default:
		m.fail("receive wrid %d: opcode %v", c.WRID, c.Opcode)
	}
	if msg.to != m {
		m.fail("message %d for %s arrived at %s", msg.seq, msg.to.name, m.name)
	}
	if c.Opcode != msg.op || int(c.ByteCount) != msg.n+m.skip {
		m.fail("message %d: completion %v with %d bytes, the model says %v with %d", msg.seq, c.Opcode, c.ByteCount, msg.op, msg.n+m.skip)
	}
	if (msg.op == prm.CQERespSendImm || msg.op == prm.CQERespWrImm) && c.Immediate != msg.imm {
		m.fail("message %d: immediate %#x, the model says %#x", msg.seq, c.Immediate, msg.imm)
	}
	msg.delivered++
	if !msg.ud && msg.delivered > 1 {
		m.fail("message %d delivered %d times", msg.seq, msg.delivered)
	}
	if msg.ud && msg.delivered > 2 {
		m.fail("UD message %d delivered %d times (the fault injector duplicates once)", msg.seq, msg.delivered)
	}
}
