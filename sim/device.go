package sim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/addrvec"
	"github.com/mlx5kit/mlx5kit/internal/kerrno"
	"github.com/mlx5kit/mlx5kit/internal/prm"
	"github.com/mlx5kit/mlx5kit/internal/provider"
	"github.com/mlx5kit/mlx5kit/internal/qpstate"
	"github.com/mlx5kit/mlx5kit/internal/sqsize"
)

// Limits of the model, reported by Query.
const (
	maxSQDescSize = 1024 // largest send WQE in bytes (16 WQEBBs), as a ConnectX reports
	maxSendWQEBB  = 1 << 15
	maxRecvWR     = 1 << 15
	maxSGE        = 16
	// maxSRQSGE is max_srq_sge as mlx5_ib reports it, the data segments
	// of a receive WQE less one: an SRQ WQE's next segment and its data
	// segments fit the largest receive WQE (maxSGE data segments).
	maxSRQSGE = maxSGE - 1
	// maxCQE is max_cqe as mlx5_ib reports it, (1 << log_max_cq_sz) - 1:
	// a CQ of that depth has a ring of 1 << log_max_cq_sz entries (one
	// more than asked for, a power of two), the largest the device takes.
	maxCQE         = 1<<22 - 1
	maxMessageSize = 1 << 30
	portMTU        = ctx.MTU4096
	bfRegOffset    = 0x800 // BlueFlame buffers inside the UAR page
	bfSize         = 256
	pageSize       = 4096
	// compVectors is the number of completion vectors reported. The model
	// has no interrupts: a CQ's vector is checked and changes nothing.
	compVectors = 4
	// maxRdAtomic is the RC read/atomic depth (both ends); DC has its own
	// (log_max_ra_req_dc, log_max_ra_res_dc), 16 on a ConnectX-5 and -6
	// as on RC (firmware of some ConnectX-7 raised DC's to 64).
	maxRdAtomic       = 16
	maxDCInitRdAtomic = 16
	maxDCRespRdAtomic = 16
)

// sendQueueDevice is what the model sizes send queues against, as
// rdma-core sizes them on a ConnectX: max_sq_desc_sz, max_send_wqebb,
// max_sge, atomics.
var sendQueueDevice = sqsize.Device{MaxSQDescSize: maxSQDescSize, MaxSendWQEBB: maxSendWQEBB, MaxSGE: maxSGE, Atomics: true}

// hca is one simulated adapter with one port.
type hca struct {
	index int
	name  string
	guid  uint64
	lid   uint16
	link  ctx.LinkLayer
	gids  []ctx.GIDEntry
	mac   [6]byte

	// down[p] is true while port p is down, fatal while the HCA has
	// failed; open lists its open devices (events.go).
	down  []bool
	fatal bool
	open  []*device
}

// The numbers of HCA i: its node GUID is hcaGUIDBase | i (i < 4096), its
// RoCE port's IPv4 GID ::ffff:10.77.x.y and IPv6 GID 2001:db8:77::x:y,
// with x the high byte of i and y the low byte of i+1 (hcaIndexOfGID
// reads i back).
const hcaGUIDBase = 0x0002c90300a0b000

var (
	gidV4Prefix = [14]byte{10: 0xff, 11: 0xff, 12: 10, 13: 77}
	gidV6Prefix = [14]byte{0x20, 0x01, 0x0d, 0xb8, 0x00, 0x77} // 2001:db8::/32, the documentation prefix
)

// hcaGID is the GID of prefix and HCA i.
func hcaGID(prefix [14]byte, i int) ctx.GID {
	var g ctx.GID
	copy(g[:], prefix[:])
	g[14], g[15] = byte(i>>8), byte(i+1)
	return g
}

