// Package descriptor holds what the providers report of a queue's memory:
// the rings, doorbell records and registers of a QP, CQ or SRQ as
// mlx5dv_init_obj fills them in. Both providers fill these in; ctx keeps
// them with its objects (internal/provider's QPDescriptor, CQDescriptor and
// SRQDescriptor read them back), and the data plane (transport, channel)
// builds its send queues, receive rings and pollers from them.
package descriptor

import "unsafe"

// Ring describes one work queue ring as mlx5dv_init_obj reports it
// (the sq or rq member of struct mlx5dv_qp).
type Ring struct {
	// Buf is the first byte of the ring. It is never Go heap memory.
	Buf unsafe.Pointer
	// WQECnt is the number of entries, a power of two (0 when the queue has
	// no such ring, e.g. the RQ of a QP attached to an SRQ).
	WQECnt uint32
	// Stride is the size of one entry in bytes (64 for a send queue).
	Stride uint32
}

// QP is the Go twin of struct mlx5dv_qp plus the numbers the data
// plane needs from the QP's creation. Both providers fill it in; the data
// plane reads only it.
type QP struct {
	// QPN is the queue pair number (for a DCT: the DCT number).
	QPN uint32
	// DBRec points at the two big-endian doorbell-record words: [0] the
	// receive queue head, [1] the send queue producer index.
	DBRec unsafe.Pointer
	// SQ and RQ are the send and receive rings.
	SQ, RQ Ring
	// BlueFlame is the BlueFlame register (two buffers of BlueFlameSize
	// bytes used alternately); BlueFlameSize is 0 when the QP has none and
	// only the 8-byte doorbell may be used.
	BlueFlame     unsafe.Pointer
	BlueFlameSize uint32
	// MaxInline, MaxSendSGE and MaxRecvSGE are the limits the QP was created
	// with; the builder refuses WQEs beyond them.
	MaxInline  uint32
	MaxSendSGE uint32
	MaxRecvSGE uint32
	// Memory owns the memory SQ, RQ, DBRec and BlueFlame point into. The
	// provider releases that memory only once the QP is closed and Memory
	// is unreachable, so whatever keeps those pointers keeps Memory with
	// them (wqebuilder.Config.Memory, as the transports do): a WQE begun
	// before Close and written after it lands in memory the device no
	// longer reads, never in memory that was freed or reused. nil where
	// the provider has nothing to keep (a DCT).
	Memory any
}

// CQ is the Go twin of struct mlx5dv_cq.
type CQ struct {
	// Buf is the first CQE; CQECnt (a power of two) entries of CQESize (64 or
	// 128) bytes follow.
	Buf     unsafe.Pointer
	CQECnt  uint32
	CQESize uint32
	// DBRec points at the two big-endian words: [0] consumer index, [1] arm.
	DBRec unsafe.Pointer
	// UAR is the CQ's UAR page; the arm doorbell is at prm.CQDoorbellOffset.
	UAR unsafe.Pointer
	// CQN is the completion queue number.
	CQN uint32
	// Memory owns the ring, the doorbell record and the UAR page, as
	// QP.Memory (monocq.Config.Memory keeps it).
	Memory any
}

// SRQ is the Go twin of struct mlx5dv_srq.
type SRQ struct {
	Buf    unsafe.Pointer
	DBRec  unsafe.Pointer
	Stride uint32
	// WQECnt is the number of entries (a power of two).
	WQECnt uint32
	// Head and Tail are the ends of the free list as the provider left it.
	Head, Tail uint32
	SRQN       uint32
	MaxRecvSGE uint32
	// Memory owns the ring and the doorbell record, as
	// QP.Memory.
	Memory any
}
