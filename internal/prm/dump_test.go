package prm

import (
	"encoding/binary"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The inputs below are built byte by byte from the struct layouts of
// infiniband/mlx5dv.h with literal offsets, not with this package's
// constants or encoders, so that a wrong constant shows up as a wrong dump.

var be = binary.BigEndian

// ctrlBytes writes a control segment at ring[off:] from literal offsets.
func ctrlBytes(ring []byte, off int, opmod uint8, idx uint16, opcode uint8, qpn uint32, ds uint8, fm uint8, imm uint32) {
	be.PutUint32(ring[off:], uint32(opmod)<<24|uint32(idx)<<8|uint32(opcode))
	be.PutUint32(ring[off+4:], qpn<<8|uint32(ds))
	ring[off+8] = 0
	ring[off+9], ring[off+10] = 0, 0
	ring[off+11] = fm
	be.PutUint32(ring[off+12:], imm)
}

func dataBytes(ring []byte, off int, bc, lkey uint32, addr uint64) {
	be.PutUint32(ring[off:], bc)
	be.PutUint32(ring[off+4:], lkey)
	be.PutUint64(ring[off+8:], addr)
}

func raddrBytes(ring []byte, off int, addr uint64, rkey uint32) {
	be.PutUint64(ring[off:], addr)
	be.PutUint32(ring[off+8:], rkey)
	be.PutUint32(ring[off+12:], 0)
}

// avBytes writes a 48-byte address vector; key is written as 8 bytes.
func avBytes(ring []byte, off int, key uint64, dqp uint32) {
	be.PutUint64(ring[off:], key)
	be.PutUint32(ring[off+8:], 0x80000000|dqp)
	ring[off+12] = 0x35                                       // stat_rate_sl
	ring[off+13] = 0x81                                       // fl_mlid: fl, mlid 1
	be.PutUint16(ring[off+14:], 0xc123)                       // rlid / UDP sport
	copy(ring[off+20:], []byte{0x02, 0, 0, 0xaa, 0xbb, 0xcc}) // rmac
	ring[off+26] = 3                                          // tclass
	ring[off+27] = 64                                         // hop_limit
	be.PutUint32(ring[off+28:], 1<<30|5<<20|0x12345)          // grh_gid_fl
	copy(ring[off+32:], []byte{10: 0xff, 11: 0xff, 12: 192, 13: 168, 14: 1, 15: 2})
}

func requireAll(t *testing.T, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		require.Contains(t, got, w, "dump:\n%s", got)
	}
}

func TestDumpWQERDMAWriteImm(t *testing.T) {
	ring := make([]byte, 4*64)
	// pi 5 on a 4-WQEBB ring lands in slot 1.
	ctrlBytes(ring, 64, 0, 5, 0x09, 0x123, 3, 0x08, 0xdeadbeef)
	raddrBytes(ring, 80, 0x00007f0000001000, 0x1234)
	dataBytes(ring, 96, 64, 0x42, 0x00007f0000002000)
	got := DumpWQE(ring, 5, TransportRC)
	requireAll(t, got,
		"WQE pi=5 slot=1/4 offset=0x40 RDMA_WRITE_IMM wqebbs=1 transport=RC",
		"opcode=RDMA_WRITE_IMM(0x09) opmod=0x00 wqe_index=5 qpn=0x000123 ds=3",
		"fm_ce_se=0x08[CQ_UPDATE]",
		"imm=0xdeadbeef",
		"raddr   addr=0x00007f0000001000 rkey=0x00001234",
		"data    byte_count=64 lkey=0x00000042 addr=0x00007f0000002000",
	)
	require.NotContains(t, got, "!", "no problem to report:\n%s", got)
	require.NotContains(t, got, "wrapped")
	require.Equal(t, 4, strings.Count(got, "\n")+1, "header, ctrl, raddr, data:\n%s", got)
}

