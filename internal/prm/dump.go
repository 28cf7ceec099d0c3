package prm

import (
	"encoding/binary"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
)

// Readable dumps of WQEs and CQEs as they lie in memory, for test failures,
// the software HCA's strict mode and users debugging their own posts. They
// never panic, whatever the bytes: a malformed WQE or CQE is decoded as far
// as it goes and the problem is named in the text.

// Transport tells DumpWQE which segments a WQE carries between its control
// segment and its payload: UD and DC put a 48-byte address vector right
// after the control segment, RC does not.
type Transport uint8

// Transports for DumpWQE.
const (
	// TransportUnknown makes DumpWQE guess: it decodes an address vector when
	// the word where its dqp_dct would be has the MLX5_EXTENDED_UD_AV bit
	// (which UD and DC always set).
	TransportUnknown Transport = iota
	TransportRC
	TransportUD
	TransportDC
)

var transportNames = [...]string{
	TransportUnknown: "unknown",
	TransportRC:      "RC",
	TransportUD:      "UD",
	TransportDC:      "DC",
}

// String returns "RC", "UD", "DC" or "unknown".
func (t Transport) String() string {
	if int(t) < len(transportNames) {
		return transportNames[t]
	}
	return "TRANSPORT(" + strconv.Itoa(int(t)) + ")"
}

// maxDumpBytes caps the hex shown for inline payloads and unknown segments.
const maxDumpBytes = 64

// sendRing reads a send ring with the ring-end wrap: byte offsets are taken
// modulo the ring length.
type sendRing []byte

func (r sendRing) byteAt(off int) byte { return r[off%len(r)] }

// seg returns the 16 bytes of the segment starting at off (16-aligned, so
// it never crosses the ring end when the ring is a multiple of 16 bytes).
func (r sendRing) seg(off int) (s [SegmentSize]byte) {
	for i := range s {
		s[i] = r.byteAt(off + i)
	}
	return s
}

func (r sendRing) bytes(off, n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = r.byteAt(off + i)
	}
	return b
}

