package prm

import "unsafe"

// Segment encoders. Each writes one segment at p, which must point at
// writable memory with room for the whole segment (16 bytes, 48 for the
// address vector, 32 for a masked 64-bit compare-and-swap); the caller has
// already resolved any wrap at the ring end. They are small enough to be
// inlined, never allocate, and produce the same bytes as rdma-core's
// mlx5dv_set_ctrl_seg, mlx5dv_set_data_seg and mlx5dv_set_dgram_seg (checked
// in package cgo/internal/dvcheck).

// PutCtrl writes a control segment. Its arguments follow
// mlx5dv_set_ctrl_seg: pi is the WQE index (the producer index in WQEBBs,
// truncated to 16 bits), ds the size in 16-byte units, imm the immediate
// data or the rkey to invalidate as a number (it lands big-endian on the
// wire, so the receiver reads the same number). Unlike mlx5dv_set_ctrl_seg,
// which leaves them untouched, PutCtrl also clears the two DCI stream-id
// bytes, as rdma-core's own post path does.
func PutCtrl(p unsafe.Pointer, pi uint16, op Opcode, opmod uint8, qpn uint32, fmCeSe, ds, signature uint8, imm uint32) {
	Store32(p, uint32(opmod)<<CtrlOpmodShift|uint32(pi)<<CtrlWQEIndexShift|uint32(op))
	Store32(unsafe.Add(p, CtrlQPNDS), qpn<<CtrlQPNShift|uint32(ds))
	Store32(unsafe.Add(p, CtrlSignature), uint32(signature)<<24|uint32(fmCeSe))
	Store32(unsafe.Add(p, CtrlImm), imm)
}

// SetCtrlDCIStream writes the DCI stream channel id of the control segment
// at p (mlx5dv_wr_set_dc_addr_stream).
func SetCtrlDCIStream(p unsafe.Pointer, id uint16) { Store16(unsafe.Add(p, CtrlDCIStreamID), id) }

// PutData writes a data (scatter/gather) segment, as mlx5dv_set_data_seg.
func PutData(p unsafe.Pointer, byteCount, lkey uint32, addr uint64) {
	Store32(p, byteCount)
	Store32(unsafe.Add(p, DataLKey), lkey)
	Store64(unsafe.Add(p, DataAddr), addr)
}

// PutDataEnd writes the data segment that ends a receive scatter list
// shorter than the queue's maximum: byte count 0, InvalidLKey, address 0.
func PutDataEnd(p unsafe.Pointer) { PutData(p, 0, InvalidLKey, 0) }

// PutRaddr writes a remote address segment; the reserved word is cleared.
func PutRaddr(p unsafe.Pointer, raddr uint64, rkey uint32) {
	Store64(p, raddr)
	Store32(unsafe.Add(p, RaddrRkey), rkey)
	Store32(unsafe.Add(p, RaddrResvd), 0)
}

// PutAtomic writes a standard atomic segment: swap and compare for
// ATOMIC_CS, the addend (and a zero compare) for ATOMIC_FA.
func PutAtomic(p unsafe.Pointer, swapAdd, compare uint64) {
	Store64(p, swapAdd)
	Store64(unsafe.Add(p, AtomicCompare), compare)
}

// PutMaskedCS64 writes the two segments (32 bytes) of an 8-byte masked
// compare-and-swap. The second 16 bytes may need to wrap to the ring start:
// callers that cross the ring end use PutAtomic twice instead (swap and
// compare, then swapMask and compareMask), which writes the same bytes.
func PutMaskedCS64(p unsafe.Pointer, swap, compare, swapMask, compareMask uint64) {
	Store64(p, swap)
	Store64(unsafe.Add(p, MaskedCS64Compare), compare)
	Store64(unsafe.Add(p, MaskedCS64SwapMask), swapMask)
	Store64(unsafe.Add(p, MaskedCS64CompareMask), compareMask)
}