func TestDumpWQEIndexMismatchAndFlags(t *testing.T) {
	ring := make([]byte, 64)
	ctrlBytes(ring, 0, 0, 7, 0x0a, 0x10, 2, 0x80|0x08|0x02|0x01, 0)
	dataBytes(ring, 16, 1, 2, 3)
	got := DumpWQE(ring, 8, TransportRC)
	requireAll(t, got,
		"wqe_index=7 (!= pi&0xffff 8)",
		"fm_ce_se=0x8b[CQ_UPDATE|SOLICITED|bit0|fence=SMALL_AND_FENCE]",
	)
	// Small fence after a local invalidate, no completion requested.
	ctrlBytes(ring, 0, 0, 8, 0x0a, 0x10, 2, 0x20, 0)
	requireAll(t, DumpWQE(ring, 8, TransportRC), "fm_ce_se=0x20[fence=INITIATOR_SMALL]")
	ctrlBytes(ring, 0, 0, 8, 0x0a, 0x10, 2, 0, 0)
	requireAll(t, DumpWQE(ring, 8, TransportRC), "fm_ce_se=0x00[-]")
}

func TestDumpWQEUDSendInlineWraps(t *testing.T) {
	ring := make([]byte, 2*64)
	// Slot 1: ctrl + AV fill the WQEBB; the inline segment wraps to offset 0.
	ctrlBytes(ring, 64, 0, 1, 0x0a, 0x456, 6, 0x08, 0)
	avBytes(ring, 80, 0x11111111<<32, 0x789)
	be.PutUint32(ring[0:], 0x80000000|20)
	copy(ring[4:], "hello, inline world!")
	got := DumpWQE(ring, 1, TransportUD)
	requireAll(t, got,
		"SEND wqebbs=2 transport=UD",
		"av      qkey=0x11111111 dqpn=0x000789 ext=1",
		"stat_rate_sl=0x35(rate 3) fl=1 mlid=1 rlid=0xc123 rmac=02:00:00:aa:bb:cc",
		"tclass=3 hop_limit=64 grh=1 sgid_index=5 flow_label=0x12345 rgid=::ffff:192.168.1.2",
		"inline  len=20 data=68656c6c6f2c20696e6c696e6520776f726c6421 (wrapped to ring start)",
	)
	require.NotContains(t, got, "!")

	// The same bytes without a hint: the EXTENDED_UD_AV bit reveals the AV.
	requireAll(t, DumpWQE(ring, 1, TransportUnknown),
		"av      key=0x1111111100000000 (UD qkey 0x11111111 | DC key) dqpn/dct=0x000789 ext=1",
		"inline  len=20")
	// A qkey in the reserved word (a bare qkey passed as a 64-bit key) shows.
	avBytes(ring, 80, 0x11111111, 0x789)
	requireAll(t, DumpWQE(ring, 1, TransportUD), "qkey=0x00000000 reserved=0x11111111")
}

func TestDumpWQEInlineCrossesRingEnd(t *testing.T) {
	ring := make([]byte, 2*64)
	// Slot 1 at 64: ctrl, then a 60-byte inline payload from 84 to 144,
	// whose last 16 bytes lie at the ring start.
	ctrlBytes(ring, 64, 0, 1, 0x0a, 0x1, 5, 0, 0)
	be.PutUint32(ring[80:], 0x80000000|60)
	payload := make([]byte, 60)
	for i := range payload {
		payload[i] = byte(i + 1)
	}
	copy(ring[84:128], payload[:44])
	copy(ring[0:], payload[44:])
	got := DumpWQE(ring, 1, TransportRC)
	requireAll(t, got, "inline  len=60 data=0102030405060708090a0b0c0d0e0f10", "3a3b3c (crosses the ring end)")
}

func TestDumpWQEDCRead(t *testing.T) {
	ring := make([]byte, 4*64)
	ctrlBytes(ring, 128, 0, 2, 0x10, 0x77, 6, 0x08, 0)
	avBytes(ring, 144, 0x0123456789abcdef, 0xabc)
	raddrBytes(ring, 192, 0x1000, 0x99)
	dataBytes(ring, 208, 4096, 0x5, 0x2000)
	got := DumpWQE(ring, 2, TransportDC)
	requireAll(t, got,
		"opcode=RDMA_READ(0x10)",
		"av      dc_key=0x0123456789abcdef dct=0x000abc ext=1",
		"raddr   addr=0x0000000000001000 rkey=0x00000099",
		"data    byte_count=4096 lkey=0x00000005 addr=0x0000000000002000",
	)
	require.NotContains(t, got, "imm=", "RDMA_READ with imm 0 prints no imm")
}

