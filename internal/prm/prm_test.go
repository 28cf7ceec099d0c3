package prm

import (
	"os/exec"
	"regexp"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
)

// Expected names and values are copied from infiniband/mlx5dv.h (rdma-core
// 44) by hand; package cgo/internal/dvcheck checks the values against the
// header itself.

func TestOpcodeString(t *testing.T) {
	for _, c := range []struct {
		op   Opcode
		val  uint8
		name string
	}{
		{OpNop, 0x00, "NOP"},
		{OpSendInval, 0x01, "SEND_INVAL"},
		{OpRdmaWrite, 0x08, "RDMA_WRITE"},
		{OpRdmaWriteImm, 0x09, "RDMA_WRITE_IMM"},
		{OpSend, 0x0a, "SEND"},
		{OpSendImm, 0x0b, "SEND_IMM"},
		{OpTSO, 0x0e, "TSO"},
		{OpRdmaRead, 0x10, "RDMA_READ"},
		{OpAtomicCS, 0x11, "ATOMIC_CS"},
		{OpAtomicFA, 0x12, "ATOMIC_FA"},
		{OpAtomicMaskedCS, 0x14, "ATOMIC_MASKED_CS"},
		{OpAtomicMaskedFA, 0x15, "ATOMIC_MASKED_FA"},
		{OpFMR, 0x19, "FMR"},
		{OpLocalInval, 0x1b, "LOCAL_INVAL"},
		{OpConfigCmd, 0x1f, "CONFIG_CMD"},
		{OpSetPSV, 0x20, "SET_PSV"},
		{OpUMR, 0x25, "UMR"},
		{OpTagMatching, 0x28, "TAG_MATCHING"},
		{OpFlowTblAccess, 0x2c, "FLOW_TBL_ACCESS"},
		{OpMMO, 0x2f, "MMO"},
	} {
		require.Equal(t, c.val, uint8(c.op), c.name)
		require.Equal(t, c.name, c.op.String())
	}
	require.Len(t, opcodeNames, 20, "a named opcode lacks a test row")
	require.Equal(t, "OPCODE(0x77)", Opcode(0x77).String())
	require.Equal(t, "OPCODE(0x2)", Opcode(0x02).String())
}

func TestOpcodePredicates(t *testing.T) {
	atomics := map[Opcode]bool{OpAtomicCS: true, OpAtomicFA: true, OpAtomicMaskedCS: true, OpAtomicMaskedFA: true}
	raddr := map[Opcode]bool{OpRdmaWrite: true, OpRdmaWriteImm: true, OpRdmaRead: true}
	imm := map[Opcode]bool{OpRdmaWriteImm: true, OpSendImm: true, OpSendInval: true}
	for i := 0; i < 256; i++ {
		op := Opcode(i)
		require.Equal(t, atomics[op], op.IsAtomic(), "%s", op)
		require.Equal(t, op == OpAtomicMaskedCS || op == OpAtomicMaskedFA, op.IsMaskedAtomic(), "%s", op)
		require.Equal(t, raddr[op] || atomics[op], op.HasRaddr(), "%s", op)
		require.Equal(t, imm[op], op.HasImm(), "%s", op)
	}
}

func TestCQEOpcodeString(t *testing.T) {
	for _, c := range []struct {
		op   CQEOpcode
		val  uint8
		name string
	}{
		{CQEReq, 0, "REQ"},
		{CQERespWrImm, 1, "RESP_WR_IMM"},
		{CQERespSend, 2, "RESP_SEND"},
		{CQERespSendImm, 3, "RESP_SEND_IMM"},
		{CQERespSendInv, 4, "RESP_SEND_INV"},
		{CQEResizeCQ, 5, "RESIZE_CQ"},
		{CQENoPacket, 6, "NO_PACKET"},
		{CQESigErr, 12, "SIG_ERR"},
		{CQEReqErr, 13, "REQ_ERR"},
		{CQERespErr, 14, "RESP_ERR"},
		{CQEInvalid, 15, "INVALID"},
	} {
		require.Equal(t, c.val, uint8(c.op), c.name)
		require.Equal(t, c.name, c.op.String())
		require.Equal(t, c.op == CQEReqErr || c.op == CQERespErr, c.op.IsError(), c.name)
	}
	for _, v := range []uint8{7, 8, 9, 10, 11, 16, 200} {
		require.Equal(t, "CQE_OPCODE("+itoa(int(v))+")", CQEOpcode(v).String())
	}
}

