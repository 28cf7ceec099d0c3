//go:build cgo && linux

package verbs

/*
#include "mlx5kit_verbs.h"
*/
import "C"

import (
	"errors"
	"fmt"
	"syscall"
	"time"
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/descriptor"
	"github.com/mlx5kit/mlx5kit/internal/devattr"

	"github.com/mlx5kit/mlx5kit/ctx"
	"golang.org/x/sys/unix"
)

// CompletionQueue is a struct ibv_cq created with mlx5dv_create_cq and
// handed to the data plane with mlx5dv_init_obj. From then on rdma-core
// treats the CQ as owned by the direct-verbs user: it never moves the
// consumer index, and ibv_poll_cq / ibv_req_notify_cq must not be used on
// it. The data plane polls the ring itself and arms the CQ by writing the
// arm doorbell (prm.CQDoorbellOffset in the UAR page); each event read
// through ReadEvent advances the arm sequence number the next arm must
// carry.
type CompletionQueue struct {
	d       *Device
	cqx     *C.struct_ibv_cq_ex
	cq      *C.struct_ibv_cq
	channel *C.struct_ibv_comp_channel
	desc    descriptor.CQ
	events  uint64
	closed  bool
	// ext is the parent domain the CQ is created through: its ring and
	// doorbell record come from ext.arena (extalloc.go).
	ext extDomain
}

// CreateCompletionQueue creates a CQ through mlx5dv_create_cq (the
// extended ibv_create_cq_ex path with the mlx5 attributes), with a
// completion channel when cfg.EventChannel is set, and fills its
// descriptor with mlx5dv_init_obj.
func (d *Device) CreateCompletionQueue(cfg CQConfig) (*CompletionQueue, error) {
	const verb = "mlx5dv_create_cq"
	if err := checkCQConfig(&cfg, d.dv); err != nil {
		return nil, err
	}
	detail := fmt.Sprintf("depth %d CQE %d", cfg.Depth, cfg.CQESize)
	if err := d.use(verb); err != nil {
		return nil, err
	}
	defer d.mu.Unlock()
	if n := uint32(d.c.num_comp_vectors); cfg.CompVector >= n {
		// The uverbs core refuses it with EINVAL.
		return nil, &VerbError{Verb: verb, Detail: fmt.Sprintf("%s: completion vector %d of %d", detail, cfg.CompVector, n),
			Errno: syscall.EINVAL, Sentinel: ctx.ErrInvalidArgument}
	}

	cq := &CompletionQueue{d: d}
	var err error
	if cfg.EventChannel {
		ch, errno := C.ibv_create_comp_channel(d.c)
		if ch == nil {
			return nil, ptrError("ibv_create_comp_channel", fmt.Sprintf("%q", d.name), errno)
		}
		cq.channel = ch
		if err = setNonblock("completion channel", int(ch.fd)); err != nil {
			cq.destroy()
			return nil, err
		}
	}

	var attr C.struct_ibv_cq_init_attr_ex
	attr.cqe = C.uint32_t(cfg.Depth)
	attr.channel = cq.channel
	attr.comp_vector = C.uint32_t(cfg.CompVector)
	var dv C.struct_mlx5dv_cq_init_attr
	dv.comp_mask = C.MLX5DV_CQ_INIT_ATTR_MASK_CQE_SIZE
	dv.cqe_size = C.uint16_t(cfg.CQESize)
	if format, ok := compressionFormat(cfg.Compression); ok {
		dv.comp_mask |= C.MLX5DV_CQ_INIT_ATTR_MASK_COMPRESSED_CQE
		dv.cqe_comp_res_format = C.uint8_t(format)
	}
	if cfg.CQEPadding {
		dv.comp_mask |= C.MLX5DV_CQ_INIT_ATTR_MASK_FLAGS
		dv.flags |= C.MLX5DV_CQ_INIT_ATTR_FLAGS_CQE_PAD
	}
	if cfg.Timestamps {
		// The device's free-running clock in every CQE (the kernel's
		// IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION); ClockInfo converts.
		attr.wc_flags |= C.IBV_WC_EX_WITH_COMPLETION_TIMESTAMP
	}
	if cq.ext, err = d.cqDomain(); err != nil {
		cq.destroy()
		return nil, err
	}
	attr.comp_mask |= C.IBV_CQ_INIT_ATTR_MASK_PD
	attr.parent_domain = cq.ext.pdd
	cqx, errno := C.mlx5dv_create_cq(d.c, &attr, &dv)
	if cqx == nil {
		cq.destroy()
		return nil, ptrError(verb, fmt.Sprintf("%q %s", d.name, detail), errno)
	}
	cq.cqx = cqx
	cq.cq = C.mk_cq_ex_to_cq(cqx)

	var out C.struct_mlx5dv_cq
	if ret := C.mk_init_cq(cq.cq, &out); ret != 0 {
		err = retError("mlx5dv_init_obj", "CQ", int(ret), nil)
		cq.destroy()
		return nil, err
	}
	cq.desc = descriptor.CQ{
		Buf:     out.buf,
		CQECnt:  uint32(out.cqe_cnt),
		CQESize: uint32(out.cqe_size),
		DBRec:   unsafe.Pointer(out.dbrec),
		UAR:     out.cq_uar,
		CQN:     uint32(out.cqn),
		Memory:  d.queueMemory(cq.ext.arena, nil),
	}
	d.cqs[unsafe.Pointer(cq.cq)] = cq
	return cq, nil
}