// DumpWQE decodes the send WQE that starts at producer index pi (free
// running, in WQEBBs; its slot is pi modulo the number of WQEBBs in ring)
// of the send ring ring (the sq buffer of mlx5dv_qp: wqe_cnt × 64 bytes), one
// line per segment, following segments and inline data that wrap to the ring
// start. t says whether an address vector follows the control segment (see
// Transport).
func DumpWQE(ring []byte, pi uint32, t Transport) string {
	var b strings.Builder
	nbb := len(ring) / WQEBBSize
	if nbb == 0 {
		fmt.Fprintf(&b, "WQE: ring of %d bytes holds no WQEBB", len(ring))
		return b.String()
	}
	r := sendRing(ring[:nbb*WQEBBSize])
	slot := int(pi % uint32(nbb))
	base := slot * WQEBBSize

	c := r.seg(base)
	w0 := binary.BigEndian.Uint32(c[CtrlOpmodIdxOpcode:])
	w1 := binary.BigEndian.Uint32(c[CtrlQPNDS:])
	op := Opcode(w0 & CtrlOpcodeMask)
	opmod := uint8(w0 >> CtrlOpmodShift)
	idx := uint16(w0 >> CtrlWQEIndexShift)
	ds := int(w1 & CtrlDSMask)
	fm := c[CtrlFmCeSe]
	imm := binary.BigEndian.Uint32(c[CtrlImm:])

	fmt.Fprintf(&b, "WQE pi=%d slot=%d/%d offset=0x%x %s", pi, slot, nbb, base, op)
	if ds > 0 {
		fmt.Fprintf(&b, " wqebbs=%d", WQEBBs(ds))
	}
	if t != TransportUnknown {
		fmt.Fprintf(&b, " transport=%s", t)
	}
	fmt.Fprintf(&b, "\n  ctrl    opcode=%s(0x%02x) opmod=0x%02x wqe_index=%d", op, uint8(op), opmod, idx)
	if idx != uint16(pi) {
		fmt.Fprintf(&b, " (!= pi&0xffff %d)", uint16(pi))
	}
	fmt.Fprintf(&b, " qpn=0x%06x ds=%d", w1>>CtrlQPNShift, ds)
	if rsv := w1 & 0xc0; rsv != 0 {
		fmt.Fprintf(&b, " reserved_ds_bits=0x%02x", rsv)
	}
	fmt.Fprintf(&b, " fm_ce_se=0x%02x[%s]", fm, fmCeSeString(fm))
	if sig := c[CtrlSignature]; sig != 0 {
		fmt.Fprintf(&b, " signature=0x%02x", sig)
	}
	if s := binary.BigEndian.Uint16(c[CtrlDCIStreamID:]); s != 0 {
		fmt.Fprintf(&b, " dci_stream=%d", s)
	}
	switch {
	case op == OpSendInval:
		fmt.Fprintf(&b, " inval_rkey=0x%08x", imm)
	case op.HasImm() || imm != 0:
		fmt.Fprintf(&b, " imm=0x%08x", imm)
	}

	if ds == 0 {
		b.WriteString("\n  !       ds=0: the WQE has no control segment")
		return b.String()
	}
	if ds*SegmentSize > len(r) {
		fmt.Fprintf(&b, "\n  !       ds=%d (%d bytes) is larger than the ring (%d bytes)", ds, ds*SegmentSize, len(r))
		ds = len(r) / SegmentSize
	}
	d := wqeDecoder{b: &b, r: r, off: base + CtrlSize, left: ds - 1}

	switch op {
	case OpNop:
		d.raw("pad")
		return b.String()
	case OpSend, OpSendImm, OpSendInval, OpRdmaWrite, OpRdmaWriteImm, OpRdmaRead,
		OpAtomicCS, OpAtomicFA, OpAtomicMaskedCS, OpAtomicMaskedFA:
	default:
		d.raw("seg")
		return b.String()
	}

	hasAV := t == TransportUD || t == TransportDC
	if t == TransportUnknown && d.left >= AVSegments {
		s := r.seg(d.off + AVDQPDCT/SegmentSize*SegmentSize)
		hasAV = binary.BigEndian.Uint32(s[AVDQPDCT%SegmentSize:])&ExtendedUDAV != 0
	}
	if hasAV && !d.av(t) {
		return b.String()
	}
	if op.HasRaddr() && !d.raddr() {
		return b.String()
	}
	switch {
	case op == OpAtomicCS || op == OpAtomicFA:
		if !d.atomic(op) {
			return b.String()
		}
	case op.IsMaskedAtomic():
		if !d.maskedAtomic(op, opmod) {
			return b.String()
		}
	}
	d.payload()
	return b.String()
}

// fmCeSeString names the bits of an fm_ce_se byte.
func fmCeSeString(fm uint8) string {
	var parts []string
	switch ce := (fm >> 2) & 3; ce {
	case FlagCQUpdate >> 2:
		parts = append(parts, "CQ_UPDATE")
	case 0:
	default:
		parts = append(parts, "ce="+strconv.Itoa(int(ce)))
	}
	if fm&FlagSolicited != 0 {
		parts = append(parts, "SOLICITED")
	}
	if fm&1 != 0 {
		parts = append(parts, "bit0")
	}
	if m := FenceModeOf(fm); m != FenceNone {
		parts = append(parts, "fence="+m.String())
	}
	if len(parts) == 0 {
		return "-"
	}
	return strings.Join(parts, "|")
}

// wqeDecoder walks the segments after the control segment.
type wqeDecoder struct {
	b    *strings.Builder
	r    sendRing
	off  int // byte offset of the next segment (taken modulo the ring)
	left int // 16-byte units the ds count still covers
}

// need reports whether n more units are left, and says so in the dump if not.
func (d *wqeDecoder) need(n int, what string) bool {
	if d.left >= n {
		return true
	}
	fmt.Fprintf(d.b, "\n  !       %s needs %d units, ds leaves %d", what, n, d.left)
	return false
}

func (d *wqeDecoder) next() [SegmentSize]byte {
	s := d.r.seg(d.off)
	d.off += SegmentSize
	d.left--
	return s
}

// wrapNote marks a segment that lies (wholly or from some byte on) past the
// ring end, that is at the ring start. Offsets grow from a slot inside the
// ring and ds never covers more than the ring, so one comparison decides.
func (d *wqeDecoder) wrapNote(start int) {
	switch {
	case start >= len(d.r):
		d.b.WriteString(" (wrapped to ring start)")
	case d.off > len(d.r):
		d.b.WriteString(" (crosses the ring end)")
	}
}

