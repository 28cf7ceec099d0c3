package prm

import "strconv"

// Opcode is a send WQE opcode (the low byte of opmod_idx_opcode).
type Opcode uint8

// Send WQE opcodes (MLX5_OPCODE_*).
const (
	OpNop            Opcode = 0x00
	OpSendInval      Opcode = 0x01
	OpRdmaWrite      Opcode = 0x08
	OpRdmaWriteImm   Opcode = 0x09
	OpSend           Opcode = 0x0a
	OpSendImm        Opcode = 0x0b
	OpTSO            Opcode = 0x0e
	OpRdmaRead       Opcode = 0x10
	OpAtomicCS       Opcode = 0x11
	OpAtomicFA       Opcode = 0x12
	OpAtomicMaskedCS Opcode = 0x14
	OpAtomicMaskedFA Opcode = 0x15
	OpFMR            Opcode = 0x19
	OpLocalInval     Opcode = 0x1b
	OpConfigCmd      Opcode = 0x1f
	OpSetPSV         Opcode = 0x20
	OpUMR            Opcode = 0x25
	OpTagMatching    Opcode = 0x28
	OpFlowTblAccess  Opcode = 0x2c
	OpMMO            Opcode = 0x2f
)

var opcodeNames = map[Opcode]string{
	OpNop:            "NOP",
	OpSendInval:      "SEND_INVAL",
	OpRdmaWrite:      "RDMA_WRITE",
	OpRdmaWriteImm:   "RDMA_WRITE_IMM",
	OpSend:           "SEND",
	OpSendImm:        "SEND_IMM",
	OpTSO:            "TSO",
	OpRdmaRead:       "RDMA_READ",
	OpAtomicCS:       "ATOMIC_CS",
	OpAtomicFA:       "ATOMIC_FA",
	OpAtomicMaskedCS: "ATOMIC_MASKED_CS",
	OpAtomicMaskedFA: "ATOMIC_MASKED_FA",
	OpFMR:            "FMR",
	OpLocalInval:     "LOCAL_INVAL",
	OpConfigCmd:      "CONFIG_CMD",
	OpSetPSV:         "SET_PSV",
	OpUMR:            "UMR",
	OpTagMatching:    "TAG_MATCHING",
	OpFlowTblAccess:  "FLOW_TBL_ACCESS",
	OpMMO:            "MMO",
}

// String returns the PRM name of the opcode, or its hex value if unknown.
func (o Opcode) String() string {
	if s, ok := opcodeNames[o]; ok {
		return s
	}
	return "OPCODE(0x" + strconv.FormatUint(uint64(o), 16) + ")"
}

// IsAtomic reports whether the opcode is one of the four atomics.
func (o Opcode) IsAtomic() bool {
	return o < 64 && atomicOpcodes&(1<<o) != 0
}

// atomicOpcodes has bit o set for each atomic opcode o.
const atomicOpcodes = 1<<OpAtomicCS | 1<<OpAtomicFA | 1<<OpAtomicMaskedCS | 1<<OpAtomicMaskedFA

// IsMaskedAtomic reports whether the opcode is a masked (extended) atomic,
// whose operand size is in the opmod (see MaskedAtomicSize).
func (o Opcode) IsMaskedAtomic() bool {
	return o == OpAtomicMaskedCS || o == OpAtomicMaskedFA
}

// HasRaddr reports whether a WQE of this opcode carries a remote address
// segment.
func (o Opcode) HasRaddr() bool {
	return o == OpRdmaWrite || o == OpRdmaWriteImm || o == OpRdmaRead || o.IsAtomic()
}

// HasImm reports whether the control segment's imm field is meaningful for
// this opcode (immediate data, or the rkey to invalidate).
func (o Opcode) HasImm() bool {
	return o == OpRdmaWriteImm || o == OpSendImm || o == OpSendInval
}

// CQEOpcode is the opcode in bits 7..4 of a CQE's op_own byte.
type CQEOpcode uint8

// CQE opcodes (MLX5_CQE_*).
const (
	CQEReq         CQEOpcode = 0
	CQERespWrImm   CQEOpcode = 1
	CQERespSend    CQEOpcode = 2
	CQERespSendImm CQEOpcode = 3
	CQERespSendInv CQEOpcode = 4
	CQEResizeCQ    CQEOpcode = 5
	CQENoPacket    CQEOpcode = 6
	CQESigErr      CQEOpcode = 12
	CQEReqErr      CQEOpcode = 13
	CQERespErr     CQEOpcode = 14
	CQEInvalid     CQEOpcode = 15
)