func TestDumpWQEAtomics(t *testing.T) {
	ring := make([]byte, 2*64)
	ctrlBytes(ring, 0, 0, 0, 0x11, 0x5, 4, 0x08, 0)
	raddrBytes(ring, 16, 0x3000, 0x7)
	be.PutUint64(ring[32:], 0xaaaa)
	be.PutUint64(ring[40:], 0xbbbb)
	dataBytes(ring, 48, 8, 0x9, 0x4000)
	requireAll(t, DumpWQE(ring, 0, TransportRC),
		"ATOMIC_CS",
		"atomic  swap=0x000000000000aaaa compare=0x000000000000bbbb",
		"data    byte_count=8")

	ctrlBytes(ring, 0, 0, 0, 0x12, 0x5, 4, 0x08, 0)
	be.PutUint64(ring[40:], 0)
	got := DumpWQE(ring, 0, TransportRC)
	requireAll(t, got, "ATOMIC_FA", "atomic  add=0x000000000000aaaa")
	require.NotContains(t, got, "compare")

	// Masked CS on 8 bytes: opmod 0x09, operands in two segments; the
	// second one wraps to the ring start.
	ring = make([]byte, 64)
	ctrlBytes(ring, 0, 0x09, 0, 0x14, 0x5, 5, 0x08, 0)
	raddrBytes(ring, 16, 0x3000, 0x7)
	be.PutUint64(ring[32:], 1)
	be.PutUint64(ring[40:], 2)
	be.PutUint64(ring[48:], 3)
	be.PutUint64(ring[56:], 4)
	got = DumpWQE(ring, 0, TransportRC)
	requireAll(t, got, "opmod=0x09",
		"matomic size=8 swap=0x0000000000000001 compare=0x0000000000000002 swap_mask=0x0000000000000003 compare_mask=0x0000000000000004",
		"!       ds=5 (80 bytes) is larger than the ring (64 bytes)")

	ring = make([]byte, 2*64)
	ctrlBytes(ring, 0, 0x09, 0, 0x14, 0x5, 5, 0x08, 0)
	raddrBytes(ring, 16, 0x3000, 0x7)
	be.PutUint64(ring[32:], 1)
	be.PutUint64(ring[40:], 2)
	be.PutUint64(ring[48:], 3)
	be.PutUint64(ring[56:], 4)
	dataBytes(ring, 64, 8, 0x9, 0x4000)
	got = DumpWQE(ring, 0, TransportRC)
	requireAll(t, got, "compare_mask=0x0000000000000004", "data    byte_count=8 lkey=0x00000009")
	require.NotContains(t, got, "!")

	// Masked FA on 4 bytes: opmod 0x08, add and boundary in one segment.
	ctrlBytes(ring, 0, 0x08, 0, 0x15, 0x5, 4, 0x08, 0)
	be.PutUint32(ring[32:], 0x10)
	be.PutUint32(ring[36:], 0x80008000)
	dataBytes(ring, 48, 4, 0x9, 0x4000)
	requireAll(t, DumpWQE(ring, 0, TransportRC),
		"ATOMIC_MASKED_FA", "matomic size=4 add=0x00000010 field_boundary=0x80008000", "data    byte_count=4")

	// Masked CS on 4 bytes.
	ctrlBytes(ring, 0, 0x08, 0, 0x14, 0x5, 4, 0x08, 0)
	be.PutUint32(ring[32:], 1)
	be.PutUint32(ring[36:], 2)
	be.PutUint32(ring[40:], 3)
	be.PutUint32(ring[44:], 4)
	requireAll(t, DumpWQE(ring, 0, TransportRC),
		"matomic size=4 swap=0x00000001 compare=0x00000002 swap_mask=0x00000003 compare_mask=0x00000004")

	// A masked atomic without the extended-atomic opmod is named.
	ctrlBytes(ring, 0, 0x00, 0, 0x15, 0x5, 4, 0x08, 0)
	requireAll(t, DumpWQE(ring, 0, TransportRC), "opmod 0x00 of a masked atomic lacks the extended-atomic bit 0x08")
}

