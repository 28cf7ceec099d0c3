package monocq

import (
	"encoding/binary"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/internal/prm"
)

// The fake producer below writes CQEs the way a device does, with
// encoding/binary and the prm offsets only; it shares no code with the
// decoder it checks.

var pageSize = unix.Getpagesize()

// mapGuarded maps n bytes (a multiple of the page size) of read-write
// anonymous memory between two inaccessible guard pages, so that any access
// just outside it faults.
func mapGuarded(t testing.TB, n int) []byte {
	t.Helper()
	mem, err := unix.Mmap(-1, 0, n+2*pageSize, unix.PROT_NONE, unix.MAP_ANON|unix.MAP_PRIVATE)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, unix.Munmap(mem)) })
	b := mem[pageSize : pageSize+n]
	require.NoError(t, unix.Mprotect(b, unix.PROT_READ|unix.PROT_WRITE))
	return b
}

// ring is a completion ring with its doorbell record and UAR page in mmap'd
// memory, and a producer index.
type ring struct {
	buf   []byte // cnt slots of size bytes; ends at a guard page
	dbrec []byte // 8 bytes
	uar   []byte // one page
	cnt   uint32
	size  uint32
	pi    uint32 // free-running producer index
}

func newRing(t testing.TB, cnt, size uint32) *ring {
	t.Helper()
	n := int(cnt * size)
	region := (n + pageSize - 1) / pageSize * pageSize
	mem := mapGuarded(t, region)
	r := &ring{
		buf:   mem[region-n:],
		dbrec: mapGuarded(t, pageSize)[:8],
		uar:   mapGuarded(t, pageSize),
		cnt:   cnt,
		size:  size,
	}
	for i := uint32(0); i < cnt; i++ {
		r.cqe64(i)[prm.CQEOpOwn] = 0xf0 // INVALID, as providers initialise a CQ
	}
	return r
}

func (r *ring) config() Config {
	return Config{
		Buf:     unsafe.Pointer(&r.buf[0]),
		CQECnt:  r.cnt,
		CQESize: r.size,
		DBRec:   unsafe.Pointer(&r.dbrec[0]),
		UAR:     unsafe.Pointer(&r.uar[0]),
		CQN:     0x4d2,
	}
}

func (r *ring) newCQ(t testing.TB) *CQ {
	t.Helper()
	cq, err := New(r.config())
	require.NoError(t, err)
	return cq
}

// slotBytes is the whole slot that index i maps to.
func (r *ring) slotBytes(i uint32) []byte {
	off := (i % r.cnt) * r.size
	return r.buf[off : off+r.size]
}

// cqe64 is the CQE64 part of the slot: the second half of a 128-byte slot.
func (r *ring) cqe64(i uint32) []byte { s := r.slotBytes(i); return s[len(s)-64:] }

// firstHalf is the first 64 bytes of a 128-byte slot.
func (r *ring) firstHalf(i uint32) []byte { return r.slotBytes(i)[:64] }

// owner is the owner bit the device writes at index i: the lap's parity.
func (r *ring) owner(i uint32) uint8 { return uint8(i/r.cnt) & 1 }

// consumerIndexRecord reads doorbell record word 0.
func (r *ring) consumerIndexRecord() uint32 { return binary.BigEndian.Uint32(r.dbrec[0:]) }

// cqeFields is everything the producer can put in a CQE.
type cqeFields struct {
	opcode     prm.CQEOpcode
	format     uint8
	solicited  bool
	qpn        uint32
	sendOp     prm.Opcode
	wqeCounter uint16
	byteCnt    uint32
	imm        uint32 // imm_inval_pkey
	srqn       uint32
	sl         uint8
	grh        uint8
	srcQP      uint32
	slid       uint16
	mlPath     uint8
	syndrome   uint8
	vendor     uint8
	timestamp  uint64
	rxHash     uint32
}