func itoa(i int) string {
	const digits = "0123456789"
	if i < 10 {
		return digits[i : i+1]
	}
	return itoa(i/10) + digits[i%10:i%10+1]
}

func TestSyndromeString(t *testing.T) {
	for _, c := range []struct {
		s    Syndrome
		val  uint8
		name string
	}{
		{SyndromeLocalLength, 0x01, "LOCAL_LENGTH_ERR"},
		{SyndromeLocalQPOp, 0x02, "LOCAL_QP_OP_ERR"},
		{SyndromeLocalProt, 0x04, "LOCAL_PROT_ERR"},
		{SyndromeWRFlush, 0x05, "WR_FLUSH_ERR"},
		{SyndromeMWBind, 0x06, "MW_BIND_ERR"},
		{SyndromeBadResp, 0x10, "BAD_RESP_ERR"},
		{SyndromeLocalAccess, 0x11, "LOCAL_ACCESS_ERR"},
		{SyndromeRemoteInvalReq, 0x12, "REMOTE_INVAL_REQ_ERR"},
		{SyndromeRemoteAccess, 0x13, "REMOTE_ACCESS_ERR"},
		{SyndromeRemoteOp, 0x14, "REMOTE_OP_ERR"},
		{SyndromeTransportRetryExc, 0x15, "TRANSPORT_RETRY_EXC_ERR"},
		{SyndromeRNRRetryExc, 0x16, "RNR_RETRY_EXC_ERR"},
		{SyndromeRemoteAborted, 0x22, "REMOTE_ABORTED_ERR"},
	} {
		require.Equal(t, c.val, uint8(c.s), c.name)
		require.Equal(t, c.name, c.s.String())
		require.True(t, c.s.Known(), c.name)
	}
	require.Len(t, syndromeNames, 13, "a named syndrome lacks a test row")
	require.Equal(t, "SYNDROME(0x3)", Syndrome(3).String())
	require.False(t, Syndrome(3).Known())
	require.EqualValues(t, 0x93, VendorSyndromeODPPageFault)
}

func TestFenceMode(t *testing.T) {
	require.Equal(t, uint8(0x80), FlagFence, "MLX5_WQE_CTRL_FENCE")
	require.Equal(t, uint8(0x20), FlagInitiatorSmallFence, "MLX5_WQE_CTRL_INITIATOR_SMALL_FENCE")
	require.Equal(t, FlagFence, FenceSmallAndFence.Flag())
	require.Equal(t, FlagInitiatorSmallFence, FenceInitiatorSmall.Flag())
	require.Equal(t, uint8(0x60), FenceStrongOrdering.Flag())
	require.Equal(t, uint8(0x40), FenceFence.Flag())
	require.Equal(t, FenceSmallAndFence, FenceModeOf(0x8a))
	require.Equal(t, FenceNone, FenceModeOf(0x0a))
	require.Equal(t, FenceMode(7), FenceModeOf(0xff))
	for m, name := range map[FenceMode]string{
		FenceNone: "NONE", FenceInitiatorSmall: "INITIATOR_SMALL", FenceFence: "FENCE",
		FenceStrongOrdering: "STRONG_ORDERING", FenceSmallAndFence: "SMALL_AND_FENCE",
		5: "FENCE_MODE(5)", 7: "FENCE_MODE(7)", 9: "FENCE_MODE(9)",
	} {
		require.Equal(t, name, m.String())
	}
	require.Equal(t, uint8(0xe0), FlagFenceMask)
}