// hcaIndexOfGID returns the index of the HCA that newHCA gives gid as its
// link-local (from the node GUID), IPv4-mapped or IPv6 GID. The caller
// checks the GID against that HCA's table: ok only says gid has one of
// those forms.
func hcaIndexOfGID(g ctx.GID) (i int, ok bool) {
	switch prefix := [14]byte(g[:14]); {
	case g[0] == 0xfe && g[1] == 0x80:
		if guid := binary.BigEndian.Uint64(g[8:]); guid&^0xfff == hcaGUIDBase {
			return int(guid & 0xfff), true
		}
	case prefix == gidV4Prefix, prefix == gidV6Prefix:
		return int(g[14])<<8 | int(g[15]-1), true
	}
	return 0, false
}

func newHCA(i int, link ctx.LinkLayer) *hca {
	h := &hca{index: i, name: fmt.Sprintf("sim%d", i), link: link}
	h.guid = hcaGUIDBase | uint64(i)
	h.mac = [6]byte{0x02, 0x00, 0x5e, 0x00, byte(i >> 8), byte(i)}
	var ll ctx.GID
	ll[0], ll[1] = 0xfe, 0x80
	binary.BigEndian.PutUint64(ll[8:], h.guid)
	if link == ctx.LinkLayerInfiniBand {
		h.lid = uint16(i + 1)
		h.gids = []ctx.GIDEntry{{Index: 0, GID: ll, Type: ctx.GIDTypeIB, Port: 1}}
	} else {
		// The table of a RoCE port whose network device has an IPv4 and
		// a global IPv6 address, in the order mlx5 fills it: each address
		// twice, RoCE v1 then v2, the link-local one (from the MAC/GUID)
		// first. Index 0 is thus RoCE v1 link-local, which a routed
		// network does not carry: a GID must be chosen (ctx.ChooseGID
		// picks index 3).
		v4, v6 := hcaGID(gidV4Prefix, i), hcaGID(gidV6Prefix, i)
		h.gids = []ctx.GIDEntry{
			{Index: 0, GID: ll, Type: ctx.GIDTypeRoCEv1, Port: 1},
			{Index: 1, GID: ll, Type: ctx.GIDTypeRoCEv2, Port: 1},
			{Index: 2, GID: v4, Type: ctx.GIDTypeRoCEv1, Port: 1},
			{Index: 3, GID: v4, Type: ctx.GIDTypeRoCEv2, Port: 1},
			{Index: 4, GID: v6, Type: ctx.GIDTypeRoCEv1, Port: 1},
			{Index: 5, GID: v6, Type: ctx.GIDTypeRoCEv2, Port: 1},
		}
	}
	return h
}

func (h *hca) hasGID(g ctx.GID) bool {
	for _, e := range h.gids {
		if e.GID == g {
			return true
		}
	}
	return false
}

// roceFamilies refuses, with EINVAL, a path on an Ethernet port from
// source GID index idx to the unicast destination GID dgid of another IP
// family (one IPv4-mapped, the other not), as the kernel's
// ib_resolve_eth_dmac does for an address handle or a connected QP's path:
// it resolves the destination's MAC with rdma_resolve_ip, which refuses a
// source and destination of different families. A link-local destination
// from a RoCE v1 source GID is not resolved by IP (its MAC is in the GID),
// nor is a multicast destination (mapped to a multicast MAC):
// addrvec.FamiliesDiffer. An index outside the table is left to the
// caller's check.
func (h *hca) roceFamilies(idx uint8, dgid ctx.GID) error {
	if h.link != ctx.LinkLayerEthernet || int(idx) >= len(h.gids) {
		return nil
	}
	if s := h.gids[idx]; addrvec.FamiliesDiffer(s, dgid) {
		return fmt.Errorf("source GID %v (index %d) and destination GID %v are of different IP families (rdma_resolve_ip): %w",
			s.GID, idx, dgid, errEINVAL)
	}
	return nil
}