func (d *wqeDecoder) av(t Transport) bool {
	if !d.need(AVSegments, "address vector") {
		return false
	}
	start := d.off
	var av [AVSize]byte
	for i := 0; i < AVSegments; i++ {
		s := d.next()
		copy(av[i*SegmentSize:], s[:])
	}
	dq := binary.BigEndian.Uint32(av[AVDQPDCT:])
	switch t {
	case TransportDC:
		fmt.Fprintf(d.b, "\n  av      dc_key=0x%016x dct=0x%06x", binary.BigEndian.Uint64(av[AVDCKey:]), dq&AVDQPNMask)
	case TransportUD:
		fmt.Fprintf(d.b, "\n  av      qkey=0x%08x", binary.BigEndian.Uint32(av[AVQKey:]))
		if rsv := binary.BigEndian.Uint32(av[AVQKeyResvd:]); rsv != 0 {
			fmt.Fprintf(d.b, " reserved=0x%08x", rsv)
		}
		fmt.Fprintf(d.b, " dqpn=0x%06x", dq&AVDQPNMask)
	default:
		fmt.Fprintf(d.b, "\n  av      key=0x%016x (UD qkey 0x%08x | DC key) dqpn/dct=0x%06x",
			binary.BigEndian.Uint64(av[AVKey:]), binary.BigEndian.Uint32(av[AVQKey:]), dq&AVDQPNMask)
	}
	ext := dq >> 31
	fmt.Fprintf(d.b, " ext=%d", ext)
	if rsv := dq & 0x7f000000; rsv != 0 {
		fmt.Fprintf(d.b, " reserved_dqp_bits=0x%08x", rsv)
	}
	if ext == 0 {
		d.b.WriteString(" (EXTENDED_UD_AV clear)")
	}
	srs := av[AVStatRateSL]
	fl := av[AVFlMLID]
	g := binary.BigEndian.Uint32(av[AVGRHGIDFL:])
	var gid [16]byte
	copy(gid[:], av[AVRGID:])
	m := av[AVRMAC : AVRMAC+AVRMACSize]
	fmt.Fprintf(d.b, "\n          stat_rate_sl=0x%02x(rate %d) fl=%d mlid=%d rlid=0x%04x rmac=%02x:%02x:%02x:%02x:%02x:%02x",
		srs, srs>>AVStatRateShift, fl>>7, fl&AVMLIDMask, binary.BigEndian.Uint16(av[AVRLID:]),
		m[0], m[1], m[2], m[3], m[4], m[5])
	fmt.Fprintf(d.b, " tclass=%d hop_limit=%d grh=%d sgid_index=%d flow_label=0x%05x rgid=%s",
		av[AVTClass], av[AVHopLimit], (g>>30)&1, (g>>AVSGIDShift)&AVSGIDMask, g&AVFlowLblMask,
		netip.AddrFrom16(gid).String())
	d.wrapNote(start)
	return true
}

func (d *wqeDecoder) raddr() bool {
	if !d.need(1, "remote address segment") {
		return false
	}
	start := d.off
	s := d.next()
	fmt.Fprintf(d.b, "\n  raddr   addr=0x%016x rkey=0x%08x", binary.BigEndian.Uint64(s[RaddrAddr:]), binary.BigEndian.Uint32(s[RaddrRkey:]))
	if rsv := binary.BigEndian.Uint32(s[RaddrResvd:]); rsv != 0 {
		fmt.Fprintf(d.b, " reserved=0x%08x", rsv)
	}
	d.wrapNote(start)
	return true
}

func (d *wqeDecoder) atomic(op Opcode) bool {
	if !d.need(1, "atomic segment") {
		return false
	}
	start := d.off
	s := d.next()
	sa := binary.BigEndian.Uint64(s[AtomicSwapAdd:])
	cmp := binary.BigEndian.Uint64(s[AtomicCompare:])
	if op == OpAtomicCS {
		fmt.Fprintf(d.b, "\n  atomic  swap=0x%016x compare=0x%016x", sa, cmp)
	} else {
		fmt.Fprintf(d.b, "\n  atomic  add=0x%016x", sa)
		if cmp != 0 {
			fmt.Fprintf(d.b, " compare(unused)=0x%016x", cmp)
		}
	}
	d.wrapNote(start)
	return true
}