func TestTransportString(t *testing.T) {
	require.Equal(t, "unknown", TransportUnknown.String())
	require.Equal(t, "RC", TransportRC.String())
	require.Equal(t, "UD", TransportUD.String())
	require.Equal(t, "DC", TransportDC.String())
	require.Equal(t, "TRANSPORT(9)", Transport(9).String())
}

func TestComposition(t *testing.T) {
	require.Equal(t, uint32(0x09abcd14), CtrlOpmodIdxOpcodeWord(0x09, 0xabcd, OpAtomicMaskedCS))
	require.Equal(t, uint32(0x12345605), CtrlQPNDSWord(0x123456, 0x45), "ds is 6 bits")
	require.Equal(t, uint32(0x3456783f), CtrlQPNDSWord(0x12345678, 0x3f), "qpn is 24 bits")
	for n, want := range map[int]int{0: 0, 1: 1, 12: 1, 13: 2, 28: 2, 29: 3, 60: 4, 61: 5} {
		require.Equal(t, want, InlineDS(n), "InlineDS(%d)", n)
	}
	for ds, want := range map[int]int{1: 1, 4: 1, 5: 2, 8: 2, 9: 3, 63: 16} {
		require.Equal(t, want, WQEBBs(ds), "WQEBBs(%d)", ds)
	}
	require.Equal(t, uint8(0xd3), OpOwn(CQEReqErr, CQEFormatNone, true, 1))
	require.Equal(t, uint8(0x2c), OpOwn(CQERespSend, CQEFormatCompressed, false, 0))
	require.Equal(t, uint8(0x05), OpOwn(CQEReq, CQEFormatScatter32, false, 3), "format and owner are masked")
	require.Equal(t, CQEReqErr, OpOwnOpcode(0xd3))
	require.Equal(t, uint8(CQEFormatCompressed), OpOwnFormat(0x2c))
	require.Equal(t, CQEInvalid, OpOwnOpcode(CQEInvalidOpOwn))

	for size, want := range map[int]uint8{4: 0x08, 8: 0x09, 16: 0x0a, 512: 0x0f, 0: 0, 2: 0, 3: 0, 6: 0, 1024: 0, -8: 0} {
		require.Equal(t, want, MaskedAtomicOpmod(size), "MaskedAtomicOpmod(%d)", size)
	}
	for opmod, want := range map[uint8]int{0x08: 4, 0x09: 8, 0x0a: 16, 0x0f: 512, 0x00: 0, 0x01: 0, 0x18: 0, 0x88: 0} {
		require.Equal(t, want, MaskedAtomicSize(opmod), "MaskedAtomicSize(0x%02x)", opmod)
	}
	require.Equal(t, uint8(0x08), uint8(OpmodMaskedAtomic32))
	require.Equal(t, uint8(0x09), uint8(OpmodMaskedAtomic64))
}

func TestStoreLoad(t *testing.T) {
	var b [8]byte
	p := unsafe.Pointer(&b[0])
	Store16(p, 0x0102)
	require.Equal(t, [8]byte{1, 2}, b)
	require.Equal(t, uint16(0x0102), Load16(p))
	Store32(p, 0x01020304)
	require.Equal(t, [8]byte{1, 2, 3, 4}, b)
	require.Equal(t, uint32(0x01020304), Load32(p))
	Store64(p, 0x0102030405060708)
	require.Equal(t, [8]byte{1, 2, 3, 4, 5, 6, 7, 8}, b)
	require.Equal(t, uint64(0x0102030405060708), Load64(p))
}

// filled returns a 64-byte buffer of 0xee so that bytes an encoder must not
// touch are visible.
func filled() *[64]byte {
	var b [64]byte
	for i := range b {
		b[i] = 0xee
	}
	return &b
}