// roceL3 returns the network header a packet sent from GID index idx
// carries on an Ethernet port: an InfiniBand GRH for a RoCE v1 GID, for a
// RoCE v2 GID an IPv4 header when the GID is IPv4-mapped (::ffff:a.b.c.d)
// and an IPv6 header otherwise. An index outside the table (only raw
// address vectors have one) counts as a GRH.
func (h *hca) roceL3(idx uint8) uint8 {
	if h.link != ctx.LinkLayerEthernet || int(idx) >= len(h.gids) || h.gids[idx].Type != ctx.GIDTypeRoCEv2 {
		return prm.CQERoCEL3GRH
	}
	if netip.AddrFrom16(h.gids[idx].GID).Is4In6() {
		return prm.CQERoCEL3IPv4
	}
	return prm.CQERoCEL3IPv6
}

// device is an open HCA: the provider's struct ibv_context.
type device struct {
	f      *Fabric
	h      *hca
	evfd   int
	events []ctx.AsyncEvent
	closed bool
	// subscriber, when set, receives the device's async events in place
	// of events (simadopt.SubscribeAsyncEvents).
	subscriber func(ctx.AsyncEvent)

	// failed: the HCA failed while the device was open (events.go).
	failed bool

	// dedicatedBF counts the QPs holding a BlueFlame register of their own
	// (Options.BlueFlameRegisters bounds it); sharedBF is the UAR page of
	// the doorbell-only register every other QP with a send queue shares,
	// allocated for the first of them and freed when the device is closed
	// and the last of them is, sharedUsers counting them.
	dedicatedBF int
	sharedBF    *ctx.Buffer
	sharedUsers int
	// sharedSnap is what the shared register's BlueFlame buffers held
	// when last checked (strict).
	sharedSnap []byte
}

var _ provider.Device = (*device)(nil)

func newDevice(f *Fabric, h *hca) (*device, error) {
	fd, err := unix.Eventfd(0, unix.EFD_NONBLOCK|unix.EFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("eventfd: %w", err)
	}
	return &device{f: f, h: h, evfd: fd}, nil
}

// Name returns "simN".
func (d *device) Name() string { return d.h.name }

// Kind returns ctx.KindSoftware.
func (d *device) Kind() ctx.Kind { return ctx.KindSoftware }

// IdleFunc returns the Fabric's idle (one round on the calling goroutine):
// provider.IdleDevice, reached through ctx.Context.Idle.
func (d *device) IdleFunc() func() { return d.f.idle }

var _ provider.IdleDevice = (*device)(nil)

// Fabric returns the Fabric the device belongs to.
func (d *device) Fabric() *Fabric { return d.f }

func (d *device) Query() (ctx.DeviceAttr, error) {
	if d.dead() {
		return ctx.DeviceAttr{}, errDeviceFatal("sim: query device")
	}
	return d.attr(), nil
}

// attr returns the device attributes; it takes no lock.
func (d *device) attr() ctx.DeviceAttr {
	return ctx.DeviceAttr{
		Name:              d.h.name,
		FirmwareVersion:   "sim",
		NodeGUID:          d.h.guid,
		VendorID:          0x02c9,
		VendorPartID:      0x1017,
		PhysPortCount:     d.f.opts.Ports,
		MaxQP:             1 << 16,
		MaxQPWR:           maxSendWQEBB,
		MaxSGE:            maxSGE,
		MaxRecvSGE:        maxSGE,
		MaxCQ:             1 << 16,
		MaxCQE:            maxCQE,
		MaxMR:             1 << 20,
		MaxMRSize:         1 << 40,
		MaxPD:             1 << 16,
		MaxQPRdAtomic:     maxRdAtomic,
		MaxQPInitRdAtomic: maxRdAtomic,
		MaxSRQ:            1 << 16,
		MaxSRQWR:          maxRecvWR - 1,
		MaxSRQSGE:         maxSRQSGE,
		MaxAH:             1 << 20,
		MaxInline:         sqsize.LimitsOf(ctx.QPTypeRC, sendQueueDevice).MaxInline,
		AtomicHCA:         true,
		MaskedAtomics:     ctx.SupportYes,
		DC:                true,
		CQE128:            true,
		CQEPadding:        true,
		CompVectors:       compVectors,
		BlueFlameSize:     bfSize,
		MaxSendWQESize:    maxSQDescSize,
		SendLimitsRC:      sqsize.LimitsOf(ctx.QPTypeRC, sendQueueDevice),
		SendLimitsUD:      sqsize.LimitsOf(ctx.QPTypeUD, sendQueueDevice),
		SendLimitsDCI:     sqsize.LimitsOf(ctx.QPTypeDCI, sendQueueDevice),
		MaxDCRdAtomic:     maxDCRespRdAtomic,
		MaxDCInitRdAtomic: maxDCInitRdAtomic,
	}
}