func (d *wqeDecoder) maskedAtomic(op Opcode, opmod uint8) bool {
	size := MaskedAtomicSize(opmod)
	if size == 0 {
		fmt.Fprintf(d.b, "\n  !       opmod 0x%02x of a masked atomic lacks the extended-atomic bit 0x%02x; decoding as 8 bytes",
			opmod, OpmodExtAtomic)
		size = 8
	}
	operands := 2 // add, field boundary
	if op == OpAtomicMaskedCS {
		operands = 4 // swap, compare, swap mask, compare mask
	}
	units := (operands*size + SegmentSize - 1) / SegmentSize
	if !d.need(units, "masked atomic segment") {
		return false
	}
	start := d.off
	var buf []byte
	for i := 0; i < units; i++ {
		s := d.next()
		buf = append(buf, s[:]...)
	}
	val := func(i int) string {
		f := buf[i*size : (i+1)*size]
		switch size {
		case 4:
			return fmt.Sprintf("0x%08x", binary.BigEndian.Uint32(f))
		case 8:
			return fmt.Sprintf("0x%016x", binary.BigEndian.Uint64(f))
		}
		return fmt.Sprintf("0x%x", f)
	}
	if op == OpAtomicMaskedCS {
		fmt.Fprintf(d.b, "\n  matomic size=%d swap=%s compare=%s swap_mask=%s compare_mask=%s",
			size, val(0), val(1), val(2), val(3))
	} else {
		fmt.Fprintf(d.b, "\n  matomic size=%d add=%s field_boundary=%s", size, val(0), val(1))
	}
	d.wrapNote(start)
	return true
}

// payload decodes the rest of the WQE as data and inline segments.
func (d *wqeDecoder) payload() {
	for d.left > 0 {
		start := d.off
		s := d.r.seg(d.off)
		bc := binary.BigEndian.Uint32(s[DataByteCount:])
		if bc&InlineSeg == 0 {
			d.next()
			fmt.Fprintf(d.b, "\n  data    byte_count=%d lkey=0x%08x addr=0x%016x",
				bc, binary.BigEndian.Uint32(s[DataLKey:]), binary.BigEndian.Uint64(s[DataAddr:]))
			if bc == 0 && binary.BigEndian.Uint32(s[DataLKey:]) == InvalidLKey {
				d.b.WriteString(" (end of list)")
			}
			d.wrapNote(start)
			continue
		}
		n := int(bc &^ InlineSeg)
		units := max(InlineDS(n), 1)
		fmt.Fprintf(d.b, "\n  inline  len=%d", n)
		if units > d.left {
			fmt.Fprintf(d.b, " (needs %d units, ds leaves %d)", units, d.left)
			units = d.left
			n = min(n, units*SegmentSize-InlineHeaderSize)
		}
		shown := min(n, maxDumpBytes)
		fmt.Fprintf(d.b, " data=%x", d.r.bytes(start+InlineHeaderSize, shown))
		if shown < n {
			fmt.Fprintf(d.b, "...(+%d bytes)", n-shown)
		}
		d.off += units * SegmentSize
		d.left -= units
		d.wrapNote(start)
	}
}

// raw prints the remaining units as hex, one line per segment.
func (d *wqeDecoder) raw(name string) {
	for i := 0; d.left > 0; i++ {
		start := d.off
		s := d.next()
		fmt.Fprintf(d.b, "\n  %-7s %x", name+strconv.Itoa(i+1), s[:])
		d.wrapNote(start)
	}
}

var cqeFormatNames = [4]string{
	CQEFormatNone:       "NONE",
	CQEFormatScatter32:  "SCATTER_32",
	CQEFormatScatter64:  "SCATTER_64",
	CQEFormatCompressed: "COMPRESSED",
}