func TestPutCtrl(t *testing.T) {
	b := filled()
	PutCtrl(unsafe.Pointer(b), 0xabcd, OpRdmaWriteImm, 0x09, 0x123456, FlagCQUpdate|FlagSolicited, 3, 0x5a, 0xdeadbeef)
	require.Equal(t, []byte{
		0x09, 0xab, 0xcd, 0x09, // opmod, wqe index, opcode
		0x12, 0x34, 0x56, 0x03, // qpn, ds
		0x5a, 0x00, 0x00, 0x0a, // signature, stream id cleared, fm_ce_se
		0xde, 0xad, 0xbe, 0xef, // imm, big-endian
		0xee,
	}, b[:17])
	SetCtrlDCIStream(unsafe.Pointer(b), 0x0102)
	require.Equal(t, []byte{0x5a, 0x01, 0x02, 0x0a}, b[8:12])
}

func TestPutData(t *testing.T) {
	b := filled()
	PutData(unsafe.Pointer(b), 0x100, 0x2233, 0x0000_7f00_1122_3344)
	require.Equal(t, []byte{0, 0, 1, 0, 0, 0, 0x22, 0x33, 0, 0, 0x7f, 0, 0x11, 0x22, 0x33, 0x44, 0xee}, b[:17])
	PutDataEnd(unsafe.Pointer(b))
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xee}, b[:17])
}

func TestPutRaddrAtomic(t *testing.T) {
	b := filled()
	PutRaddr(unsafe.Pointer(b), 0x0102030405060708, 0x0a0b0c0d)
	require.Equal(t, []byte{1, 2, 3, 4, 5, 6, 7, 8, 0xa, 0xb, 0xc, 0xd, 0, 0, 0, 0, 0xee}, b[:17])
	b = filled()
	PutAtomic(unsafe.Pointer(b), 0x1111, 0x2222)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0x11, 0x11, 0, 0, 0, 0, 0, 0, 0x22, 0x22, 0xee}, b[:17])
	b = filled()
	PutMaskedCS64(unsafe.Pointer(b), 1, 2, 3, 4)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 2,
		0, 0, 0, 0, 0, 0, 0, 3, 0, 0, 0, 0, 0, 0, 0, 4, 0xee}, b[:33])
	b = filled()
	PutMaskedFA64(unsafe.Pointer(b), 5, 6)
	require.Equal(t, []byte{0, 0, 0, 0, 0, 0, 0, 5, 0, 0, 0, 0, 0, 0, 0, 6, 0xee}, b[:17])
	b = filled()
	PutMaskedCS32(unsafe.Pointer(b), 1, 2, 3, 4)
	require.Equal(t, []byte{0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3, 0, 0, 0, 4, 0xee}, b[:17])
	b = filled()
	PutMaskedFA32(unsafe.Pointer(b), 7, 8)
	require.Equal(t, []byte{0, 0, 0, 7, 0, 0, 0, 8, 0, 0, 0, 0, 0, 0, 0, 0, 0xee}, b[:17])
	b = filled()
	PutInlineHeader(unsafe.Pointer(b), 0x123)
	require.Equal(t, []byte{0x80, 0, 0x01, 0x23, 0xee}, b[:5])
}

func TestPutAV(t *testing.T) {
	b := filled()
	rmac := [6]byte{0x02, 0x11, 0x22, 0x33, 0x44, 0x55}
	rgid := [16]byte{0xfe, 0x80, 15: 0x01}
	PutAV(unsafe.Pointer(b), 0x0102030405060708, 0x00abcdef, 1, 0x35, 0x81, 0xc123, &rmac, 3, 64, 1<<30|5<<20|0x12345, &rgid)
	require.Equal(t, []byte{
		1, 2, 3, 4, 5, 6, 7, 8, // key
		0x80, 0xab, 0xcd, 0xef, // ext | dqp_dct
		0x35, 0x81, 0xc1, 0x23, // stat_rate_sl, fl_mlid, rlid
		0xee, 0xee, 0xee, 0xee, // reserved0: untouched, as mlx5dv_set_dgram_seg
		0x02, 0x11, 0x22, 0x33, 0x44, 0x55, // rmac
		3, 64, // tclass, hop_limit
		0x40, 0x51, 0x23, 0x45, // grh_gid_fl
		0xfe, 0x80, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0x01, // rgid
		0xee,
	}, b[:49])

	PutAVUD(unsafe.Pointer(b), 0x11223344, 0x000789)
	require.Equal(t, []byte{0x11, 0x22, 0x33, 0x44, 0, 0, 0, 0, 0x80, 0x00, 0x07, 0x89, 0x35}, b[:13])
	PutAVDC(unsafe.Pointer(b), 0xa1a2a3a4a5a6a7a8, 0x000abc)
	require.Equal(t, []byte{0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0x80, 0x00, 0x0a, 0xbc, 0x35}, b[:13])
}