// validPort reports whether port is one of the device's ports
// (Options.Ports).
func (d *device) validPort(port uint8) bool { return port >= 1 && port <= d.f.opts.Ports }

func (d *device) QueryPort(port uint8) (ctx.PortAttr, error) {
	if !d.validPort(port) {
		return ctx.PortAttr{}, provider.Errorf("sim: query port", "port %d of %d: %w", port, d.f.opts.Ports, ctx.ErrInvalidArgument)
	}
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if d.deadLocked() {
		return ctx.PortAttr{}, errDeviceFatal("sim: query port")
	}
	return d.portAttrLocked(port), nil
}

// portAttrLocked returns the attributes of a valid port (f.mu held). An
// InfiniBand port's subnet manager is at LID 1 (HCA 0's port); an Ethernet
// port has no LIDs, and mlx5_ib answers 0 for both (mlx5_query_port_roce).
func (d *device) portAttrLocked(port uint8) ctx.PortAttr {
	var smLID uint16
	if d.h.link == ctx.LinkLayerInfiniBand {
		smLID = 1
	}
	return ctx.PortAttr{
		Port:         port,
		State:        d.h.portStateOf(port),
		MaxMTU:       portMTU,
		ActiveMTU:    portMTU,
		LID:          d.h.lid,
		SMLID:        smLID,
		GIDTableLen:  len(d.h.gids),
		PKeyTableLen: 1,
		LinkLayer:    d.h.link,
		ActiveSpeed:  32,
		ActiveWidth:  2,
	}
}

func (d *device) QueryGIDs(port uint8) ([]ctx.GIDEntry, error) {
	if !d.validPort(port) {
		return nil, provider.Errorf("sim: query GIDs", "port %d of %d: %w", port, d.f.opts.Ports, ctx.ErrInvalidArgument)
	}
	gids := append([]ctx.GIDEntry(nil), d.h.gids...)
	for i := range gids {
		gids[i].Port = port
	}
	return gids, nil
}

func (d *device) AsyncEventFD() int { return d.evfd }

func (d *device) ReadAsyncEvent() (ctx.AsyncEvent, bool, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if len(d.events) == 0 {
		return ctx.AsyncEvent{}, false, nil
	}
	ev := d.events[0]
	d.events = d.events[1:]
	if len(d.events) == 0 {
		var b [8]byte
		_, _ = unix.Read(d.evfd, b[:])
	}
	return ev, true, nil
}

// maxQueuedEvents bounds the async events a device keeps unread: as many
// as the pipe of the emulated kernel's async event file holds (64 KiB of
// 16-byte records). A peer that keeps raising events (requests to a DCT
// with a wrong key, say) cannot grow a process that reads none.
const maxQueuedEvents = 4096

