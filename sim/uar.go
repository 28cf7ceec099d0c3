package sim

import (
	"bytes"
	"fmt"
	"unsafe"
)

// attachBlueFlameLocked gives q, a QP with a send queue, its BlueFlame
// register (f.mu held): a UAR page of its own while the device has
// dedicated registers left (Options.BlueFlameRegisters), the device's
// shared register beyond that. A shared register is doorbell only (the
// descriptor's BlueFlameSize is 0): QPs sharing it may be posted from
// different goroutines, and an 8-byte doorbell write is one store where
// the 64-byte chunks of two BlueFlame copies could interleave.
func (d *device) attachBlueFlameLocked(q *qp) error {
	limit := d.f.opts.BlueFlameRegisters
	if limit == 0 || (limit > 0 && d.dedicatedBF < limit) {
		b, err := region(pageSize)
		if err != nil {
			return err
		}
		q.bufs[3] = b
		q.bf = unsafe.Add(b.Pointer(), bfRegOffset)
		q.watchRegister(q.bf, bfSize)
		d.dedicatedBF++
		return nil
	}
	if d.sharedBF == nil {
		b, err := region(pageSize)
		if err != nil {
			return err
		}
		d.sharedBF = b
	}
	d.sharedUsers++
	q.bf = unsafe.Add(d.sharedBF.Pointer(), bfRegOffset)
	q.sharedBF = true
	q.watchRegister(q.bf, 0)
	return nil
}

// detachBlueFlameLocked returns q's register when q is destroyed (f.mu
// held); its own page goes with its other buffers.
func (d *device) detachBlueFlameLocked(q *qp) {
	switch {
	case q.sharedBF:
		d.sharedUsers--
		d.releaseSharedBFLocked()
	case q.bf != nil:
		d.dedicatedBF--
	}
}

// releaseSharedBFLocked frees the shared register once the device is
// closed and no QP uses it.
func (d *device) releaseSharedBFLocked() {
	if d.closed && d.sharedUsers == 0 && d.sharedBF != nil {
		_ = d.sharedBF.Close()
		d.sharedBF, d.sharedSnap = nil, nil
	}
}

// checkSharedBlueFlame is checkBlueFlame for a QP on the shared register:
// only 8-byte doorbells may be written there, so anything beyond the first
// 8 bytes of its buffers is a BlueFlame copy that could have interleaved
// with another QP's.
func (f *Fabric) checkSharedBlueFlame(q *qp) {
	d := q.dev
	cur := unsafe.Slice((*byte)(q.bf), 2*bfSize)
	if d.sharedSnap == nil {
		d.sharedSnap = make([]byte, 2*bfSize)
	}
	if bytes.Equal(cur[8:], d.sharedSnap[8:]) {
		return
	}
	copy(d.sharedSnap, cur)
	f.violate(Violation{Kind: ViolationBlueFlame, QPN: q.qpn,
		Detail: fmt.Sprintf("BlueFlame copy to the shared doorbell-only register of %s (only 8-byte doorbells may be written there)", d.h.name)})
}