// encode writes f into a 64-byte CQE64, op_own included with owner bit own.
func (f *cqeFields) encode(b []byte, own uint8) {
	be := binary.BigEndian
	be.PutUint32(b[prm.CQERxHashResult:], f.rxHash)
	b[prm.CQEMLPath] = f.mlPath
	be.PutUint16(b[prm.CQESLID:], f.slid)
	be.PutUint32(b[prm.CQEFlagsRQPN:], uint32(f.grh)<<28|uint32(f.sl)<<24|f.srcQP)
	be.PutUint32(b[prm.CQESRQNUIdx:], f.srqn)
	be.PutUint32(b[prm.CQEImmInvalPkey:], f.imm)
	be.PutUint32(b[prm.CQEByteCnt:], f.byteCnt)
	be.PutUint64(b[prm.CQETimestamp:], f.timestamp)
	be.PutUint32(b[prm.CQESopDropQPN:], uint32(f.sendOp)<<24|f.qpn)
	be.PutUint16(b[prm.CQEWQECounter:], f.wqeCounter)
	if f.opcode == prm.CQEReqErr || f.opcode == prm.CQERespErr {
		b[prm.ErrCQEVendorSyndrome] = f.vendor
		b[prm.ErrCQESyndrome] = f.syndrome
	}
	op := uint8(f.opcode)<<4 | f.format<<2 | own
	if f.solicited {
		op |= 2
	}
	b[prm.CQEOpOwn] = op
}

// put writes one CQE at the producer index, op_own last as a device does,
// and advances the producer index.
func (r *ring) put(f cqeFields) {
	var tmp [64]byte
	f.encode(tmp[:], r.owner(r.pi))
	b := r.cqe64(r.pi)
	copy(b[:63], tmp[:63]) // every field but op_own
	b[63] = tmp[63]
	r.pi++
}

// putScatter writes a CQE whose payload the device scattered into it.
func (r *ring) putScatter(f cqeFields, payload []byte) {
	if r.size == 128 {
		f.format = prm.CQEFormatScatter64
		copy(r.firstHalf(r.pi), payload)
	} else {
		f.format = prm.CQEFormatScatter32
	}
	f.byteCnt = uint32(len(payload))
	b := r.cqe64(r.pi)
	own := r.owner(r.pi)
	var tmp [64]byte
	f.encode(tmp[:], own)
	if f.format == prm.CQEFormatScatter32 {
		copy(tmp[:32], payload) // the payload overlays the first 32 bytes
	}
	copy(b[:63], tmp[:63])
	b[63] = tmp[63]
	r.pi++
}

// mini is one mini-CQE as the producer lays it out.
type mini [8]byte

func reqMini(wqeCounter uint16, op prm.Opcode, byteCnt uint32) mini {
	var m mini
	binary.BigEndian.PutUint16(m[0:], wqeCounter)
	m[2] = uint8(op)
	binary.BigEndian.PutUint32(m[4:], byteCnt)
	return m
}

func respMini(hash, byteCnt uint32) mini {
	var m mini
	binary.BigEndian.PutUint32(m[0:], hash)
	binary.BigEndian.PutUint32(m[4:], byteCnt)
	return m
}

// putSession writes a compressed session in the basic layout: mini-CQE
// arrays in slots pi+1, pi+8, pi+16, ..., then the title (format 3,
// byte_cnt = number of mini-CQEs) at pi, op_own last. The other slots of the
// session are left as they were.
func (r *ring) putSession(title cqeFields, minis []mini) {
	for k := 0; k*8 < len(minis); k++ {
		at := uint32(8 * k)
		if k == 0 {
			at = 1
		}
		arr := r.cqe64(r.pi + at)
		for j := 0; j < 8 && 8*k+j < len(minis); j++ {
			copy(arr[8*j:], minis[8*k+j][:])
		}
	}
	title.format = prm.CQEFormatCompressed
	title.byteCnt = uint32(len(minis))
	var tmp [64]byte
	title.encode(tmp[:], r.owner(r.pi))
	b := r.cqe64(r.pi)
	copy(b[:63], tmp[:63])
	b[63] = tmp[63]
	r.pi += uint32(len(minis))
}

// startAt moves a fresh poller to consumer index i, as if i CQEs had been
// polled and released (the doorbell record holds i).
func (cq *CQ) startAt(i uint32) { cq.ci, cq.state = i, 0; cq.Release() }