// postEvent queues an async event (f.mu held); one past maxQueuedEvents
// unread is dropped and counted (Stats.LostEvents).
func (d *device) postEvent(ev ctx.AsyncEvent) {
	if d.closed {
		return
	}
	if d.subscriber != nil {
		d.subscriber(ev)
		return
	}
	if len(d.events) >= maxQueuedEvents {
		d.f.stats.LostEvents++
		return
	}
	d.events = append(d.events, ev)
	var b [8]byte
	binary.NativeEndian.PutUint64(b[:], 1)
	_, _ = unix.Write(d.evfd, b[:])
}

// dropEventsOf takes the unread async events of an object being destroyed
// out of the device's queue (f.mu held), as the kernel's
// ib_uverbs_release_uevent takes them out of the async event file when
// ibv_destroy_qp, _cq or _srq runs: no event of a destroyed object is
// read afterwards, and none of a new object that reuses its number
// (TestDestroyTakesUnreadEvents). match selects the object's events.
func (d *device) dropEventsOf(match func(ev ctx.AsyncEvent) bool) {
	if d.closed || len(d.events) == 0 {
		return
	}
	d.events = slices.DeleteFunc(d.events, match)
	if len(d.events) == 0 {
		// Nothing to read: the descriptor is not readable any more.
		var b [8]byte
		_, _ = unix.Read(d.evfd, b[:])
	}
}

// qpEvent, cqEvent and srqEvent report whether ev is an event of the QP,
// CQ or SRQ numbered n (the object AsyncEvent names for its type).
func qpEvent(ev ctx.AsyncEvent, n uint32) bool {
	switch ev.Type {
	case ctx.EventCQError, ctx.EventSRQLimitReached, ctx.EventSRQError, ctx.EventPortActive,
		ctx.EventPortError, ctx.EventLIDChange, ctx.EventPKeyChange, ctx.EventSMChange,
		ctx.EventClientReregister, ctx.EventGIDChange, ctx.EventDeviceFatal, ctx.EventWQFatal:
		return false
	}
	return ev.QPN == n
}

func cqEvent(ev ctx.AsyncEvent, n uint32) bool {
	return ev.Type == ctx.EventCQError && ev.CQN == n
}

func srqEvent(ev ctx.AsyncEvent, n uint32) bool {
	return (ev.Type == ctx.EventSRQLimitReached || ev.Type == ctx.EventSRQError) && ev.SRQN == n
}

func (d *device) AllocProtectionDomain() (provider.ProtectionDomain, error) {
	d.f.mu.Lock()
	defer d.f.mu.Unlock()
	if d.deadLocked() {
		return nil, errDeviceFatal("sim: alloc PD")
	}
	p := &pd{f: d.f, dev: d, pdn: d.f.nextPDN}
	d.f.nextPDN++
	return p, nil
}

func (d *device) Close() error {
	d.f.mu.Lock()
	if d.closed {
		d.f.mu.Unlock()
		return nil
	}
	d.closed = true
	d.f.wireFlushAcks()
	d.h.closedDevice(d)
	_ = unix.Close(d.evfd)
	d.releaseSharedBFLocked()
	stop, done := d.f.deviceClosedLocked()
	d.f.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
	return nil
}

// pd is a protection domain.
type pd struct {
	f      *Fabric
	dev    *device
	pdn    uint32
	closed bool
}

func (p *pd) RegisterMemory(addr unsafe.Pointer, length uint64, access ctx.Access) (provider.MemoryRegion, error) {
	const op = "sim: register MR"
	if addr == nil || length == 0 {
		return nil, provider.Errorf(op, "empty region: %w", ctx.ErrInvalidArgument)
	}
	a := uint64(uintptr(addr))
	if a+length < a {
		return nil, provider.Errorf(op, "region wraps the address space: %w", ctx.ErrInvalidArgument)
	}
	if err := checkMapped(a, length); err != nil {
		return nil, provider.Errorf(op, "%w", err)
	}
	if err := checkProtection("ibv_reg_mr", a, length, access&(ctx.AccessLocalWrite|ctx.AccessRemoteWrite|ctx.AccessRemoteAtomic) != 0); err != nil {
		return nil, provider.Errorf(op, "%w", err)
	}
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	if p.closed {
		return nil, provider.Errorf(op, "%w", ctx.ErrClosed)
	}
	if p.dev.deadLocked() {
		return nil, errDeviceFatal(op)
	}
	key, ok := p.f.allocKeyLocked()
	if !ok {
		return nil, exhausted(op, "memory key indices", &p.f.keys)
	}
	m := &mr{f: p.f, pd: p, key: key, base: addr, addr: a, length: length, access: access}
	p.f.mrs[key] = m
	return m, nil
}

