package channel

import (
	"fmt"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// Memory is the host memory a channel's queues take, in bytes, as the
// provider granted it (rounded-up rings), counted from the queue
// descriptors. It does not count what a device keeps for each queue in its
// own context memory (for a real mlx5 device a QP context per RC queue
// pair; a DCI's context serves every peer) nor the caller's buffers.
type Memory struct {
	Peers int
	// SendRings are the send queue rings (RC: one per peer; DC: the
	// initiator's, shared by every peer).
	SendRings uint64
	// RecvRings are the receive queue rings (RC) or the SRQ rings (DC).
	RecvRings uint64
	// CompletionQueue is the shared CQ ring.
	CompletionQueue uint64
	// DoorbellRecords are the 8-byte doorbell records of the queues.
	DoorbellRecords uint64
	// AddressVectors are the address vectors a DC initiator keeps per
	// target.
	AddressVectors uint64
	// Bookkeeping is the Go heap this package and the transports keep per
	// WQE slot (work request ids, completion records).
	Bookkeeping uint64
}

// Total returns the sum of every part.
func (m Memory) Total() uint64 {
	return m.SendRings + m.RecvRings + m.CompletionQueue + m.DoorbellRecords + m.AddressVectors + m.Bookkeeping
}

// perPeer returns Total divided by the number of peers.
func (m Memory) perPeer() uint64 {
	if m.Peers == 0 {
		return 0
	}
	return m.Total() / uint64(m.Peers)
}

// String formats the parts on one line.
func (m Memory) String() string {
	return fmt.Sprintf("%d peers: send rings %d, receive rings %d, CQ %d, doorbell records %d, address vectors %d, bookkeeping %d; total %d (%d per peer)",
		m.Peers, m.SendRings, m.RecvRings, m.CompletionQueue, m.DoorbellRecords, m.AddressVectors, m.Bookkeeping, m.Total(), m.perPeer())
}

// Memory returns what the prepared channel's queues take.
func (p *PreparedMulti) Memory() Memory {
	if p.zero() {
		return Memory{}
	}
	return p.c.memory()
}

// Memory returns what the channel's queues take.
func (m *MultiChannel) Memory() Memory {
	if m.zero() {
		return Memory{}
	}
	return m.c.memory()
}

func (c *core) memory() Memory {
	const wrid = 8 // bytes of work request id kept per WQE slot
	m := Memory{Peers: len(c.links)}
	qp := func(q *ctx.QueuePair) {
		d := provider.QPDescriptor(q)
		m.SendRings += uint64(d.SQ.WQECnt) * uint64(d.SQ.Stride)
		m.RecvRings += uint64(d.RQ.WQECnt) * uint64(d.RQ.Stride)
		if d.SQ.WQECnt+d.RQ.WQECnt > 0 {
			// A DCT has no rings and, as rdma-core creates it, no
			// doorbell record.
			m.DoorbellRecords += prm.DoorbellRecordSize
		}
		m.Bookkeeping += uint64(d.SQ.WQECnt+d.RQ.WQECnt) * wrid
	}
	if c.dci != nil {
		qp(c.dci.Handle())
	}
	for i := range c.links {
		l := &c.links[i]
		if l.qp != nil {
			qp(l.qp.Handle())
		}
		if l.dct != nil {
			qp(l.dct.Handle())
		}
		if l.srq != nil {
			d := provider.SRQDescriptor(l.srq.Handle())
			m.RecvRings += uint64(d.WQECnt) * uint64(d.Stride)
			m.DoorbellRecords += prm.DoorbellRecordSize
			m.Bookkeeping += uint64(d.WQECnt) * (wrid + 1)
		}
		if l.remote != nil {
			m.AddressVectors += prm.AVSize
		}
	}
	d := provider.CQDescriptor(c.cq)
	m.CompletionQueue = uint64(d.CQECnt) * uint64(d.CQESize)
	m.DoorbellRecords += prm.DoorbellRecordSize
	m.Bookkeeping += uint64(len(c.slots)) * uint64(unsafe.Sizeof(slot{}))
	return m
}