// PutMaskedFA64 writes the segment of an 8-byte masked fetch-and-add: the
// addend and the field-boundary mask (a set bit stops the carry out of that
// bit).
func PutMaskedFA64(p unsafe.Pointer, add, fieldBoundary uint64) {
	Store64(p, add)
	Store64(unsafe.Add(p, MaskedFA64FieldBoundary), fieldBoundary)
}

// PutMaskedCS32 writes the segment of a 4-byte masked compare-and-swap.
func PutMaskedCS32(p unsafe.Pointer, swap, compare, swapMask, compareMask uint32) {
	Store32(p, swap)
	Store32(unsafe.Add(p, MaskedCS32Compare), compare)
	Store32(unsafe.Add(p, MaskedCS32SwapMask), swapMask)
	Store32(unsafe.Add(p, MaskedCS32CompareMask), compareMask)
}

// PutMaskedFA32 writes the segment of a 4-byte masked fetch-and-add; the
// last 8 bytes are reserved and cleared.
func PutMaskedFA32(p unsafe.Pointer, add, fieldBoundary uint32) {
	Store32(p, add)
	Store32(unsafe.Add(p, MaskedFA32FieldBoundary), fieldBoundary)
	*(*uint64)(unsafe.Add(p, 8)) = 0
}

// PutInlineHeader writes the 4-byte header of an inline data segment for n
// bytes of payload; the payload follows at p+InlineHeaderSize.
func PutInlineHeader(p unsafe.Pointer, n uint32) { Store32(p, n|InlineSeg) }

// PutAV writes a 48-byte address vector (datagram segment). Its arguments
// follow mlx5dv_set_dgram_seg: key is stored as one big-endian 64-bit value,
// so it is the DC access key as is, and for UD it must be uint64(qkey)<<32
// (the qkey lives in bytes 0..4 and the reserved word after it stays zero; a
// bare qkey would land in the reserved word); ext (bit 0) becomes bit 31 of
// dqp_dct.
func PutAV(p unsafe.Pointer, key uint64, dqpDCT uint32, ext, statRateSL, flMLID uint8, rlid uint16,
	rmac *[AVRMACSize]byte, tclass, hopLimit uint8, grhGIDFL uint32, rgid *[AVRGIDSize]byte) {
	Store64(p, key)
	Store32(unsafe.Add(p, AVDQPDCT), uint32(ext)<<31|dqpDCT)
	*(*[4]uint8)(unsafe.Add(p, AVStatRateSL)) = [4]uint8{statRateSL, flMLID, uint8(rlid >> 8), uint8(rlid)}
	*(*[AVRMACSize]byte)(unsafe.Add(p, AVRMAC)) = *rmac
	*(*[2]uint8)(unsafe.Add(p, AVTClass)) = [2]uint8{tclass, hopLimit}
	Store32(unsafe.Add(p, AVGRHGIDFL), grhGIDFL)
	*(*[AVRGIDSize]byte)(unsafe.Add(p, AVRGID)) = *rgid
}

// PutAVUD fills the per-WQE fields of a UD address vector whose path part
// (bytes 12..48, copied from an address handle) is already in place: the
// qkey (with the reserved word cleared) and the remote QPN with the
// extended-AV bit, as rdma-core's set_datagram_seg does.
func PutAVUD(p unsafe.Pointer, qkey, remoteQPN uint32) {
	Store32(p, qkey)
	Store32(unsafe.Add(p, AVQKeyResvd), 0)
	Store32(unsafe.Add(p, AVDQPDCT), remoteQPN|ExtendedUDAV)
}

// PutAVDC fills the per-WQE fields of a DC address vector whose path part
// is already in place: the DC access key and the DCT number with the
// extended-AV bit (mlx5dv_wr_set_dc_addr).
func PutAVDC(p unsafe.Pointer, dcKey uint64, dctn uint32) {
	Store64(p, dcKey)
	Store32(unsafe.Add(p, AVDQPDCT), dctn|ExtendedUDAV)
}