// checkMapped refuses, as the kernel's ibv_reg_mr does when it cannot pin
// the pages (EFAULT), a range of which some page is not mapped: a slice
// kept past the Close of its Buffer, or past a munmap. The model reads and
// writes a region's memory directly, so a region over such a range would
// fault the process, or write into whatever is mapped there later. It asks
// mincore, which any process may call; the emulated kernel's REG_MR checks
// more before it comes here (each page readable, through process_vm_readv,
// which a seccomp filter may forbid a program that is not under it).
func checkMapped(addr, length uint64) error {
	const chunk = 1 << 14 // pages per mincore call
	if length == 0 {
		return nil
	}
	ps := uint64(unix.Getpagesize())
	// Counted in pages from the first to the last, inclusive: the end
	// rounded up to a page would wrap to 0 in the address space's last
	// page, which would then go unchecked (the caller refuses a range
	// that wraps).
	at := addr &^ (ps - 1)
	pages := ((addr+length-1)&^(ps-1)-at)/ps + 1
	vec := make([]byte, min(pages, chunk))
	for pages > 0 {
		n := min(pages, chunk)
		_, _, errno := unix.Syscall(unix.SYS_MINCORE, uintptr(at), uintptr(n*ps), uintptr(unsafe.Pointer(unsafe.SliceData(vec))))
		if errno != 0 {
			if errno == unix.ENOMEM { // some page of the range is not mapped
				errno = unix.EFAULT
			}
			return kerrno.New("ibv_reg_mr", fmt.Sprintf("[%#x,+%d) not mapped", addr, length), errno, ctx.ErrInvalidArgument)
		}
		at += n * ps
		pages -= n
	}
	return nil
}

// checkProtection refuses, as the kernel's ib_umem_get does when it pins
// the pages for writing (a region with LocalWrite, RemoteWrite or
// RemoteAtomic) or for reading (EFAULT), a range of which some page is not
// writable, or not readable. The model writes a writable region's memory
// and reads every region's directly, so a region over a read-only or
// PROT_NONE mapping (a Buffer's guard page) would fault the process at the
// first transfer. The protections are those /proc/self/maps lists; when it
// cannot be read, the range is left to checkMapped. verb names the call in
// the error.
func checkProtection(verb string, addr, length uint64, writable bool) error {
	if length == 0 {
		return nil
	}
	maps, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		return nil
	}
	need, what := byte('r'), "readable"
	if writable {
		need, what = 'w', "writable"
	}
	refuse := func(at uint64) error {
		return kerrno.New(verb, fmt.Sprintf("[%#x,+%d): %#x not %s", addr, length, at, what), unix.EFAULT, ctx.ErrInvalidArgument)
	}
	at, end := addr, addr+length
	// The lines are in address order: each mapping that holds at must
	// have the protection, up to end.
	for _, line := range bytes.Split(maps, []byte{'\n'}) {
		fields := bytes.Fields(line)
		if len(fields) < 2 {
			continue
		}
		lo, hi, ok := bytes.Cut(fields[0], []byte{'-'})
		if !ok {
			continue
		}
		start, err1 := strconv.ParseUint(string(lo), 16, 64)
		stop, err2 := strconv.ParseUint(string(hi), 16, 64)
		if err1 != nil || err2 != nil || stop <= at {
			continue
		}
		if start > at {
			return refuse(at) // a hole: not mapped
		}
		if perms := fields[1]; len(perms) < 2 || bytes.IndexByte(perms[:2], need) < 0 {
			return refuse(at)
		}
		if stop >= end {
			return nil
		}
		at = stop
	}
	return refuse(at)
}

