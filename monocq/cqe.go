package monocq

import (
	"unsafe"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// CQE is the 64-byte CQE64 of one slot, in place in the ring. A CQ hands out
// *CQE values; each accessor is a load or two and is inlined. Fields that a
// kind of CQE does not carry read as whatever the device left there.
type CQE [prm.CQE64Size]byte

func (c *CQE) be16(off int) uint16 { return prm.Load16(unsafe.Pointer(&c[off])) }
func (c *CQE) be32(off int) uint32 { return prm.Load32(unsafe.Pointer(&c[off])) }

// Opcode returns the CQE opcode (REQ, RESP_SEND, REQ_ERR, ...).
func (c *CQE) Opcode() prm.CQEOpcode { return prm.OpOwnOpcode(c[prm.CQEOpOwn]) }

// IsError reports whether this is an error CQE (REQ_ERR or RESP_ERR).
func (c *CQE) IsError() bool {
	op := prm.OpOwnOpcode(c[prm.CQEOpOwn])
	return op == prm.CQEReqErr || op == prm.CQERespErr
}

// Format returns the format bits of op_own: prm.CQEFormatNone, Scatter32 or
// Scatter64 (a CQ never hands out a compressed one).
func (c *CQE) Format() uint8 { return prm.OpOwnFormat(c[prm.CQEOpOwn]) }

// owner returns the owner bit.
func (c *CQE) owner() uint8 { return c[prm.CQEOpOwn] & prm.CQEOwnerMask }

// Solicited reports the solicited-event bit of a responder CQE.
func (c *CQE) Solicited() bool { return c[prm.CQEOpOwn]&prm.CQESolicitedMask != 0 }

// QPN returns the number of the queue pair the completion belongs to (also
// for error CQEs).
func (c *CQE) QPN() uint32 { return c.be32(prm.CQESopDropQPN) & prm.CQEQPNMask }

// SendOpcode returns the send WQE opcode of a requester CQE (and of a
// requester error CQE).
func (c *CQE) SendOpcode() prm.Opcode { return prm.Opcode(c[prm.CQESopDropQPN]) }

// WQECounter returns the wqe_counter: for a requester CQE the index of the
// first WQEBB of the completed WQE, for a responder CQE the receive WQE
// index (SRQ: the WQE index in the SRQ).
func (c *CQE) WQECounter() uint16 { return c.be16(prm.CQEWQECounter) }

// ByteCount returns byte_cnt: the bytes received (responder), or read by an
// RDMA_READ (requester).
func (c *CQE) ByteCount() uint32 { return c.be32(prm.CQEByteCnt) }

// Immediate returns the immediate data of RESP_SEND_IMM and RESP_WR_IMM,
// the four bytes read big-endian, so a value the sender stored with
// prm.Store32 comes back unchanged.
func (c *CQE) Immediate() uint32 { return c.be32(prm.CQEImmInvalPkey) }

// InvalidatedRkey returns the rkey a RESP_SEND_INV invalidated.
func (c *CQE) InvalidatedRkey() uint32 { return c.be32(prm.CQEImmInvalPkey) }

// PKeyIndex returns the pkey index of a UD receive.
func (c *CQE) PKeyIndex() uint16 {
	return uint16(c.be32(prm.CQEImmInvalPkey) & prm.CQEPKeyIndexMask)
}

// SourceQP returns the remote QPN of a UD or DC receive.
func (c *CQE) SourceQP() uint32 { return c.be32(prm.CQEFlagsRQPN) & prm.CQEQPNMask }

// SL returns the service level of the received packet (InfiniBand; on an
// Ethernet port bits 25..24 of the field hold RoCEL3Type instead).
func (c *CQE) SL() uint8 {
	return uint8(c.be32(prm.CQEFlagsRQPN)>>prm.CQESLShift) & prm.CQESLMask
}

// RoCEL3Type returns the network header type of a receive on an Ethernet
// (RoCE) port, which says what the 40-byte GRH area of a UD receive holds:
// prm.CQERoCEL3GRH (RoCE v1, an InfiniBand GRH), prm.CQERoCEL3IPv6 (RoCE
// v2, the IPv6 header) or prm.CQERoCEL3IPv4 (RoCE v2, the IPv4 header in
// the last 20 bytes). On InfiniBand the same bits are the low bits of SL.
func (c *CQE) RoCEL3Type() uint8 {
	return uint8(c.be32(prm.CQEFlagsRQPN)>>prm.CQERoCEL3Shift) & prm.CQERoCEL3Mask
}

// grh returns the 2-bit GRH field of a receive: prm.CQEGRHNone,
// prm.CQEGRHInData (in the first 40 bytes of the buffer) or prm.CQEGRHInCQE.
func (c *CQE) grh() uint8 {
	return uint8(c.be32(prm.CQEFlagsRQPN)>>prm.CQEGRHShift) & prm.CQEGRHMask
}

// HasGRH reports whether the received packet carried a GRH (rdma-core's
// IBV_WC_GRH).
func (c *CQE) HasGRH() bool { return c.grh() != prm.CQEGRHNone }

// SLID returns the source LID of a receive (IB).
func (c *CQE) SLID() uint16 { return c.be16(prm.CQESLID) }

// PathBits returns the DLID path bits of a receive.
func (c *CQE) PathBits() uint8 { return c[prm.CQEMLPath] & prm.CQEMLPathMask }

// SRQN returns the SRQ number (or user index) of a receive.
func (c *CQE) SRQN() uint32 { return c.be32(prm.CQESRQNUIdx) & prm.CQESRQNMask }

// Timestamp returns the 64-bit completion timestamp.
func (c *CQE) Timestamp() uint64 { return prm.Load64(unsafe.Pointer(&c[prm.CQETimestamp])) }

// RxHash returns rss_hash_result; in a CQE expanded from a responder
// mini-CQE it holds the mini-CQE's first word (RSS hash, or checksum and
// stride index, as the CQ's mini-CQE format says).
func (c *CQE) RxHash() uint32 { return c.be32(prm.CQERxHashResult) }

// Syndrome returns the syndrome of an error CQE.
func (c *CQE) Syndrome() prm.Syndrome { return prm.Syndrome(c[prm.ErrCQESyndrome]) }

// VendorSyndrome returns the vendor syndrome of an error CQE.
func (c *CQE) VendorSyndrome() uint8 { return c[prm.ErrCQEVendorSyndrome] }

// Err returns nil for a successful completion and a *CompletionError for an
// error CQE. A syndrome the PRM does not define is reported, by value and
// with errors.Is(err, ErrUnknownSyndrome), not rejected. Err allocates only
// for an error CQE.
func (c *CQE) Err() error {
	// REQ_ERR (13) and RESP_ERR (14) are op_own 0xd0 to 0xef.
	if c[prm.CQEOpOwn]-uint8(prm.CQEReqErr)<<prm.CQEOpcodeShift >= 2<<prm.CQEOpcodeShift {
		return nil
	}
	return c.completionError()
}

func (c *CQE) completionError() error {
	e := &CompletionError{
		Status:         StatusOf(c.Syndrome()),
		Syndrome:       c.Syndrome(),
		VendorSyndrome: c.VendorSyndrome(),
		CQEOpcode:      c.Opcode(),
		QPN:            c.QPN(),
		WQECounter:     c.WQECounter(),
	}
	if e.Requester() {
		e.Opcode = c.SendOpcode()
	}
	return e
}

// ScatterData returns the payload the device scattered into the CQE (the
// receive asked for scatter-to-CQE): up to 32 bytes at the start of the
// CQE64 (format scatter-32), or up to 64 bytes in the first half of a
// 128-byte slot (format scatter-64); nil for any other format. The slice
// aliases the ring and is valid until Release. Only CQEs handed out by a CQ
// may be asked: the CQ guarantees that a scatter-64 CQE lies in a 128-byte
// slot.
func (c *CQE) ScatterData() []byte {
	n := c.be32(prm.CQEByteCnt)
	switch c.Format() {
	case prm.CQEFormatScatter32:
		return c[:min(n, 32)]
	case prm.CQEFormatScatter64:
		return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(c), -prm.CQE64Size)), min(n, prm.CQE64Size))
	}
	return nil
}

// String decodes the CQE field by field (prm.DumpCQE), for test failures and
// debugging.
func (c *CQE) String() string { return prm.DumpCQE(c[:]) }
