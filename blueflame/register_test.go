package blueflame

import "unsafe"

// postOnce publishes a single WQE as SendDoorbell.Post does, binding the
// doorbell record and the ring [ringBase, ringEnd) for this one post.
func (r *Register) postOnce(dbrec unsafe.Pointer, pi uint32, wqe unsafe.Pointer, n int, ringBase, ringEnd unsafe.Pointer) {
	d := SendDoorbell{Register: *r, dbrec: dbrec, ringBase: ringBase, ringEnd: ringEnd}
	post(&d, pi, wqe, n)
	r.offset = d.offset
}

// ringOnce publishes one or more WQEs without BlueFlame as SendDoorbell.Ring
// does, for the send queue whose doorbell record is dbrec.
func (r *Register) ringOnce(dbrec unsafe.Pointer, pi uint32, wqe unsafe.Pointer) {
	d := SendDoorbell{Register: *r, dbrec: dbrec}
	post(&d, pi, wqe, 0)
	r.offset = d.offset
}