func TestEncodersDoNotAllocate(t *testing.T) {
	var ring [128]byte
	rmac := [6]byte{1}
	rgid := [16]byte{2}
	p := unsafe.Pointer(&ring[0])
	n := testing.AllocsPerRun(100, func() {
		PutCtrl(p, 1, OpSend, 0, 2, FlagCQUpdate, 4, 0, 0)
		SetCtrlDCIStream(p, 1)
		PutAV(unsafe.Add(p, 16), 1, 2, 1, 0, 0, 3, &rmac, 0, 0, 0, &rgid)
		PutAVUD(unsafe.Add(p, 16), 1, 2)
		PutAVDC(unsafe.Add(p, 16), 1, 2)
		PutRaddr(unsafe.Add(p, 64), 1, 2)
		PutAtomic(unsafe.Add(p, 80), 1, 2)
		PutMaskedCS64(unsafe.Add(p, 80), 1, 2, 3, 4)
		PutMaskedFA64(unsafe.Add(p, 80), 1, 2)
		PutMaskedCS32(unsafe.Add(p, 80), 1, 2, 3, 4)
		PutMaskedFA32(unsafe.Add(p, 80), 1, 2)
		PutData(unsafe.Add(p, 112), 1, 2, 3)
		PutDataEnd(unsafe.Add(p, 112))
		PutInlineHeader(unsafe.Add(p, 112), 4)
	})
	require.Zero(t, n)
}

// TestEncodersInline asks the compiler whether every encoder and every
// byte-order load and store can be inlined: the ring code relies on it for its speed.
func TestEncodersInline(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the compiler")
	}
	goBin, err := exec.LookPath("go") // go test puts GOROOT/bin first in PATH
	require.NoError(t, err)
	out, err := exec.Command(goBin, "build", "-gcflags=-m", ".").CombinedOutput()
	require.NoError(t, err, "%s", out)
	for _, fn := range []string{
		"PutCtrl", "SetCtrlDCIStream", "PutData", "PutDataEnd", "PutRaddr", "PutAtomic",
		"PutMaskedCS64", "PutMaskedFA64", "PutMaskedCS32", "PutMaskedFA32", "PutInlineHeader",
		"PutAV", "PutAVUD", "PutAVDC", "Store16", "Store32", "Store64", "Load16", "Load32", "Load64",
		"CtrlOpmodIdxOpcodeWord", "CtrlQPNDSWord", "InlineDS", "WQEBBs", "OpOwn", "OpOwnOpcode",
		"OpOwnFormat", "FenceModeOf", "MaskedAtomicSize",
	} {
		require.Regexp(t, regexp.MustCompile(`(?m): can inline `+fn+`$`), string(out), fn)
	}
}

// The IPv4 header checksum on the worked example of RFC 1071's algorithm
// (a 20-byte header 192.168.0.1 → 192.168.0.199): the field's value with
// the field zero, and 0 over the header that carries it.
func TestIPv4HeaderChecksum(t *testing.T) {
	h := []byte{0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11,
		0x00, 0x00, 0xc0, 0xa8, 0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7}
	require.Equal(t, uint16(0xb861), IPv4HeaderChecksum(h))
	h[10], h[11] = 0xb8, 0x61
	require.Zero(t, IPv4HeaderChecksum(h))
	h[15]++
	require.NotZero(t, IPv4HeaderChecksum(h), "a changed address breaks it")
	require.Len(t, h, IPv4HeaderSize)
	require.Equal(t, byte(IPv4VersionIHL), h[0])
}