func TestDumpWQEOddShapes(t *testing.T) {
	ring := make([]byte, 64)
	ctrlBytes(ring, 0, 0, 0, 0x08, 0x5, 0, 0, 0)
	requireAll(t, DumpWQE(ring, 0, TransportRC), "ds=0: the WQE has no control segment")

	ctrlBytes(ring, 0, 0, 0, 0x08, 0x5, 1, 0, 0)
	requireAll(t, DumpWQE(ring, 0, TransportRC), "remote address segment needs 1 units, ds leaves 0")

	ctrlBytes(ring, 0, 0, 0, 0x0a, 0x5, 2, 0, 0)
	requireAll(t, DumpWQE(ring, 0, TransportUD), "address vector needs 3 units, ds leaves 1")

	ctrlBytes(ring, 0, 0, 0, 0x0a, 0x5, 2, 0, 0)
	be.PutUint32(ring[16:], 0x80000000|100)
	requireAll(t, DumpWQE(ring, 0, TransportRC), "inline  len=100 (needs 7 units, ds leaves 1)")

	ctrlBytes(ring, 0, 0, 0, 0x00, 0x5, 2, 0, 0)
	copy(ring[16:], []byte{0xab, 0xcd})
	requireAll(t, DumpWQE(ring, 0, TransportRC), "NOP", "pad1    abcd0064")

	ctrlBytes(ring, 0, 0, 0, 0x25, 0x5, 2, 0, 0)
	requireAll(t, DumpWQE(ring, 0, TransportRC), "opcode=UMR(0x25)", "seg1    abcd")

	ctrlBytes(ring, 0, 0, 0, 0x77, 0x5, 1, 0, 0)
	requireAll(t, DumpWQE(ring, 0, TransportRC), "opcode=OPCODE(0x77)")

	ctrlBytes(ring, 0, 0, 0, 0x01, 0x5, 2, 0, 0x1234)
	dataBytes(ring, 16, 0, 0x100, 0)
	requireAll(t, DumpWQE(ring, 0, TransportRC), "SEND_INVAL", "inval_rkey=0x00001234", "(end of list)")

	requireAll(t, DumpWQE(nil, 0, TransportRC), "ring of 0 bytes holds no WQEBB")
	requireAll(t, DumpWQE(make([]byte, 100), 3, TransportRC), "slot=0/1")
}

// cqe64 builds a CQE64 from literal offsets.
func cqe64(opOwn uint8) []byte {
	c := make([]byte, 64)
	c[63] = opOwn
	return c
}

func TestDumpCQERequester(t *testing.T) {
	c := cqe64(0x01) // REQ, owner 1
	be.PutUint32(c[56:], 0x0a000123)
	be.PutUint16(c[60:], 7)
	be.PutUint32(c[44:], 4096)
	got := DumpCQE(c)
	requireAll(t, got, "CQE REQ(0) owner=1 se=0 format=NONE wqe_counter=7",
		"req     qpn=0x000123 send_opcode=SEND byte_cnt=4096")
}

func TestDumpCQEResponder(t *testing.T) {
	c := cqe64(0x32) // RESP_SEND_IMM, solicited, owner 0
	be.PutUint32(c[36:], 0xcafebabe)
	be.PutUint32(c[44:], 100)
	be.PutUint32(c[24:], 2<<28|5<<24|0x777)
	be.PutUint16(c[22:], 0x11)
	be.PutUint32(c[32:], 0x42)
	be.PutUint32(c[56:], 0x000321)
	be.PutUint64(c[48:], 123456)
	got := DumpCQE(c)
	requireAll(t, got, "RESP_SEND_IMM(3) owner=0 se=1",
		"resp    qpn=0x000321 byte_cnt=100 imm=0xcafebabe src_qp=0x000777 sl=5 grh=2 slid=0x0011",
		"srqn_uidx=0x000042", "timestamp=123456")

	c[63] = 0x14 // RESP_WR_IMM, scatter-32
	requireAll(t, DumpCQE(c), "RESP_WR_IMM(1)", "format=SCATTER_32", "imm=0xcafebabe", "scattered into this CQE")
	c[63] = 0x40 // RESP_SEND_INV
	requireAll(t, DumpCQE(c), "RESP_SEND_INV(4)", "inval_rkey=0xcafebabe")
	c[63] = 0x20 // RESP_SEND
	requireAll(t, DumpCQE(c), "RESP_SEND(2)", "pkey_index=47806")

	c128 := make([]byte, 128)
	copy(c128[64:], c)
	c128[127] = 0x28 // RESP_SEND, scatter-64
	requireAll(t, DumpCQE(c128), "CQE128 RESP_SEND(2)", "format=SCATTER_64", "first half of the 128-byte CQE")
}