// checkCQConfig refuses, before anything is created, a configuration that
// is out of range (ErrInvalidArgument) or that the device's mlx5dv
// attributes dv do not offer (ErrNotSupported). It fills the default CQE
// size.
func checkCQConfig(cfg *CQConfig, dv DVAttr) error {
	const verb = "mlx5dv_create_cq"
	if cfg.CQESize == 0 {
		cfg.CQESize = 64
	}
	detail := fmt.Sprintf("depth %d CQE %d", cfg.Depth, cfg.CQESize)
	bad := func(why string) error {
		return &VerbError{Verb: verb, Detail: detail + ": " + why, Sentinel: ctx.ErrInvalidArgument}
	}
	switch {
	case cfg.Depth == 0:
		return bad("depth 0")
	case cfg.CQESize != 64 && cfg.CQESize != 128:
		return bad("CQE size must be 64 or 128")
	case cfg.CQEPadding && cfg.CQESize != 128:
		return bad("padding needs 128-byte CQEs")
	case cfg.Compression > ctx.CQECompressionChecksum:
		return bad(fmt.Sprintf("compression %v", cfg.Compression))
	}
	if format, ok := compressionFormat(cfg.Compression); ok {
		if dv.CQECompressionMaxNum == 0 || dv.CQECompressionFormats&format == 0 {
			return &VerbError{Verb: verb, Detail: fmt.Sprintf("%s: CQE compression with the %v mini-CQE format", detail, cfg.Compression), Sentinel: ctx.ErrNotSupported}
		}
		if cfg.CQESize == 128 && dv.Flags&devattr.DVFlagCQE128Compression == 0 {
			return &VerbError{Verb: verb, Detail: detail + ": CQE compression with 128-byte CQEs", Sentinel: ctx.ErrNotSupported}
		}
	}
	if cfg.CQEPadding && dv.Flags&devattr.DVFlagCQE128Padding == 0 {
		return &VerbError{Verb: verb, Detail: detail + ": 128-byte CQE padding", Sentinel: ctx.ErrNotSupported}
	}
	return nil
}

// compressionFormat returns the enum mlx5dv_cqe_comp_res_format bit of a
// mini-CQE format; ok is false for CQECompressionNone.
func compressionFormat(c ctx.CQECompression) (format uint32, ok bool) {
	switch c {
	case ctx.CQECompressionHash:
		return devattr.CQECompressionFormatHash, true
	case ctx.CQECompressionChecksum:
		return devattr.CQECompressionFormatChecksum, true
	}
	return 0, false
}

// destroy releases what CreateCompletionQueue made; d.mu is held.
func (cq *CompletionQueue) destroy() error {
	var errs []error
	if cq.cq != nil {
		if ret, errno := C.ibv_destroy_cq(cq.cq); ret != 0 {
			return retError("ibv_destroy_cq", fmt.Sprintf("CQN %#x", cq.desc.CQN), int(ret), errno)
		}
		cq.cq, cq.cqx = nil, nil
	}
	// A CQ that got its Memory keeps its ring mapped until that is
	// collected; one that did not (a failed creation) unmaps it now.
	release := cq.ext.abandon
	if cq.desc.Memory != nil {
		release = cq.ext.dealloc
	}
	if err := release(); err != nil {
		errs = append(errs, err)
	}
	if cq.channel != nil {
		if ret, errno := C.ibv_destroy_comp_channel(cq.channel); ret != 0 {
			errs = append(errs, retError("ibv_destroy_comp_channel", "", int(ret), errno))
		} else {
			cq.channel = nil
		}
	}
	return errors.Join(errs...)
}

// Descriptor returns the ring, doorbell record, UAR page and CQN.
func (cq *CompletionQueue) Descriptor() descriptor.CQ { return cq.desc }