var cqeOpcodeNames = [16]string{
	CQEReq:         "REQ",
	CQERespWrImm:   "RESP_WR_IMM",
	CQERespSend:    "RESP_SEND",
	CQERespSendImm: "RESP_SEND_IMM",
	CQERespSendInv: "RESP_SEND_INV",
	CQEResizeCQ:    "RESIZE_CQ",
	CQENoPacket:    "NO_PACKET",
	CQESigErr:      "SIG_ERR",
	CQEReqErr:      "REQ_ERR",
	CQERespErr:     "RESP_ERR",
	CQEInvalid:     "INVALID",
}

// String returns the PRM name of the CQE opcode.
func (o CQEOpcode) String() string {
	if int(o) < len(cqeOpcodeNames) && cqeOpcodeNames[o] != "" {
		return cqeOpcodeNames[o]
	}
	return "CQE_OPCODE(" + strconv.Itoa(int(o)) + ")"
}

// IsError reports whether the CQE opcode is an error completion.
func (o CQEOpcode) IsError() bool { return o == CQEReqErr || o == CQERespErr }

// Syndrome is the syndrome byte of an error CQE.
type Syndrome uint8

// Error CQE syndromes (MLX5_CQE_SYNDROME_*).
const (
	SyndromeLocalLength       Syndrome = 0x01
	SyndromeLocalQPOp         Syndrome = 0x02
	SyndromeLocalProt         Syndrome = 0x04
	SyndromeWRFlush           Syndrome = 0x05
	SyndromeMWBind            Syndrome = 0x06
	SyndromeBadResp           Syndrome = 0x10
	SyndromeLocalAccess       Syndrome = 0x11
	SyndromeRemoteInvalReq    Syndrome = 0x12
	SyndromeRemoteAccess      Syndrome = 0x13
	SyndromeRemoteOp          Syndrome = 0x14
	SyndromeTransportRetryExc Syndrome = 0x15
	SyndromeRNRRetryExc       Syndrome = 0x16
	SyndromeRemoteAborted     Syndrome = 0x22
)

// VendorSyndromeODPPageFault is the vendor_err_synd of a flush caused by an
// on-demand-paging page fault (MLX5_CQE_VENDOR_SYNDROME_ODP_PFAULT).
const VendorSyndromeODPPageFault = 0x93

// The vendor_err_synd a ConnectX writes beside two syndromes. The PRM does
// not publish the vendor syndromes; these two are the values mlx5 devices
// report in the field (the kernel's and UCX's logs of error CQEs print
// them: "synd 0x15 vend 0x81", "syndrome 0x5, vendor syndrome 0xf9").
const (
	VendorSyndromeTransportRetryExc = 0x81 // with SyndromeTransportRetryExc
	VendorSyndromeWRFlush           = 0xf9 // with SyndromeWRFlush
)

// VendorSyndromeOf returns the vendor_err_synd the software HCA writes with
// syndrome s: VendorSyndromeTransportRetryExc and VendorSyndromeWRFlush
// with theirs, 0 with the others, whose values are not known.
func VendorSyndromeOf(s Syndrome) uint8 {
	switch s {
	case SyndromeTransportRetryExc:
		return VendorSyndromeTransportRetryExc
	case SyndromeWRFlush:
		return VendorSyndromeWRFlush
	}
	return 0
}

var syndromeNames = map[Syndrome]string{
	SyndromeLocalLength:       "LOCAL_LENGTH_ERR",
	SyndromeLocalQPOp:         "LOCAL_QP_OP_ERR",
	SyndromeLocalProt:         "LOCAL_PROT_ERR",
	SyndromeWRFlush:           "WR_FLUSH_ERR",
	SyndromeMWBind:            "MW_BIND_ERR",
	SyndromeBadResp:           "BAD_RESP_ERR",
	SyndromeLocalAccess:       "LOCAL_ACCESS_ERR",
	SyndromeRemoteInvalReq:    "REMOTE_INVAL_REQ_ERR",
	SyndromeRemoteAccess:      "REMOTE_ACCESS_ERR",
	SyndromeRemoteOp:          "REMOTE_OP_ERR",
	SyndromeTransportRetryExc: "TRANSPORT_RETRY_EXC_ERR",
	SyndromeRNRRetryExc:       "RNR_RETRY_EXC_ERR",
	SyndromeRemoteAborted:     "REMOTE_ABORTED_ERR",
}

// String returns the PRM name of the syndrome, or its hex value if unknown.
func (s Syndrome) String() string {
	if n, ok := syndromeNames[s]; ok {
		return n
	}
	return "SYNDROME(0x" + strconv.FormatUint(uint64(s), 16) + ")"
}

// Known reports whether the syndrome is one the PRM defines.
func (s Syndrome) Known() bool { _, ok := syndromeNames[s]; return ok }