// DumpCQE decodes a CQE: 64 bytes, or 128 with the CQE64 in the second half
// (the first half then holds scattered data or the GRH). Requester,
// responder and error completions show the fields that matter for them,
// error syndromes by name.
func DumpCQE(cqe []byte) string {
	var b strings.Builder
	var half []byte
	switch {
	case len(cqe) >= CQE128Size:
		half = cqe[CQE128Size-CQE64Size : CQE128Size]
		b.WriteString("CQE128 ")
	case len(cqe) >= CQE64Size:
		half = cqe[:CQE64Size]
		b.WriteString("CQE ")
	default:
		fmt.Fprintf(&b, "CQE: %d bytes, shorter than a CQE64", len(cqe))
		return b.String()
	}
	be32 := func(off int) uint32 { return binary.BigEndian.Uint32(half[off:]) }
	be16 := func(off int) uint16 { return binary.BigEndian.Uint16(half[off:]) }
	oo := half[CQEOpOwn]
	op := OpOwnOpcode(oo)
	format := OpOwnFormat(oo)
	fmt.Fprintf(&b, "%s(%d) owner=%d se=%d format=%s", op, uint8(op), oo&CQEOwnerMask, (oo&CQESolicitedMask)>>1, cqeFormatNames[format])
	if op == CQEInvalid {
		b.WriteString(" (not written by the device)")
		return b.String()
	}
	fmt.Fprintf(&b, " wqe_counter=%d", be16(CQEWQECounter))
	if sig := half[CQESignature]; sig != 0 {
		fmt.Fprintf(&b, " signature=0x%02x", sig)
	}
	sop := be32(CQESopDropQPN)
	qpn := sop & CQEQPNMask
	switch {
	case op.IsError():
		syn := Syndrome(half[ErrCQESyndrome])
		fmt.Fprintf(&b, "\n  error   syndrome=%s(0x%02x) vendor_syndrome=0x%02x", syn, uint8(syn), half[ErrCQEVendorSyndrome])
		if half[ErrCQEVendorSyndrome] == VendorSyndromeODPPageFault {
			b.WriteString("(ODP_PFAULT)")
		}
		fmt.Fprintf(&b, " qpn=0x%06x", qpn)
		if op == CQEReqErr {
			fmt.Fprintf(&b, " wqe_opcode=%s", Opcode(sop>>CQESendOpShift))
		} else {
			fmt.Fprintf(&b, " wqe_opcode=0x%02x", sop>>CQESendOpShift)
		}
		if srqn := be32(ErrCQESRQN) & CQESRQNMask; srqn != 0 {
			fmt.Fprintf(&b, " srqn=0x%06x", srqn)
		}
	case format == CQEFormatCompressed:
		fmt.Fprintf(&b, "\n  zip     completions=%d qpn=0x%06x (mini-CQE arrays follow in the next slots)", be32(CQEByteCnt), qpn)
	case op == CQEReq:
		fmt.Fprintf(&b, "\n  req     qpn=0x%06x send_opcode=%s byte_cnt=%d", qpn, Opcode(sop>>CQESendOpShift), be32(CQEByteCnt))
	case op >= CQERespWrImm && op <= CQERespSendInv:
		fr := be32(CQEFlagsRQPN)
		fmt.Fprintf(&b, "\n  resp    qpn=0x%06x byte_cnt=%d", qpn, be32(CQEByteCnt))
		iip := be32(CQEImmInvalPkey)
		switch op {
		case CQERespWrImm, CQERespSendImm:
			fmt.Fprintf(&b, " imm=0x%08x", iip)
		case CQERespSendInv:
			fmt.Fprintf(&b, " inval_rkey=0x%08x", iip)
		default:
			fmt.Fprintf(&b, " pkey_index=%d", iip&CQEPKeyIndexMask)
		}
		fmt.Fprintf(&b, " src_qp=0x%06x sl=%d grh=%d slid=0x%04x ml_path=%d",
			fr&CQEQPNMask, (fr>>CQESLShift)&CQESLMask, (fr>>CQEGRHShift)&CQEGRHMask, be16(CQESLID), half[CQEMLPath]&CQEMLPathMask)
		if v := be32(CQESRQNUIdx) & CQESRQNMask; v != 0 {
			fmt.Fprintf(&b, " srqn_uidx=0x%06x", v)
		}
		switch format {
		case CQEFormatScatter32:
			b.WriteString("\n  data    scattered into this CQE (up to 32 bytes)")
		case CQEFormatScatter64:
			b.WriteString("\n  data    scattered into the first half of the 128-byte CQE (up to 64 bytes)")
		}
	default:
		fmt.Fprintf(&b, "\n  other   qpn=0x%06x byte_cnt=%d", qpn, be32(CQEByteCnt))
	}
	if ts := binary.BigEndian.Uint64(half[CQETimestamp:]); ts != 0 && !op.IsError() {
		fmt.Fprintf(&b, " timestamp=%d", ts)
	}
	return b.String()
}