// EventFD is the completion channel's descriptor (non-blocking), or -1
// without a channel.
func (cq *CompletionQueue) EventFD() int {
	cq.d.mu.Lock()
	defer cq.d.mu.Unlock()
	if cq.channel == nil || cq.closed {
		return -1
	}
	return int(cq.channel.fd)
}

// Events returns how many completion events ReadEvent has consumed. The arm
// sequence number of the next arm doorbell is Events() & 3.
func (cq *CompletionQueue) Events() uint64 {
	cq.d.mu.Lock()
	defer cq.d.mu.Unlock()
	return cq.events
}

// ReadEvent consumes one completion event without blocking
// (ibv_get_cq_event) and acknowledges it at once (ibv_ack_cq_events), so
// that destroying the CQ never waits for unacknowledged events. ok is false
// when no event is pending.
func (cq *CompletionQueue) ReadEvent() (ok bool, err error) {
	const verb = "ibv_get_cq_event"
	if err := cq.d.use(verb); err != nil {
		return false, err
	}
	defer cq.d.mu.Unlock()
	if cq.closed {
		return false, errClosed(verb)
	}
	if cq.channel == nil {
		return false, &VerbError{Verb: verb, Detail: fmt.Sprintf("CQN %#x: created without EventChannel", cq.desc.CQN), Sentinel: ctx.ErrInvalidArgument}
	}
	var evcq *C.struct_ibv_cq
	ret, errno := C.mk_get_cq_event(cq.channel, &evcq)
	if ret != 0 {
		if errors.Is(errno, syscall.EAGAIN) {
			return false, nil
		}
		return false, ptrError(verb, fmt.Sprintf("CQN %#x", cq.desc.CQN), errno)
	}
	C.ibv_ack_cq_events(evcq, 1)
	if evcq != cq.cq {
		// A channel belongs to one CQ here; an event for another CQ means
		// the channel was shared behind this package's back.
		return false, &VerbError{Verb: verb, Detail: fmt.Sprintf("CQN %#x: event for another CQ", cq.desc.CQN), Errno: syscall.EPROTO}
	}
	cq.events++
	return true, nil
}

// waitEventSlice is the longest WaitEvent polls the channel's descriptor
// before it checks again that the CQ is open: a Close on another
// goroutine closes the descriptor, which does not wake a poll already
// waiting on it (the poll holds the file).
const waitEventSlice = 100 * time.Millisecond

// WaitEvent waits up to timeout (negative: forever) for a completion event
// on the channel's descriptor and consumes it; ok is false on timeout. The
// CQ must have been armed by the data plane first. A Close on another
// goroutine ends the wait with ErrClosed within waitEventSlice.
func (cq *CompletionQueue) WaitEvent(timeout time.Duration) (ok bool, err error) {
	fd := cq.EventFD()
	if fd < 0 {
		if _, err := cq.ReadEvent(); err != nil {
			return false, err // closed: ErrClosed
		}
		return false, &VerbError{Verb: "poll", Detail: fmt.Sprintf("CQN %#x: no completion channel", cq.desc.CQN), Sentinel: ctx.ErrInvalidArgument}
	}
	deadline := time.Now().Add(timeout)
	for {
		if ok, err := cq.ReadEvent(); ok || err != nil {
			return ok, err
		}
		wait := waitEventSlice
		if timeout >= 0 {
			left := time.Until(deadline)
			if left <= 0 {
				return false, nil
			}
			wait = min(wait, left)
		}
		ms := int((wait + time.Millisecond - 1) / time.Millisecond)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		if _, err := unix.Poll(fds, ms); err != nil && !errors.Is(err, syscall.EINTR) {
			var en syscall.Errno
			errors.As(err, &en)
			return false, errnoError("poll", "completion channel", en)
		}
	}
}

// Close destroys the CQ and its completion channel (ibv_destroy_cq,
// ibv_destroy_comp_channel). Every QP using the CQ must be destroyed
// first; otherwise the verb fails with EBUSY and the CQ stays open. It is
// idempotent.
func (cq *CompletionQueue) Close() error {
	cq.d.mu.Lock()
	defer cq.d.mu.Unlock()
	return cq.closeLocked()
}

func (cq *CompletionQueue) closeLocked() error {
	if cq.closed {
		return nil
	}
	key := unsafe.Pointer(cq.cq)
	err := cq.destroy()
	if cq.cq == nil {
		delete(cq.d.cqs, key)
	}
	if err != nil {
		return err
	}
	cq.closed = true
	return nil
}