func (p *pd) CreateAddressHandle(attr ctx.AddressAttr) (provider.AddressHandle, error) {
	const op = "sim: create AH"
	if p.dev.dead() {
		return nil, errDeviceFatal(op)
	}
	if !p.dev.validPort(attr.Port) {
		return nil, provider.Errorf(op, "port %d of %d: %w", attr.Port, p.dev.f.opts.Ports, errEINVAL)
	}
	if p.dev.h.link == ctx.LinkLayerEthernet && !attr.GlobalRoute {
		return nil, provider.Errorf(op, "RoCE needs a GRH (GlobalRoute): %w", errEINVAL)
	}
	if attr.GlobalRoute && int(attr.SGIDIndex) >= len(p.dev.h.gids) {
		return nil, provider.Errorf(op, "SGID index %d: %w", attr.SGIDIndex, errEINVAL)
	}
	var rmac [6]byte
	if p.dev.h.link == ctx.LinkLayerEthernet {
		if err := p.dev.h.roceFamilies(attr.SGIDIndex, attr.DGID); err != nil {
			return nil, provider.Errorf(op, "%w", err)
		}
		// The hardware path (cgo/internal/verbs fillAH) sends a RoCE
		// hop limit of 0 as 64: an IP TTL of 0 would not leave the host.
		if attr.HopLimit == 0 {
			attr.HopLimit = 64
		}
		rmac = p.f.resolveRMAC(attr.DGID)
		// libmlx5 asks the kernel for a RoCE address handle, whose
		// create_ib_ah refuses a static rate mlx5r_ib_rate has no code
		// for; an InfiniBand one it builds itself.
		if !qpstate.StaticRateValid(attr.StaticRate) {
			return nil, provider.Errorf(op, "static rate %d, not 0 or %d to %d (mlx5r_ib_rate): %w",
				attr.StaticRate, qpstate.MinKernelStaticRate, qpstate.MaxKernelStaticRate, errEINVAL)
		}
	}
	av := encodeAV(p.dev.h, attr, rmac)
	return &ah{av: av}, nil
}

// encodeAV builds the path part of an address vector as rdma-core's
// mlx5_create_ah does; rmac is the destination MAC of an Ethernet port
// (resolveRMAC). The UDP source port of a RoCE v2 source GID is derived
// from the flow label (ibv_flow_label_to_udp_sport); for a flow label of 0,
// where rdma-core picks a random port, the model takes the first, 0xc000.
// A RoCE v1 source GID leaves rlid 0, as rdma-core does.
func encodeAV(h *hca, a ctx.AddressAttr, rmac [6]byte) [prm.AVSize]byte {
	var av [prm.AVSize]byte
	rate := mlx5Rate(a.StaticRate)
	var grh uint32
	if h.link == ctx.LinkLayerEthernet {
		av[prm.AVStatRateSL] = rate<<4 | (a.SL&0x7)<<1
		if int(a.SGIDIndex) < len(h.gids) && h.gids[a.SGIDIndex].Type == ctx.GIDTypeRoCEv2 {
			sport := uint16(0xc000) | uint16(a.FlowLabel^a.FlowLabel>>14)&0x3fff
			binary.BigEndian.PutUint16(av[prm.AVRLID:], sport)
		}
		copy(av[prm.AVRMAC:], rmac[:])
	} else {
		av[prm.AVFlMLID] = a.SrcPathBits & 0x7f
		binary.BigEndian.PutUint16(av[prm.AVRLID:], a.DLID)
		av[prm.AVStatRateSL] = rate<<4 | a.SL&0xf
		grh = 1
	}
	if a.GlobalRoute {
		av[prm.AVTClass] = a.TrafficClass
		av[prm.AVHopLimit] = a.HopLimit
		binary.BigEndian.PutUint32(av[prm.AVGRHGIDFL:], grh<<30|uint32(a.SGIDIndex)<<prm.AVSGIDShift|a.FlowLabel&prm.AVFlowLblMask)
		copy(av[prm.AVRGID:], a.DGID[:])
	}
	return av
}