func TestDumpCQEError(t *testing.T) {
	c := cqe64(0xd1) // REQ_ERR, owner 1
	c[55] = 0x13
	c[54] = 0x88
	be.PutUint32(c[56:], 0x08000123)
	be.PutUint16(c[60:], 9)
	got := DumpCQE(c)
	requireAll(t, got, "REQ_ERR(13) owner=1", "wqe_counter=9",
		"error   syndrome=REMOTE_ACCESS_ERR(0x13) vendor_syndrome=0x88 qpn=0x000123 wqe_opcode=RDMA_WRITE")

	c = cqe64(0xe0) // RESP_ERR
	c[55] = 0x05
	c[54] = 0x93
	be.PutUint32(c[32:], 0x55)
	requireAll(t, DumpCQE(c), "RESP_ERR(14)", "syndrome=WR_FLUSH_ERR(0x05)", "vendor_syndrome=0x93(ODP_PFAULT)", "srqn=0x000055")

	c[55] = 0x99
	requireAll(t, DumpCQE(c), "syndrome=SYNDROME(0x99)")
}

func TestDumpCQEOthers(t *testing.T) {
	requireAll(t, DumpCQE(cqe64(0xf0)), "INVALID(15) owner=0 se=0 format=NONE (not written by the device)")
	c := cqe64(0x0d) // REQ, compressed, owner 1
	be.PutUint32(c[44:], 10)
	requireAll(t, DumpCQE(c), "format=COMPRESSED", "zip     completions=10")
	requireAll(t, DumpCQE(cqe64(0x50)), "RESIZE_CQ(5)", "other")
	requireAll(t, DumpCQE(make([]byte, 10)), "10 bytes, shorter than a CQE64")
	c = cqe64(0x00)
	c[62] = 0xff
	requireAll(t, DumpCQE(c), "signature=0xff")
}

func FuzzDumpWQE(f *testing.F) {
	ring := make([]byte, 2*64)
	ctrlBytes(ring, 64, 0, 1, 0x0a, 0x456, 6, 0x08, 0)
	avBytes(ring, 80, 0x11111111<<32, 0x789)
	be.PutUint32(ring[0:], 0x80000000|20)
	f.Add(ring, uint32(1), uint8(TransportUD))
	r2 := make([]byte, 64)
	ctrlBytes(r2, 0, 0x09, 0, 0x14, 0x5, 5, 0x08, 0)
	f.Add(r2, uint32(0), uint8(TransportRC))
	f.Add([]byte{}, uint32(0), uint8(0))
	f.Add(make([]byte, 65), uint32(7), uint8(9))
	f.Fuzz(func(t *testing.T, ring []byte, pi uint32, tr uint8) {
		s := DumpWQE(ring, pi, Transport(tr))
		if !strings.HasPrefix(s, "WQE") {
			t.Fatalf("dump does not start with WQE: %q", s)
		}
	})
}

func FuzzDumpCQE(f *testing.F) {
	c := cqe64(0xd1)
	c[55] = 0x13
	f.Add(c)
	f.Add(cqe64(0x0d))
	f.Add(make([]byte, 128))
	f.Add([]byte{1, 2, 3})
	f.Fuzz(func(t *testing.T, b []byte) {
		s := DumpCQE(b)
		if !strings.HasPrefix(s, "CQE") {
			t.Fatalf("dump does not start with CQE: %q", s)
		}
	})
}
