package ctx

import (
	"errors"
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/kerrno"
	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// ProtectionDomain groups memory regions, queue pairs, SRQs and address
// handles that may be used together. Closing it closes all of them.
type ProtectionDomain struct {
	node
	ctx *Context
	h   pdHandle
}

// Context returns the Context the PD belongs to.
func (pd *ProtectionDomain) Context() *Context { return pd.ctx }

// Closed reports whether the PD has been closed (directly or by its Context).
func (pd *ProtectionDomain) Closed() bool { return pd.isClosed() }

// Close closes every QP, SRQ, address handle and memory region of the PD,
// then the PD. It is idempotent.
//
// Close of a nil *ProtectionDomain, or of a zero ProtectionDomain (not made by this package),
// returns nil.
func (pd *ProtectionDomain) Close() error {
	if pd == nil || pd.t == nil {
		return nil
	}
	pd.t.mu.Lock()
	defer pd.t.mu.Unlock()
	return opErr("close PD", pd.closeLocked())
}

// RegisterMemory registers b, which must be memory from a Buffer or other
// mmap'd memory (never Go heap: the device or the software HCA reads and
// writes it behind the Go runtime's back), with the given access. Memory
// that is not mapped (a slice of a Buffer kept past its Close) is refused
// with EFAULT and ErrInvalidArgument, as the kernel refuses it; an empty
// b with EINVAL and ErrInvalidArgument.
func (pd *ProtectionDomain) RegisterMemory(b []byte, access Access) (*MemoryRegion, error) {
	return pd.register("register MR", unsafe.Pointer(unsafe.SliceData(b)), uint64(len(b)), access, nil)
}

// RegisterBuffer registers the whole of buf. The buffer is held for the
// region before the registration waits for the Context's lock, so a Close
// of buf on another goroutine meanwhile leaves it mapped for the region
// (or, when it ran first, gets the registration refused with ErrClosed).
// A nil or zero buf (not made by AllocBuffer) is refused with
// ErrInvalidArgument.
func (pd *ProtectionDomain) RegisterBuffer(buf *Buffer, access Access) (*MemoryRegion, error) {
	const op = "register MR"
	if buf == nil || buf.mapping == nil {
		return nil, &OpError{Op: op, Err: fmt.Errorf("buffer: nil or %w", errZero)}
	}
	data := buf.holdRegion()
	if data == nil {
		return nil, &OpError{Op: op, Err: fmt.Errorf("buffer: %w", ErrClosed)}
	}
	return pd.register(op, unsafe.Pointer(unsafe.SliceData(data)), uint64(len(data)), access, []*Buffer{buf})
}

// register registers [addr, addr+n). held are the buffers the caller
// holds for the region already (holdRegion), released on failure; when
// nil, the buffers the range overlaps are held here (holdBuffersOf).
func (pd *ProtectionDomain) register(op string, addr unsafe.Pointer, n uint64, access Access, held []*Buffer) (*MemoryRegion, error) {
	fail := func(err error) (*MemoryRegion, error) {
		if rerr := releaseRegions(held); rerr != nil {
			err = errors.Join(err, rerr)
		}
		return nil, err
	}
	if err := checkAccess("ibv_reg_mr", access); err != nil {
		return fail(&OpError{Op: op, Err: err})
	}
	if n == 0 { // ib_umem_get: a region of no pages
		return fail(&OpError{Op: op, Err: kerrno.New("ibv_reg_mr", "length 0", unix.EINVAL, ErrInvalidArgument)})
	}
	if err := pd.lockPD(op); err != nil {
		return fail(err)
	}
	defer pd.t.mu.Unlock()
	// The buffers the memory lies in are held before the provider looks at
	// the memory: a Close of the buffer on another goroutine meanwhile then
	// leaves it mapped for the region, instead of unmapping it between the
	// provider's check and the hold (a region over unmapped memory, or
	// memory mapped again for something else, that the device writes).
	if held == nil {
		held = holdBuffersOf(addr, n)
	}
	x, err := pd.h.RegisterMemory(addr, n, access)
	if err != nil {
		return fail(opErr(op, err))
	}
	h := x.(mrHandle)
	mr := &MemoryRegion{pd: pd, h: h, addr: addr, length: n, access: access, lkey: h.LKey(), rkey: h.RKey()}
	release := h.Close
	if held != nil {
		// The buffers stay mapped until the region is deregistered.
		release = func() error { return errors.Join(h.Close(), releaseRegions(held)) }
	}
	mr.node.init(pd.t, rankMemoryRegion, release, &pd.node)
	return mr, nil
}

// MemoryRegion is a registered range of memory.
type MemoryRegion struct {
	node
	pd *ProtectionDomain
	h  mrHandle
	// addr is the registered memory; nil for a dma-buf region, whose
	// address is iova.
	addr       unsafe.Pointer
	iova       uint64
	dmabuf     bool
	length     uint64
	access     Access
	lkey, rkey uint32
}

// LKey is the local key used in data segments.
func (mr *MemoryRegion) LKey() uint32 { return mr.lkey }

// RKey is the remote key a peer uses for RDMA and atomics.
func (mr *MemoryRegion) RKey() uint32 { return mr.rkey }

// Addr returns the first address of the region: the address the local
// SGEs that use LKey and the peers that use RKey name. For a dma-buf
// region (RegisterDMABuf) it is the iova given at registration, not a
// host address.
func (mr *MemoryRegion) Addr() uintptr {
	if mr.dmabuf {
		return uintptr(mr.iova)
	}
	return uintptr(mr.addr)
}

// Pointer returns the first address of the region as a pointer; nil for a
// dma-buf region, whose memory is not Go-addressable.
func (mr *MemoryRegion) Pointer() unsafe.Pointer { return mr.addr }

// Len returns the length of the region in bytes.
func (mr *MemoryRegion) Len() uint64 { return mr.length }

// Bytes returns the region's memory. It must not be used after the memory is
// unmapped. It is nil for a dma-buf region (RegisterDMABuf): map the
// buffer yourself to reach its bytes from the host.
func (mr *MemoryRegion) Bytes() []byte {
	if mr.addr == nil {
		return nil
	}
	return unsafe.Slice((*byte)(mr.addr), mr.length)
}

// Access returns the access flags the region was registered with.
func (mr *MemoryRegion) Access() Access { return mr.access }

// ProtectionDomain returns the PD the region belongs to.
func (mr *MemoryRegion) ProtectionDomain() *ProtectionDomain { return mr.pd }

// Closed reports whether the region has been deregistered.
func (mr *MemoryRegion) Closed() bool { return mr.isClosed() }

// Close deregisters the region. It is idempotent.
//
// Close of a nil *MemoryRegion, or of a zero MemoryRegion (not made by this package),
// returns nil.
func (mr *MemoryRegion) Close() error {
	if mr == nil || mr.t == nil {
		return nil
	}
	mr.t.mu.Lock()
	defer mr.t.mu.Unlock()
	return opErr("deregister MR", mr.closeLocked())
}

// CompletionQueue is a completion queue. Its ring is read by a poller
// (transport.NewPoller, transport.NewCQ).
type CompletionQueue struct {
	node
	ctx  *Context
	h    cqHandle
	desc descriptor.CQ
	cfg  CompletionQueueConfig
}

// CQN returns the completion queue number.
func (cq *CompletionQueue) CQN() uint32 { return cq.desc.CQN }

// Config returns the configuration the CQ was created with.
func (cq *CompletionQueue) Config() CompletionQueueConfig { return cq.cfg }

// Context returns the Context the CQ belongs to.
func (cq *CompletionQueue) Context() *Context { return cq.ctx }

// eventFD returns the completion channel descriptor, -1 without one, for
// a closed CQ and for a zero CompletionQueue. It holds the tree lock, so
// that a Close on another goroutine, which closes the descriptor, cannot
// run between the check and the read (a number the process may have
// given to another file meanwhile).
func (cq *CompletionQueue) eventFD() int {
	if cq.lock("CQ event channel") != nil {
		return -1
	}
	defer cq.t.mu.Unlock()
	return cq.h.EventFD()
}

// readEvent consumes and acknowledges one completion event without
// blocking; ok is false when none is pending. For every event it returns,
// the poller of the ring must advance its arm sequence number
// (monocq.CQ.AcknowledgeEvent) before it arms again; completion.Notifier
// does both (see the package documentation).
func (cq *CompletionQueue) readEvent() (ok bool, err error) {
	const op = "read CQ event"
	if err := cq.lock(op); err != nil {
		return false, err
	}
	defer cq.t.mu.Unlock()
	ok, err = cq.h.ReadEvent()
	return ok, opErr(op, err)
}

// Closed reports whether the CQ has been closed.
func (cq *CompletionQueue) Closed() bool { return cq.isClosed() }

// Close closes every QP that uses the CQ, then the CQ. It is idempotent.
//
// Close of a nil *CompletionQueue, or of a zero CompletionQueue (not made by this package),
// returns nil.
func (cq *CompletionQueue) Close() error {
	if cq == nil || cq.t == nil {
		return nil
	}
	cq.t.mu.Lock()
	defer cq.t.mu.Unlock()
	return opErr("close CQ", cq.closeLocked())
}

// SharedReceiveQueue is a shared receive queue.
type SharedReceiveQueue struct {
	node
	pd   *ProtectionDomain
	h    srqHandle
	desc descriptor.SRQ
	cfg  SRQConfig
}

// CreateSRQ creates a shared receive queue.
func (pd *ProtectionDomain) CreateSRQ(cfg SRQConfig) (*SharedReceiveQueue, error) {
	const op = "create SRQ"
	if cfg.Depth == 0 {
		return nil, &OpError{Op: op, Err: fmt.Errorf("depth 0: %w", ErrInvalidArgument)}
	}
	if cfg.MaxSGE == 0 {
		cfg.MaxSGE = 1
	}
	if err := pd.lockPD(op); err != nil {
		return nil, err
	}
	defer pd.t.mu.Unlock()
	x, err := pd.h.CreateSRQ(cfg)
	if err != nil {
		return nil, opErr(op, err)
	}
	h := x.(srqHandle)
	s := &SharedReceiveQueue{pd: pd, h: h, desc: h.Descriptor(), cfg: cfg}
	s.node.init(pd.t, rankSRQ, h.Close, &pd.node)
	return s, nil
}

// SRQN returns the SRQ number.
func (s *SharedReceiveQueue) SRQN() uint32 { return s.desc.SRQN }

// ProtectionDomain returns the PD the SRQ belongs to.
func (s *SharedReceiveQueue) ProtectionDomain() *ProtectionDomain { return s.pd }

// Closed reports whether the SRQ has been closed.
func (s *SharedReceiveQueue) Closed() bool { return s.isClosed() }

// Close closes every QP attached to the SRQ, then the SRQ. Idempotent.
//
// Close of a nil *SharedReceiveQueue, or of a zero SharedReceiveQueue (not made by this package),
// returns nil.
func (s *SharedReceiveQueue) Close() error {
	if s == nil || s.t == nil {
		return nil
	}
	s.t.mu.Lock()
	defer s.t.mu.Unlock()
	return opErr("close SRQ", s.closeLocked())
}

// AddressHandle is a resolved path to a remote port, as the 48-byte address
// vector a UD or DC send WQE carries.
type AddressHandle struct {
	node
	pd *ProtectionDomain
	h  ahHandle
	av [prm.AVSize]byte
}

// CreateAddressHandle resolves attr into an address vector. An address
// with a field wider than its verbs and PRM field (SL above 15,
// SrcPathBits above 127, StaticRate above 24, FlowLabel above 2^20-1), or
// with an SL above 7 on an Ethernet port, fails with ErrInvalidArgument
// before the provider is called.
func (pd *ProtectionDomain) CreateAddressHandle(attr AddressAttr) (*AddressHandle, error) {
	const op = "create AH"
	if pd == nil {
		return nil, &OpError{Op: op, Err: errNilPD}
	}
	if pd.t == nil {
		return nil, &OpError{Op: op, Err: errZero}
	}
	if attr.Port == 0 {
		attr.Port = 1
	}
	if err := attr.validate(""); err != nil {
		return nil, &OpError{Op: op, Err: err}
	}
	if err := checkRoCESL(pd.ctx.QueryPort, attr.Port, attr.SL, "SL"); err != nil {
		return nil, &OpError{Op: op, Err: err}
	}
	if err := pd.lock(op); err != nil {
		return nil, err
	}
	defer pd.t.mu.Unlock()
	x, err := pd.h.CreateAddressHandle(attr)
	if err != nil {
		return nil, opErr(op, err)
	}
	h := x.(ahHandle)
	ah := &AddressHandle{pd: pd, h: h, av: h.AV()}
	ah.node.init(pd.t, rankAddressHandle, h.Close, &pd.node)
	return ah, nil
}

// AV returns the address vector bytes (struct mlx5_wqe_av) with the key and
// remote QPN fields left zero for the WQE builder.
func (ah *AddressHandle) AV() [prm.AVSize]byte { return ah.av }

// ProtectionDomain returns the protection domain the handle was created in
// (nil for a zero AddressHandle).
func (ah *AddressHandle) ProtectionDomain() *ProtectionDomain { return ah.pd }

// Closed reports whether the handle has been closed.
func (ah *AddressHandle) Closed() bool { return ah.isClosed() }

// Close destroys the handle. It is idempotent.
//
// Close of a nil *AddressHandle, or of a zero AddressHandle (not made by this package),
// returns nil.
func (ah *AddressHandle) Close() error {
	if ah == nil || ah.t == nil {
		return nil
	}
	ah.t.mu.Lock()
	defer ah.t.mu.Unlock()
	return opErr("destroy AH", ah.closeLocked())
}