// mlx5RateOf maps an ibv_rate code (the index) to the 4-bit mlx5 static
// rate code of an address vector, as rdma-core's ah_attr_to_mlx5_rate
// does: 2.5, 10, 30, 5, 20, 40, 60, 80 and 120 Gb/s are codes 7 to 15, a
// rate between them the code of the next one up, and 0 (the port's rate)
// for IBV_RATE_MAX and for rates above 120 Gb/s.
var mlx5RateOf = [...]uint8{
	0, 0, // IBV_RATE_MAX, 1 (no rate)
	7, 8, 9, 10, 11, 12, 13, 14, 15, // 2.5, 10, 30, 5, 20, 40, 60, 80, 120 Gb/s
	11, 13, 15, 0, // 14, 56, 112, 168 Gb/s
	9, 15, 0, 0, // 25, 100, 200, 300 Gb/s
	9, 13, 0, 0, // 28, 50, 400, 600 Gb/s (800 and 1200: past the table)
}

// mlx5Rate returns the mlx5 rate code of ibv_rate code r; 0 for a code
// past the table.
func mlx5Rate(r uint8) uint8 {
	if int(r) < len(mlx5RateOf) {
		return mlx5RateOf[r]
	}
	return 0
}

func (p *pd) Close() error {
	p.f.mu.Lock()
	defer p.f.mu.Unlock()
	p.closed = true
	return nil
}

// mr is a registered memory region.
type mr struct {
	f      *Fabric
	pd     *pd
	key    uint32
	base   unsafe.Pointer
	addr   uint64
	length uint64
	access ctx.Access
	closed bool
	// mapping is the model's own mapping of a dma-buf region
	// (RegisterDMABuf), unmapped by Close; nil for other regions.
	mapping []byte
}

func (m *mr) LKey() uint32 { return m.key }
func (m *mr) RKey() uint32 { return m.key }

func (m *mr) Close() error {
	m.f.mu.Lock()
	defer m.f.mu.Unlock()
	if m.closed {
		return nil
	}
	m.closed = true
	delete(m.f.mrs, m.key)
	if m.f.lastMR == m {
		m.f.lastMR = nil
	}
	m.f.freeKeyLocked(m.key)
	return m.unmapLocked()
}

// localWritable reports whether the device may write n bytes at addr
// through m for a work request of protection domain p: m exists (a nil m
// is a key that names no region), belongs to p, grants local write and
// holds the bytes. A receive's scatter list and the local buffers of a
// READ or atomic are checked so.
func (m *mr) localWritable(p *pd, addr, n uint64) bool {
	return m != nil && m.pd == p && m.access&ctx.AccessLocalWrite != 0 && m.contains(addr, n)
}

// contains reports whether [addr, addr+n) lies inside the region.
func (m *mr) contains(addr, n uint64) bool {
	if addr < m.addr {
		return false
	}
	off := addr - m.addr
	return off <= m.length && n <= m.length-off
}

// bytes returns the n bytes at addr, which contains has approved.
func (m *mr) bytes(addr, n uint64) []byte {
	return unsafe.Slice((*byte)(unsafe.Add(m.base, addr-m.addr)), n)
}

// ah is an address handle.
type ah struct{ av [prm.AVSize]byte }

func (a *ah) AV() [prm.AVSize]byte { return a.av }
func (a *ah) Close() error         { return nil }
