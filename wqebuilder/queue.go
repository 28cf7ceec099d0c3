package wqebuilder

import (
	"errors"
	"fmt"
	"sync/atomic"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/blueflame"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// Config describes a send queue as the provider handed it out (the sq, dbrec
// and bf members of struct mlx5dv_qp) plus the limits the QP was created
// with. It is plain data: transports fill it from what the provider
// reported of the QP.
type Config struct {
	// Buf is the first WQEBB of the send ring; WQECnt WQEBBs of 64 bytes
	// follow. It is never Go heap memory.
	Buf unsafe.Pointer
	// WQECnt is the number of WQEBBs in the ring, a power of two from 2 to
	// 65536 (the CQE's 16-bit wqe_counter must name every slot).
	WQECnt uint32
	// QPN is the queue pair number (24 bits).
	QPN uint32
	// DBRec is the doorbell record: two big-endian words, the send queue's
	// producer index goes to the second.
	DBRec unsafe.Pointer
	// BlueFlame is the doorbell / BlueFlame register; BlueFlameSize the
	// size of one of its two buffers (0: doorbell only).
	BlueFlame     unsafe.Pointer
	BlueFlameSize uint32
	// MaxInline is the most inline payload one WQE may carry (max_inline_data).
	MaxInline uint32
	// MaxSGE is the most data segments one WQE may carry (max_send_sge).
	MaxSGE uint32
	// MaxWQEBBs is the size in WQEBBs of the largest WQE: Begin refuses to
	// start a WQE unless that many WQEBBs are free, and a WQE that grows
	// beyond it fails with ErrWQETooLarge. 0 picks the size of the largest
	// WQE the other limits allow (ctrl, address vector, remote address and
	// MaxSGE data segments or MaxInline bytes inline, at least the 8
	// segments of a DC masked 64-bit compare-and-swap). It must be 2 to 16
	// (a WQE has at most 63 segments) and at most WQECnt.
	MaxWQEBBs uint32
	// Transport names the owner of the queue in its errors (PostError's
	// Transport): "rc", "dc", "ud"; empty for "wqebuilder".
	Transport string
	// Refusal, when not nil, is the error of every WQE begun while the queue
	// is full, in place of a *PostError wrapping ErrQueueFull. A transport
	// hands out the stages of such a queue, kept full, for a QP that cannot
	// post, and Refusal says why (not connected, in error, closed).
	Refusal func() error
	// Memory is the owner of the ring, the doorbell record and the
	// register (what the provider reported): the queue keeps it reachable,
	// and with it every stage, since a stage holds its queue. A stage
	// begun before the QP was destroyed and written after it then writes
	// to memory the device no longer reads, never to memory the provider
	// freed. Leave it nil only for memory that outlives the queue anyway.
	Memory any
}

// maxWQEBBsLimit is the largest WQE in WQEBBs: ds is a 6-bit count.
const maxWQEBBsLimit = (prm.MaxDS + prm.SegmentsPerWQEBB - 1) / prm.SegmentsPerWQEBB

// minWQEBBs is the smallest MaxWQEBBs: a WQE with an address vector and an
// atomic (up to 8 segments) must fit the headroom whatever the limits say.
const minWQEBBs = 2

// record is the bookkeeping per WQEBB, for the WQE that starts there: the
// producer index after it (see Complete) and its wrid. Both are written by
// one commit and read by one Complete, from one cache line.
type record struct {
	end, wrid uint64
}

// recordSize is the size of a record.
const recordSize = 16

// SendQueue is the producer side of one send queue: it hands out stages that
// write WQEs into the ring, keeps the producer and consumer indexes and the
// per-WQE bookkeeping, and rings the doorbell. A SendQueue is used by one
// goroutine at a time.
type SendQueue struct {
	// The fields a post reads come first.
	buf, end unsafe.Pointer
	// The indexes run free in 64 bits, so that they never wrap (see
	// Complete); the device sees their low 16 bits.
	pi      uint64         // producer index, free-running in WQEBBs
	ci      uint64         // consumer index: WQEBBs retired by completions
	limit   uint64         // Begin needs pi - ci <= limit (WQECnt - MaxWQEBBs)
	mask    uint32         // WQECnt - 1
	closed  atomic.Uint32  // closedBit once Close ran, from any goroutine; countingBit (see refused)
	qpn8    uint64         // QPN << 8, ready for qpn_ds
	rung    uint64         // producer index the doorbell record holds
	records unsafe.Pointer // [WQECnt]record
	lastDB  uint64         // first 8 bytes of the last finished WQE
	// sgeLimit[ds] is the state-word bits that bound the data segments of
	// a WQE whose payload starts after ds segments: its room and limit
	// error (see stRoomShift).
	sgeLimit [8]uint64
	maxDS    uint32 // largest ds of one WQE
	maxInl   uint32
	db       blueflame.SendDoorbell // register, doorbell record and ring bounds
	scratch  unsafe.Pointer         // where a WQE begun on a full queue is written
	// wrid is the wrid of the last Begin, which commit records. Begin
	// writing the record itself would take it over the inliner's budget.
	wrid uint64
	// open is the control segment of the WQE the last Begin started in the
	// ring, until a Finish commits it; 0 otherwise. A number, not a
	// pointer: storing it costs no GC write barrier.
	open uintptr

	// counters is set by EnableCounters, which also sets countingBit in
	// closed: finish and RingDoorbell then take their flagged paths, which
	// count.
	counters *SendCounters

	recordMem  []record
	scratchMem []uint64
	cfg        Config
	// errs holds the queue's *PostErrors, made on first use: by reason
	// (see whyStale) and opcode.
	errs *[numWhy][opIndexMask + 1]error
}

var (
	// ErrQueueFull means that fewer than MaxWQEBBs WQEBBs were free when the
	// WQE began: completions must retire earlier WQEs first.
	ErrQueueFull = errors.New("send queue full")
	// ErrInlineTooLong means that the inline payload exceeds MaxInline.
	ErrInlineTooLong = errors.New("inline data longer than max inline")
	// ErrTooManySGE means that the WQE has more data segments than MaxSGE
	// (for a receive WQE of the transports: more scatter entries than the
	// queue's max receive SGE).
	ErrTooManySGE = errors.New("more scatter/gather entries than max SGE")
	// ErrWQETooLarge means that the WQE outgrew MaxWQEBBs.
	ErrWQETooLarge = errors.New("WQE larger than max WQEBBs")
	// ErrSGETooLong means that a data segment was given more than
	// MaxSGELength bytes: bit 31 of its byte count would be set, which the
	// device reads as an inline segment.
	// The transports return it for a receive scatter entry too.
	ErrSGETooLong = errors.New("scatter/gather entry longer than 2^31-1 bytes")
	// ErrStaleStage means that Finish was called on a stage whose WQE is
	// no longer the next one: the stage (or a copy of it) was finished
	// already, or a later Begin was finished first. Nothing is written.
	ErrStaleStage = errors.New("stage finished twice or out of order")
)

// PostError is the error of a refused post, of a send WQE the builder
// refused (Finish) and of the transports' refused sends and receives: the
// queue's owner, the verb, the QPN (or SRQ number) and the reason, a
// sentinel matched with errors.Is (ErrQueueFull, ErrInlineTooLong,
// ErrTooManySGE, ErrWQETooLarge, ErrSGETooLong, ErrStaleStage,
// ctx.ErrClosed here; the transports' own sentinels from package
// transport). A queue makes each of its errors once, so that returning one
// again allocates nothing.
type PostError struct {
	// Transport is the owner of the queue: Config.Transport ("rc", "dc",
	// "ud"), or "wqebuilder".
	Transport string
	// Op is the verb: "post" and the opcode of the refused send WQE
	// ("post RDMA_WRITE"), or "post send" or "post receive" when a queue
	// pair refused the post before a WQE was built.
	Op string
	// Opcode is the opcode of the refused send WQE (OpNop when the post was
	// refused before its opcode was known, and for receives).
	Opcode Opcode
	// QPN is the queue pair's number, or the SRQ number when SRQ is set.
	QPN uint32
	// SRQ reports a receive refused by a shared receive queue.
	SRQ bool
	// Err is the sentinel that says why.
	Err error
}

// Error reads "rc: post RDMA_WRITE on QP 0x11c: send queue full", or
// "rc: post receive on SRQ 0x2: receive queue full".
func (e *PostError) Error() string {
	what := "QP"
	if e.SRQ {
		what = "SRQ"
	}
	return fmt.Sprintf("%s: %s on %s %#x: %v", e.Transport, e.Op, what, e.QPN, e.Err)
}

// Unwrap returns the sentinel error.
func (e *PostError) Unwrap() error { return e.Err }

var _ error = (*PostError)(nil)

// MaxSGELength is the longest data segment, in bytes: the byte count of
// struct mlx5_wqe_data_seg is 31 bits, its bit 31 the inline flag (and a
// byte count of 0 means 2 GiB to the device, which is why a zero-length SGE
// adds no segment).
const MaxSGELength = 1<<31 - 1

// Error bits of a failed WQE in the state word: the stages record
// errInline and errTooLarge (inline data) and errLimit (a data segment the
// WQE had no room for, or one above MaxSGELength; the limit error bits of
// the state word say which).
const (
	errInline   = 1 << iota // inline payload above MaxInline
	errTooLarge             // WQE above MaxWQEBBs
	errLimit                // data segments above MaxSGE or MaxWQEBBs, or one above MaxSGELength
)

// Reasons a WQE is refused, in the order failure reports them: a closed
// queue first, then a full queue (the stages then wrote to the scratch area), then the stages'
// errors, of which a WQE has at most one kind besides an SGE above
// MaxSGELength (that one is reported in place of a limit met before it).
const (
	whyStale = iota
	whyFull
	whyInline
	whyTooLarge
	whySGE
	whySGELength
	whyClosed
	numWhy
)

// whyErrors are the sentinels of the reasons.
var whyErrors = [numWhy]error{ErrStaleStage, ErrQueueFull, ErrInlineTooLong, ErrWQETooLarge, ErrTooManySGE, ErrSGETooLong, ctx.ErrClosed}

// opIndexMask folds an opcode into the error table; every opcode the stages
// write is below 32.
const opIndexMask = 31

// failure is the error of a WQE whose Finish was refused, from its control
// segment and state word: ctx.ErrClosed once Close ran, then Refusal's, or ErrQueueFull, for a WQE begun on a
// full queue, then the error the stages recorded, else ErrStaleStage. Each
// error is made once per queue, reason and opcode, so that a Finish refused
// again, as a full queue's is until completions come, allocates nothing.
func (q *SendQueue) failure(ctrl unsafe.Pointer, st uint64) error {
	set := st >> stErrShift
	why := whyStale
	switch {
	case q.cfg.Refusal != nil && (ctrl == q.scratch || q.closed.Load()&closedBit != 0):
		// A refusing queue refuses every WQE with its owner's reason,
		// also one begun after a Complete emptied it (see Refusal).
		return q.cfg.Refusal()
	case q.closed.Load()&closedBit != 0:
		why = whyClosed
	case ctrl == q.scratch:
		why = whyFull
	case set&errInline != 0:
		why = whyInline
	case set&errTooLarge != 0:
		why = whyTooLarge
	case set&errLimit != 0:
		switch st >> stLimitErrShift & 0xf {
		case limitSGE:
			why = whySGE
		case limitTooLarge:
			why = whyTooLarge
		default:
			why = whySGELength
		}
	}
	if q.errs == nil {
		q.errs = new([numWhy][opIndexMask + 1]error)
	}
	op := st >> stOpShift & opIndexMask
	e := &q.errs[why][op]
	if *e == nil {
		name := q.cfg.Transport
		if name == "" {
			name = "wqebuilder"
		}
		*e = &PostError{Transport: name, Op: "post " + prm.Opcode(op).String(), Opcode: prm.Opcode(op), QPN: q.cfg.QPN, Err: whyErrors[why]}
	}
	return *e
}

// Close stops the queue for good, and may be called from any goroutine:
// from then on Finish refuses every stage, those begun before Close
// included, with a *PostError wrapping ctx.ErrClosed and writes nothing, and
// RingDoorbell rings nothing (WQEs finished before Close and not yet rung
// stay unpublished). Close does not touch the ring: a stage kept across it
// may go on writing there, to memory that Config.Memory keeps mapped until
// the queue is unreachable. It is idempotent.
//
// A post racing with a Close on another goroutine either ends in that
// error or goes through to a QP that is being destroyed; it never writes
// to freed memory.
//
// Close of a nil *SendQueue does nothing.
func (q *SendQueue) Close() {
	if q != nil {
		q.closed.Or(closedBit)
	}
}

// Closed reports whether Close has run.
func (q *SendQueue) Closed() bool { return q.closed.Load()&closedBit != 0 }

// The bits of SendQueue.closed. The post's one check of the word (refused)
// sends a WQE of a closed or a counting queue off the inlined path.
const (
	closedBit = 1 << iota
	countingBit
)

// New validates cfg and returns a send queue over its ring. The ring, the
// doorbell record and the register are not written until the first post.
func New(cfg Config) (*SendQueue, error) {
	bad := func(format string, args ...any) (*SendQueue, error) {
		return nil, fmt.Errorf("wqebuilder: new send queue: "+format+": %w", append(args, ctx.ErrInvalidArgument)...)
	}
	switch {
	case cfg.Buf == nil:
		return bad("nil ring")
	case uintptr(cfg.Buf)%prm.WQEBBSize != 0:
		return bad("ring %p not %d-byte aligned", cfg.Buf, prm.WQEBBSize)
	case cfg.WQECnt < 2 || cfg.WQECnt > 1<<16 || cfg.WQECnt&(cfg.WQECnt-1) != 0:
		return bad("wqe count %d not a power of two from 2 to 65536", cfg.WQECnt)
	case cfg.QPN > prm.CtrlQPNMask:
		return bad("QPN %#x wider than 24 bits", cfg.QPN)
	case cfg.DBRec == nil:
		return bad("nil doorbell record")
	case uintptr(cfg.DBRec)%4 != 0:
		return bad("doorbell record %p not 4-byte aligned", cfg.DBRec)
	case cfg.MaxSGE > prm.MaxDS:
		return bad("max SGE %d above %d", cfg.MaxSGE, prm.MaxDS)
	case cfg.MaxInline > prm.MaxDS*prm.SegmentSize:
		return bad("max inline %d above %d", cfg.MaxInline, prm.MaxDS*prm.SegmentSize)
	}
	if cfg.MaxWQEBBs == 0 {
		cfg.MaxWQEBBs = defaultMaxWQEBBs(cfg.MaxSGE, cfg.MaxInline)
		if cfg.MaxWQEBBs > cfg.WQECnt {
			return bad("ring of %d WQEBBs smaller than the largest WQE (%d WQEBBs)", cfg.WQECnt, cfg.MaxWQEBBs)
		}
	}
	if cfg.MaxWQEBBs < minWQEBBs || cfg.MaxWQEBBs > maxWQEBBsLimit || cfg.MaxWQEBBs > cfg.WQECnt {
		return bad("max WQEBBs %d not in [%d, min(%d, wqe count %d)]",
			cfg.MaxWQEBBs, minWQEBBs, maxWQEBBsLimit, cfg.WQECnt)
	}
	reg, err := blueflame.NewRegister(cfg.BlueFlame, cfg.BlueFlameSize)
	if err != nil {
		return bad("%w", err)
	}
	end := unsafe.Add(cfg.Buf, uintptr(cfg.WQECnt)*prm.WQEBBSize)
	db, err := blueflame.NewSendDoorbell(reg, cfg.DBRec, cfg.Buf, end)
	if err != nil {
		return bad("%w", err)
	}
	q := &SendQueue{
		buf:        cfg.Buf,
		end:        end,
		mask:       cfg.WQECnt - 1,
		limit:      uint64(cfg.WQECnt - cfg.MaxWQEBBs),
		qpn8:       uint64(cfg.QPN << prm.CtrlQPNShift),
		maxDS:      min(cfg.MaxWQEBBs*prm.SegmentsPerWQEBB, prm.MaxDS),
		maxInl:     cfg.MaxInline,
		db:         db,
		recordMem:  make([]record, cfg.WQECnt),
		scratchMem: make([]uint64, (cfg.MaxWQEBBs+1)*prm.WQEBBSize/8),
		cfg:        cfg, // cfg.Memory keeps the memory reachable
	}
	for ds := range q.sgeLimit {
		// The payload may grow to ds+MaxSGE segments unless the WQE size
		// stops it first; the limit error says which limit was hit.
		lim, which := uint32(ds)+cfg.MaxSGE, uint64(limitSGE)
		if lim > q.maxDS {
			lim, which = q.maxDS, limitTooLarge
		}
		q.sgeLimit[ds] = uint64(lim-min(lim, uint32(ds)))<<stRoomShift | which<<stLimitErrShift
	}
	q.records = unsafe.Pointer(&q.recordMem[0])
	// A WQE begun on a full queue writes to a private scratch area instead
	// of the ring: the largest WQE's size and one WQEBB more, so that the
	// next-segment pointer of even the largest WQE stays inside it (a
	// pointer one past a Go allocation is invalid; checkptr, on with -race,
	// stops the program).
	q.scratch = unsafe.Pointer(&q.scratchMem[0])
	return q, nil
}

// defaultMaxWQEBBs is the MaxWQEBBs that New picks when the Config leaves it
// 0: the WQEBBs of the largest WQE any transport can build within maxSGE data
// segments or maxInline bytes of inline data.
func defaultMaxWQEBBs(maxSGE, maxInline uint32) uint32 {
	// ctrl + address vector + remote address, then the payload.
	overhead := uint32(1 + prm.AVSegments + 1)
	payload := max(maxSGE, uint32(prm.InlineDS(int(maxInline))), 3) // masked CS64 + data: 3
	ds := min(overhead+payload, prm.MaxDS)
	return max((ds+prm.SegmentsPerWQEBB-1)/prm.SegmentsPerWQEBB, minWQEBBs)
}

// Config returns the configuration the queue was created with (MaxWQEBBs
// filled in).
func (q *SendQueue) Config() Config { return q.cfg }

// ProducerIndex returns the producer index: the WQEBBs posted so far,
// free-running (the WQE index of the next WQE is its low 16 bits).
func (q *SendQueue) ProducerIndex() uint32 { return uint32(q.pi) }

// ConsumerIndex returns the WQEBBs retired by Complete so far, free-running.
func (q *SendQueue) ConsumerIndex() uint32 { return uint32(q.ci) }

// Outstanding returns the WQEBBs posted and not yet retired.
func (q *SendQueue) Outstanding() uint32 { return uint32(q.pi - q.ci) }

// Free returns the WQEBBs not in flight. Begin succeeds while at least
// MaxWQEBBs are free.
func (q *SendQueue) Free() uint32 { return q.mask + 1 - uint32(q.pi-q.ci) }

// Pending reports whether WQEs were finished since the doorbell last rang.
func (q *SendQueue) Pending() bool { return q.rung != q.pi }

// Register returns the queue's doorbell / BlueFlame register.
func (q *SendQueue) Register() *blueflame.Register { return &q.db.Register }

// Complete retires the WQE whose first WQEBB has index wqeCounter (the
// wqe_counter of its CQE) together with every earlier WQE, signaled or not,
// as rdma-core's wqe_head bookkeeping does, and returns the wrid given to its
// Begin. ok is false, and nothing changes, when wqeCounter does not name the
// start of a WQE in flight.
//
// Finish records at each WQE's first slot the 64-bit producer index after
// it, 1 to MaxWQEBBs ahead of the slot's own index. A counter that falls
// inside a WQE in flight, as a corrupt or duplicated CQE may carry, finds
// in its slot 0 (never written) or the end of a WQE that began there on an
// earlier lap, at most MaxWQEBBs <= WQECnt past an index at least WQECnt
// below its own: a value not ahead of it, so it is refused instead of
// retiring by the payload bytes it lands on. (The 64-bit indexes never
// wrap, so "not ahead" is exact.)
func (q *SendQueue) Complete(wqeCounter uint16) (wrid uint64, ok bool) {
	ci := q.ci
	at := ci + uint64(wqeCounter-uint16(ci))
	// The slot from the counter alone (the ring has at most 2^16 WQEBBs):
	// the record's address does not wait for the consumer index of the
	// previous completion.
	r := (*record)(unsafe.Add(q.records, (uintptr(wqeCounter)&uintptr(q.mask))*recordSize))
	end := r.end
	if at-ci >= q.pi-ci || end-at-1 > uint64(q.mask) {
		return 0, false
	}
	q.ci = end
	return r.wrid, true
}

// RingDoorbell publishes the WQEs finished since the last doorbell: it sets
// the doorbell record to the producer index and writes the first 8 bytes of
// the last of them to the register (rdma-core's doorbell for a batch). It
// does nothing when no WQE is pending, or after Close.
func (q *SendQueue) RingDoorbell() {
	if q.rung == q.pi {
		return
	}
	if q.closed.Load() != 0 {
		q.ringFlagged()
		return
	}
	q.db.Ring(uint32(q.pi), unsafe.Pointer(&q.lastDB))
	q.rung = q.pi
}

// Flags are the per-WQE flags of Begin: bits of the control segment's
// fm_ce_se byte. Begin writes the bits of Signaled and Solicited and the
// whole fence-mode field (bits 5 to 7, which Fence and SmallFence set:
// a value there that neither sets reaches the device as it is); any other
// bit of a Flags value is dropped, not refused (a check would cost every
// post).
type Flags uint8

// Flags for Begin.
const (
	// Signaled asks for a CQE for this WQE (IBV_SEND_SIGNALED). Unsignaled
	// WQEs are retired by the next signaled one's completion.
	Signaled = Flags(prm.FlagCQUpdate)
	// Solicited sets the solicited-event bit (IBV_SEND_SOLICITED).
	Solicited = Flags(prm.FlagSolicited)
	// Fence makes the WQE wait for earlier RDMA reads and atomics
	// (IBV_SEND_FENCE, MLX5_WQE_CTRL_FENCE).
	Fence = Flags(prm.FlagFence)
	// SmallFence is the initiator small fence
	// (MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE).
	SmallFence = Flags(prm.FlagInitiatorSmallFence)

	flagsMask = Signaled | Solicited | Flags(prm.FlagFenceMask)
)

// Begin starts a WQE at the producer index with the given work request id
// (returned by Complete) and flags. When fewer than MaxWQEBBs WQEBBs are
// free the stage carries ErrQueueFull: its writes go to a private scratch
// area, never to the ring, and Finish returns the error.
//
// One WQE is built at a time: a Begin before the last stage was finished
// starts over at the same index, and the WQE finished there records the
// wrid of the latest Begin (a stage finished after another one is refused
// with ErrStaleStage).
func (q *SendQueue) Begin(wrid uint64, flags Flags) CtrlStage {
	// The state word starts as the constant ds 1 whether the queue is full
	// or not, so that the compiler folds the segment counts of an inlined
	// post into constants: Finish tells a full stage by its control segment
	// in the scratch area, and a stale one by a control segment that is not
	// the open one.
	pi := q.pi
	q.wrid = wrid
	ctrl, open := q.scratch, uintptr(0)
	// A branch, not a conditional move: the consumer index was stored by
	// the last Complete, and a conditional move would make the control
	// segment's address, and so every store of the WQE, wait for it. The
	// branch is predicted (PostPoll took 36-41 cycles instead of 35 with
	// the conditional move, on an AMD EPYC).
	if pi-q.ci <= q.limit {
		ctrl = unsafe.Add(q.buf, (uintptr(pi)&uintptr(q.mask))<<prm.WQEBBShift)
		open = uintptr(ctrl)
	}
	q.open = open
	// Bytes 8..15: signature 0, DCI stream 0, fm_ce_se, immediate 0 (as a
	// little-endian word, fm_ce_se is bits 31..24).
	*(*uint64)(unsafe.Add(ctrl, prm.CtrlSignature)) = uint64(flags&flagsMask) << 24
	// ds 1: the control segment.
	return CtrlStage{OpStage{wqe{q, ctrl, unsafe.Add(ctrl, prm.CtrlSize), 1}}}
}
