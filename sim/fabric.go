package sim

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/mlx5kit/mlx5kit/internal/names"

	"github.com/mlx5kit/mlx5kit/ctx"
	tsc "github.com/mlx5kit/mlx5kit/internal/cycles"
	"github.com/mlx5kit/mlx5kit/internal/provider"
)

// Mode says who drives the model.
type Mode uint8

const (
	// Manual leaves execution to Step and RunUntilIdle, with a virtual
	// clock: deterministic, for tests.
	Manual Mode = iota
	// Engine runs a goroutine that polls doorbell records like a device.
	Engine
)

var modeNames = [...]string{Manual: "manual", Engine: "engine"}

// String returns "manual" or "engine" (or "Mode(n)" for another value).
func (m Mode) String() string { return names.Of(m, modeNames[:], "Mode") }

// Options configure a Fabric.
type Options struct {
	// Mode is Manual (default) or Engine.
	Mode Mode
	// Devices is the number of HCAs ("sim0", "sim1", …); default 2.
	Devices int
	// LinkLayer of every port: InfiniBand (default, routed by LID) or
	// Ethernet (RoCE v2, routed by GID; address vectors need a GRH).
	LinkLayer ctx.LinkLayer
	// Strict records format violations (see Violation).
	Strict bool
	// StrictFatal makes the model reject a WQE with a violation the way a
	// device rejects a malformed WQE: the QP moves to error with
	// LOCAL_QP_OP_ERR, and RunUntilIdle returns ErrViolation. WQEs a send
	// doorbell record announced with no doorbell register write are held
	// back until one, as a ConnectX leaves them in the ring
	// (ViolationDoorbellRecordOnly). It implies Strict.
	StrictFatal bool
	// IdleSleep caps the engine's back-off sleep when there is no work
	// (default 500µs). Lower values cut the latency after an idle period at
	// the cost of more wake-ups.
	IdleSleep time.Duration
	// MaxRounds bounds RunUntilIdle (default 1<<22 rounds).
	MaxRounds int
	// Seed seeds the fault injector's random choices (default 1).
	Seed int64
	// BlueFlameRegisters is the number of dedicated BlueFlame registers
	// (UAR pages) each open device hands out, one to each QP with a send
	// queue, as a device has a limited number of them. A QP created while
	// none is free gets the register it shares with every other such QP
	// of the device: doorbell only, its descriptor's BlueFlameSize is 0.
	// 0 means no limit; negative means none (every QP shares).
	BlueFlameRegisters int
	// Fabric names a fabric shared with other processes (see EnvFabric):
	// the Fabric joins it when it opens its first device, taking a part
	// of its LID, GID and QPN space, and reaches the QPs of every process
	// that joined the same name. It needs Engine mode. Empty: the Fabric
	// is private to this process.
	Fabric string
	// Ports is the number of ports of each HCA (0 means 1). Every port
	// after the first mirrors port 1: the same state, LID, GID table and
	// link layer, its packets reaching the same HCA. It lets a QP or an
	// address handle be put on a port other than 1, to check the port
	// arithmetic of QP transitions and address vectors.
	Ports uint8
	// Link links the Fabric over TCP to Fabrics of other processes,
	// usually on other hosts (see EnvLink, tcp_link.go): "listen:HOST:PORT"
	// listens for them, "HOST:PORT" connects to a listening one, which
	// forwards between all the Fabrics connected to it. It is made when
	// the first device opens, needs Engine mode and LinkKey, and excludes
	// Fabric. From then on the Fabric's engine runs until Close, devices
	// open or not (its rounds read the peers' sockets and, on the
	// listening end, forward): a Fabric never closed keeps it until the
	// process ends, asleep on the sockets while idle. A test tool, not a
	// transport for production.
	Link string
	// LinkKey is the pre-shared key both ends of a TCP link prove they
	// hold before anything else is sent (at least endpoint.MinKeySize
	// bytes); empty: the bytes of EnvLinkKey.
	LinkKey []byte
}

// Errors of the model's own API.
var (
	// ErrNotIdle is returned by RunUntilIdle when work remains after
	// MaxRounds rounds (for example an RNR retry loop with rnr_retry 7 and
	// no receive ever posted).
	ErrNotIdle = errors.New("sim: work remains after the round limit")
	// ErrViolation is returned by RunUntilIdle and Step in StrictFatal mode
	// once a format violation has been recorded.
	ErrViolation = errors.New("sim: format violation")
	// ErrWrongMode is returned by Step and RunUntilIdle on an engine-mode
	// Fabric.
	ErrWrongMode = errors.New("sim: not in manual mode")
)

// Fabric is a set of simulated HCAs sharing one subnet and one QPN space. The
// default one is the provider "sim" (ctx.ProviderSoftware); Open opens an
// HCA of any Fabric. All of its methods are safe for concurrent use.
type Fabric struct {
	mu   sync.Mutex
	opts Options
	hcas []*hca

	qps     map[uint32]*qp
	qpList  []*qp // sorted by QPN: execution order
	cqs     map[uint32]*cq
	cqList  []*cq
	srqs    map[uint32]*srq
	srqList []*srq // in creation order
	mrs     map[uint32]*mr
	// The QP and the MR last looked up by number on the message path
	// (qpByNum, mrByKey): a map lookup saved for each message of a
	// stream. Cleared when that QP or MR is removed.
	lastQP *qp
	lastMR *mr

	// The number spaces: QPNs (DCT numbers included), CQNs, SRQNs and
	// memory key indices; see numbers.go.
	qpns, cqns, srqns, keys numberSpace
	nextPDN                 uint32

	vnow  int64 // virtual nanoseconds (Manual)
	start time.Time

	violations []Violation
	fatal      bool

	faults udFaults
	rng    *rand.Rand
	held   []heldPacket

	stats Stats

	openDevices int
	stop        chan struct{}
	done        chan struct{}
	// stopping is the done of the engine the last device's close is
	// stopping, outside mu: Close waits for it before it leaves the
	// shared fabric or closes the link, whose memory and sockets the
	// engine may still be reading (a closed channel once it has).
	stopping chan struct{}
	closed   bool
	// closing ends when Close begins (endClosing), before it takes mu:
	// a link being made under mu (joinLinkLocked) gives up at once.
	closing    context.Context
	endClosing context.CancelFunc

	scratch     []byte
	sgScratch   []gatherEntry
	recvScratch recvWQE // peekRecv's result

	// The shared fabric (shm.go): joined on the first open; fabricEnv
	// makes the join read the name from EnvFabric (the default Fabric).
	shm       *shmFabric
	shmJoined bool
	shmErr    error
	fabricEnv bool
	envErr    error         // the default Fabric's: a value of EnvLinkLayer it does not know
	wireEpoch uint32        // the last epoch given to a requester (wire.go)
	wireHeld  []wireHeldUD  // datagrams to other processes held back (wire_ud.go)
	wireAcks  []wireHeldAck // ACKs held until the next round's sends (wire.go)
	// wireAcksBlocked: the last flush of wireAcks met a full ring.
	wireAcksBlocked bool
	// wireHeldDC lists the DCT streams that hold a receive for a SEND
	// under way (wireTake): wireSweepHeld looks among them for those of
	// processes gone.
	wireHeldDC []wireHolder
	// wireSendOnly is set while a round's first pass over the QPs
	// sends: a QP whose ACK timer ran out (looked at after its sends) is
	// left for a second pass, after the inbound messages are taken
	// (stepLocked), and wireLate says there is one. wireUnjudged counts
	// the rounds in a row whose drain stopped at a completion and so
	// judged none.
	wireSendOnly bool
	wireLate     bool
	wireUnjudged int
	// quietRounds counts the rounds in a row in which nothing happened
	// (stepLocked); idleRound is set while a polling loop runs one
	// (idle). The first pass of such a round looks at the ACK timers in
	// every fourth only (lookAtTimers).
	quietRounds uint32
	idleRound   bool
	// The TCP link (tcp_link.go), made instead of a shared fabric.
	tcp *tcpLink

	// roundAt is the model's time of the round (stepLocked) once
	// roundTimed: a round reads the clock when something in it needs the
	// time (roundNow), and an empty round does not. drivenAt is the time
	// of the last round a polling loop ran (Idle) that read it, and
	// idleRounds counts the rounds polling loops ran; the engine reads
	// both without the lock to stay out of their way (driven).
	roundAt    int64
	roundTimed bool
	drivenAt   atomic.Int64
	idleRounds releaseCount
	// The time-stamp counter when roundAt was read, and how many of its
	// ticks make half timerSlack (0 until measured): timerNow and
	// deadlineAfter answer from roundAt within them (timeYoung). calAt
	// and calTicks are the clock and the counter at the start of the
	// measurement (clockRead).
	roundTicks, slackTicks uint64
	calAt                  int64
	calTicks               uint64
	// useTicks: Engine mode on a machine whose counter readings on
	// different processors compare (cycles.Synchronized); otherwise every
	// timer reads the clock.
	useTicks bool
}

// Stats counts what the model did, for tests and soak runs.
type Stats struct {
	WQEs          uint64 // send WQEs executed (including NOPs and failures)
	CQEs          uint64 // CQEs written
	ErrorCQEs     uint64 // error CQEs written (flushes included)
	Flushed       uint64 // WR_FLUSH_ERR CQEs written
	RNRNaks       uint64 // RNR NAKs (retries scheduled)
	Retries       uint64 // transport retries (resends after an ACK timeout), at most retry_cnt a request
	UDDropped     uint64 // UD packets dropped (no receive, bad qkey, longer than the MTU, fault, held back for a QP reset or destroyed)
	UDDuplicated  uint64 // UD packets duplicated by the fault injector
	UDReordered   uint64 // UD packets held back by the fault injector
	CQOverruns    uint64 // CQs moved to error by an overrun
	LostCQEs      uint64 // CQEs that could not be written (CQ in error)
	Violations    uint64 // strict-mode violations
	DelayedCQEs   uint64 // CQEs held back by DelayCompletions
	EngineSleeps  uint64 // engine back-off sleeps
	StepsExecuted uint64 // rounds run
	// RepeatsServed counts the requests from another process that the
	// responder had executed before and answered again without
	// executing (RC and DC): a requester's retry after a lost or late
	// answer.
	RepeatsServed uint64
	// RingNoSpace counts the messages to another process of a shared
	// fabric that could not be sent because the file system of its
	// rings (/dev/shm) had no room for the ring's pages (ENOSPC): each
	// is lost as a packet would be, and the QPs that sent them end in
	// RETRY_EXC_ERR if it lasts (docs/guide.md, section 14).
	RingNoSpace uint64
	// LostEvents counts the async events a device dropped because it
	// held maxQueuedEvents (4096) unread, as a full event pipe of the
	// emulated kernel drops them.
	LostEvents uint64
	// DCKeyViolations counts the messages DCTs refused for a wrong DC
	// access key, as a DCT's context counts them
	// (dc_access_key_violation_count, which no verb reads). The DCI's
	// WQE completes with REMOTE_ACCESS_ERR; the DCT raises no event.
	DCKeyViolations uint64
}

// New creates a Fabric. In Engine mode its goroutine starts with the first
// open device and stops with Close.
func New(opts Options) *Fabric {
	if opts.Devices <= 0 {
		opts.Devices = 2
	}
	if opts.LinkLayer == 0 {
		opts.LinkLayer = ctx.LinkLayerInfiniBand
	}
	if opts.StrictFatal {
		opts.Strict = true
	}
	if opts.IdleSleep <= 0 {
		opts.IdleSleep = 500 * time.Microsecond
	}
	if opts.MaxRounds <= 0 {
		opts.MaxRounds = 1 << 22
	}
	if opts.Seed == 0 {
		opts.Seed = 1
	}
	if opts.Ports == 0 {
		opts.Ports = 1
	}
	f := &Fabric{
		opts:    opts,
		qps:     map[uint32]*qp{},
		cqs:     map[uint32]*cq{},
		srqs:    map[uint32]*srq{},
		mrs:     map[uint32]*mr{},
		qpns:    newNumberSpace(firstQPN, qpnLimit),
		cqns:    newNumberSpace(firstCQN, numberLimit),
		srqns:   newNumberSpace(firstSRQN, numberLimit),
		keys:    newNumberSpace(firstKeyIndex, numberLimit),
		nextPDN: 1,
		start:   time.Now(),
		rng:     rand.New(rand.NewSource(opts.Seed)),
	}
	f.closing, f.endClosing = context.WithCancel(context.Background())
	f.useTicks = opts.Mode == Engine && tsc.Synchronized()
	for i := 0; i < opts.Devices; i++ {
		f.hcas = append(f.hcas, newHCA(i, opts.LinkLayer))
	}
	return f
}

// EnvStrict is the environment variable read once at start-up for the
// strict mode of the default Fabric: "0" turns it off, "fatal" makes it
// StrictFatal; anything else (or unset) leaves Strict on.
const EnvStrict = "MLX5KIT_SIM_STRICT"

// EnvLinkLayer is the environment variable read once at start-up for the
// link layer of the default Fabric's ports: "ethernet" (RoCE; also "eth"
// and "roce") or "infiniband" (also "ib"; the default when unset).
// Processes that share a fabric (EnvFabric) must agree on it. Any other
// value makes the default Fabric refuse to list or open devices with an
// error that names the variable.
const EnvLinkLayer = "MLX5KIT_SIM_LINK_LAYER"

var defaultFabric = newDefault()

func newDefault() *Fabric {
	o, err := defaultOptions(os.Getenv(EnvStrict), os.Getenv(EnvLinkLayer))
	f := New(o)
	f.fabricEnv = true
	f.envErr = err
	return f
}

// defaultOptions are the default Fabric's options from the values of
// EnvStrict and EnvLinkLayer; a link layer it does not know is an error
// (the options then have InfiniBand ports).
func defaultOptions(strict, link string) (Options, error) {
	o := Options{Mode: Engine, Strict: true}
	switch strict {
	case "0":
		o.Strict = false
	case "fatal":
		o.StrictFatal = true
	}
	o.LinkLayer = ctx.LinkLayerInfiniBand
	if link == "" {
		return o, nil
	}
	ll, err := ctx.ParseLinkLayer(link)
	if err != nil {
		return o, fmt.Errorf("%s=%q: %w", EnvLinkLayer, link, err)
	}
	o.LinkLayer = ll
	return o, nil
}

// fabricProvider is a Fabric as internal/provider sees it: the provider
// registered as "sim", the one Fabric.Open opens, and the one
// simadopt.Provider hands to the model of the kernel side.
type fabricProvider struct{ f *Fabric }

// Devices lists the HCAs.
func (p fabricProvider) Devices() ([]provider.DeviceInfo, error) { return p.f.devices() }

// OpenDevice opens an HCA by name; "" opens the first.
func (p fabricProvider) OpenDevice(name string) (provider.Device, error) {
	return p.f.openDevice(name)
}

var _ provider.Provider = fabricProvider{}

func init() { provider.Register(ctx.ProviderSoftware, fabricProvider{defaultFabric}) }

// Default returns the Fabric registered as provider "sim": Engine mode,
// Strict (see EnvStrict).
func Default() *Fabric { return defaultFabric }

// FromContext returns the Fabric behind a Context opened on the software HCA,
// or nil for any other Context.
func FromContext(c *ctx.Context) *Fabric {
	if c == nil {
		return nil
	}
	if d, ok := provider.DeviceOf(c).(*device); ok {
		return d.f
	}
	return nil
}

// Open opens a device of this Fabric as a ctx.Context ("" is "sim0").
func (f *Fabric) Open(device string) (*ctx.Context, error) {
	return provider.Open(ctx.ProviderSoftware, fabricProvider{f}, device)
}

// Stats returns a copy of the counters.
func (f *Fabric) Stats() Stats {
	f.mu.Lock()
	defer f.mu.Unlock()
	s := f.stats
	if f.shm != nil {
		s.RingNoSpace = f.shm.noSpace
	}
	return s
}

// Close stops the engine (if any). Devices stay usable in Manual fashion
// only through Step; Close is meant for the end of a test, or of a
// program. A Fabric on a shared fabric (Options.Fabric, or
// MLX5KIT_SIM_FABRIC for Default) leaves it: it removes its ring file from
// /dev/shm and the files of processes that are gone, and the last live
// process removes the fabric's registry; a program that never closes its
// Fabric leaves its file there until another process joins or leaves that
// fabric, or calls SweepFabric. A Fabric on a TCP link (Options.Link) closes the link.
// Idempotent.
//
// Close of a nil *Fabric returns nil.
func (f *Fabric) Close() error {
	if f == nil {
		return nil
	}
	if f.endClosing != nil {
		f.endClosing()
	}
	f.mu.Lock()
	if f.closed {
		f.mu.Unlock()
		return nil
	}
	f.closed = true
	stop, done, stopping := f.stop, f.done, f.stopping
	f.stop, f.done = nil, nil
	f.mu.Unlock()
	if stop != nil {
		close(stop)
		f.wakeEngine()
		<-done
	}
	if stopping != nil {
		// A device's close stopped the engine and may still wait for
		// it: wake it (only this Close leaves the ring) and wait too.
		f.wakeEngine()
		<-stopping
	}
	f.mu.Lock()
	tcp := f.tcp
	defer func() {
		if tcp != nil {
			tcp.close()
		}
	}()
	defer f.mu.Unlock()
	f.wireFlushAcks()
	// ACKs a full ring still keeps go with the wire, as a NIC's unsent
	// ACKs do when it is reset: a QP closed later has none to flush.
	f.wireAcks, f.wireAcksBlocked = nil, false
	if f.shm != nil {
		f.shm.leave()
		f.stats.RingNoSpace = f.shm.noSpace // Stats reads it from f.shm until now
		f.shm = nil
	}
	return nil
}

// devices lists the HCAs.
func (f *Fabric) devices() ([]provider.DeviceInfo, error) {
	f.mu.Lock()
	err := f.joinLocked()
	f.mu.Unlock()
	if err != nil {
		return nil, provider.Errorf("sim: list devices", "%w", err)
	}
	out := make([]provider.DeviceInfo, len(f.hcas))
	for i, h := range f.hcas {
		out[i] = provider.DeviceInfo{Name: h.name, NodeGUID: h.guid, Kind: ctx.KindSoftware}
	}
	return out, nil
}

// openDevice opens an HCA by name; "" opens the first.
func (f *Fabric) openDevice(name string) (provider.Device, error) {
	const op = "sim: open device"
	f.mu.Lock()
	err := f.joinLocked()
	f.mu.Unlock()
	if err != nil {
		return nil, provider.Errorf(op, "%w", err)
	}
	if len(f.hcas) == 0 {
		return nil, provider.Errorf(op, "%w", errZeroFabric)
	}
	var h *hca
	if name == "" {
		h = f.hcas[0]
	} else {
		for _, x := range f.hcas {
			if x.name == name {
				h = x
			}
		}
	}
	if h == nil {
		names := make([]string, len(f.hcas))
		for i, x := range f.hcas {
			names[i] = x.name
		}
		return nil, provider.Errorf(op, "%q: %w (the software HCA has %s)", name, ctx.ErrNotFound, strings.Join(names, ", "))
	}
	d, err := newDevice(f, h)
	if err != nil {
		return nil, provider.Errorf(op, "%w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	h.opened(d)
	f.openDevices++
	if f.opts.Mode == Engine && f.stop == nil && !f.closed {
		f.stop = make(chan struct{})
		f.done = make(chan struct{})
		go f.engine(f.stop, f.done)
	}
	return d, nil
}

// deviceClosed is called when a device handle closes; the engine stops
// when no device is open, but on a TCP link, whose rounds also read the
// peers' sockets and, on the listening end, pass the messages of the
// other Fabrics on and tell them who is linked: there it runs until
// Close.
func (f *Fabric) deviceClosedLocked() (stop, done chan struct{}) {
	f.openDevices--
	if f.openDevices == 0 && f.stop != nil && f.tcp == nil {
		stop, done = f.stop, f.done
		f.stop, f.done, f.stopping = nil, nil, done
	}
	return stop, done
}

func (f *Fabric) now() int64 {
	if f.opts.Mode == Manual {
		return f.vnow
	}
	return int64(time.Since(f.start))
}

// Now returns the model's clock: virtual time in Manual mode, time since
// New in Engine mode.
func (f *Fabric) Now() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return time.Duration(f.now())
}

// Advance moves the virtual clock forward by d (Manual mode only); timers
// that fall due run on the next Step.
func (f *Fabric) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.opts.Mode == Manual && d > 0 {
		f.vnow += int64(d)
	}
}

// Step runs one round: doorbell records are read, due timers fire, and every
// QP executes at most one WQE (flushes of a QP in error all at once). It
// reports whether anything happened. Manual mode only.
func (f *Fabric) Step() (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.opts.Mode != Manual {
		return false, ErrWrongMode
	}
	progressed := f.stepLocked()
	if f.fatal {
		return progressed, ErrViolation
	}
	return progressed, nil
}

// RunUntilIdle runs rounds until nothing is left to do, moving the virtual
// clock to the next timer whenever only timers remain. Manual mode only.
func (f *Fabric) RunUntilIdle() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.opts.Mode != Manual {
		return ErrWrongMode
	}
	for i := 0; i < f.opts.MaxRounds; i++ {
		if f.stepLocked() {
			continue
		}
		if f.releaseHeldLocked() {
			continue
		}
		if deadline := f.deadlineLocked(); deadline > f.vnow {
			f.vnow = deadline
			continue
		}
		if f.fatal {
			return ErrViolation
		}
		return nil
	}
	return fmt.Errorf("%w (%d rounds, virtual time %v)", ErrNotIdle, f.opts.MaxRounds, time.Duration(f.vnow))
}

// wireJudgeRounds bounds the rounds in a row that judge no ACK timer
// because their drain stopped at a completion (stepLocked): a stream of
// completions from one process does not keep a QP to another, dead one
// from timing out.
const wireJudgeRounds = 64

// stepLocked runs one round and returns whether anything happened (when
// nothing did, deadlineLocked says until when nothing will).
//
// A round looks at the CQs and reads the doorbells, then lets each QP
// send, then takes the messages of other processes. The CQs come first:
// a delayed CQE that falls due and overruns its CQ moves its QP to error,
// which must flush what that QP would send in this round
// (TestDueOverrunFlushesBeforeSend). Sending first matters
// between processes: a WQE posted after a completion was polled leaves at
// the next round's start, before that round spends its time on the ACKs
// and other messages that came in meanwhile; the ACKs of completing
// requests this process holds (wireServeSeg) leave right after. On a
// shared fabric a round ends after an inbound request that writes a CQE
// (shmFabric.drain), so that a polling loop sees that completion at once;
// the next round takes the rest. A QP whose ACK timer ran out sends in
// the first pass over the QPs what its window allows, and is judged in a
// second, after the inbound answers are taken.
func (f *Fabric) stepLocked() bool {
	f.stats.StepsExecuted++
	f.roundTimed = false
	progressed := false
	for _, c := range f.cqList {
		if f.scanCQ(c) {
			progressed = true
		}
	}
	for _, s := range f.srqList {
		f.scanSRQ(s)
	}
	for _, q := range f.qpList {
		f.scanQP(q)
	}
	if f.wireAcksBlocked {
		// ACKs a full ring kept: before the sends, which would fill
		// the ring again.
		f.wireFlushAcks()
	}
	// The sends. A request or datagram to another process goes behind
	// the answers held for it (wireAcksFirst), or carries the one held
	// (wireCarryAck): an answer a program posted to a request this
	// process executed reaches the requester after its ACK.
	f.wireSendOnly, f.wireLate = true, false
	for _, q := range f.qpList {
		if f.runQP(q) {
			progressed = true
		}
	}
	f.wireSendOnly = false
	if held := len(f.wireAcks); held > 0 {
		if f.wireFlushAcks(); len(f.wireAcks) < held {
			progressed = true
		}
	}
	// Messages of other processes, once the doorbells are read: a
	// receive posted before a message arrived is there for it.
	if f.shm != nil {
		if f.shm.drain(f) {
			progressed = true
		}
		if f.stats.StepsExecuted%shmGoneRounds == 0 {
			f.shm.dropGone()
		}
	}
	if f.tcp != nil && f.tcp.drain(f) {
		progressed = true
	}
	if len(f.wireHeldDC) > 0 && f.stats.StepsExecuted%shmGoneRounds == 0 && f.wireSweepHeld() {
		progressed = true
	}
	if f.wireLate {
		// The QPs whose ACK timer ran out, judged once the answers
		// that arrived in time are taken (a NIC takes an ACK as it
		// arrives). A drain that stopped at a completion leaves
		// answers unread: the judgement waits for a round that reads
		// them all, or wireJudgeRounds rounds.
		if f.shm == nil || !f.shm.stopped || f.wireUnjudged >= wireJudgeRounds {
			f.wireUnjudged = 0
			for _, q := range f.qpList {
				if q.wire.segN > 0 && f.runQP(q) {
					progressed = true
				}
			}
		} else {
			f.wireUnjudged++
		}
	}
	if len(f.wireAcks) > 0 && !f.wireAcksBlocked {
		// Held for the next round, which must come (ACKs a full ring
		// blocks wait for the engine's next round like any other work).
		progressed = true
	}
	if progressed {
		f.quietRounds = 0
	} else {
		f.quietRounds++
	}
	return progressed
}

// lookAtTimers reports whether this round's first pass compares the ACK
// timers of the segments in flight (wireRun), which reads the time-stamp
// counter. A polling loop's round (idle) looks after a round in which
// something happened, and in every fourth of a run of rounds in which
// nothing did: a loop that waits for an answer runs such rounds back to
// back, a few tens of nanoseconds each, and the counter read (about 10
// ns on AMD) was a third of each. A timer then runs out up to three of
// the loop's rounds later than it would. The engine's rounds, between
// which it may sleep, and Manual mode look in every round.
func (f *Fabric) lookAtTimers() bool {
	return !f.idleRound || f.quietRounds%4 == 0
}

// deadlineLocked returns the earliest future deadline of a timer (0 if
// none): a CQE held back, or a QP's wait (ACK timeout, RNR, retry). Only
// RunUntilIdle asks, after a round where nothing happened: a round does
// not read the clock for it.
func (f *Fabric) deadlineLocked() int64 {
	var deadline int64
	note := func(t int64) {
		if t <= 0 {
			return // no timer (the clock is never negative)
		}
		if t > f.roundNow() && (deadline == 0 || t < deadline) {
			deadline = t
		}
	}
	for _, c := range f.cqList {
		note(c.nextDue())
	}
	for _, q := range f.qpList {
		if q.sqPending() > 0 {
			note(q.blockedUntil)
		}
	}
	return deadline
}

// roundNow returns the time of the round stepLocked runs, reading the
// clock the first time a round asks (in Engine mode a read costs about as
// much as the rest of an empty round).
func (f *Fabric) roundNow() int64 {
	if !f.roundTimed {
		f.readRoundClock()
	}
	return f.roundAt
}

// readRoundClock sets the round's time; not inlined, so that roundNow is
// small enough to be.
//
//go:noinline
func (f *Fabric) readRoundClock() {
	if !f.useTicks {
		f.roundAt = f.now()
		f.roundTimed = true
		return
	}
	t0 := tsc.Now()
	f.roundAt = f.now()
	t1 := tsc.Now()
	f.roundTimed = true
	f.clockRead(t0, t1)
}

// timerSlack bounds how late a timer runs out for not reading the clock: a
// QP with a request in flight compares its ACK timer in every round, and
// sets one for every message, and a clock read (about 40 ns in a virtual
// machine) would be a large part of a round. The time last read stands in
// for the clock while the time-stamp counter says it is less than half
// timerSlack old (slackTicks); the other half is the margin for the
// counter's rate, which is measured.
const timerSlack = 4 * time.Microsecond

// timerNow returns a time to compare a deadline with: the round's time if
// the round read the clock, else the time last read if it is less than
// half timerSlack old, else a fresh read. It is never later than the
// clock, so a deadline is never seen passed early, only up to half
// timerSlack late. In Manual mode it is roundNow.
func (f *Fabric) timerNow() int64 {
	if f.timeYoung() {
		return f.roundAt
	}
	return f.roundNow()
}

// deadlineAfter returns when a timer of d started now runs out: d after
// the round's time if the round read the clock, else d and timerSlack
// after the time last read if it is less than half timerSlack old, else d
// after a fresh read. The timer never runs out early, and at most
// timerSlack late. In Manual mode it is d after roundNow.
func (f *Fabric) deadlineAfter(d int64) int64 {
	if f.timeYoung() {
		return f.roundAt + int64(timerSlack) + d
	}
	return f.roundNow() + d
}

// timeYoung reports whether roundAt, read before this round, may stand in
// for the clock: the counter says it is less than half timerSlack old
// (never before the counter's rate is measured, nor in Manual mode).
func (f *Fabric) timeYoung() bool {
	return !f.roundTimed && f.slackTicks != 0 && tsc.Now()-f.roundTicks < f.slackTicks
}

// clockRead notes the time-stamp counter read before (t0) and after (t1)
// the clock read now in roundAt, and measures the counter's rate against
// the clock over calWindow at a time. The age of roundAt is counted from
// t0, so that a pause between the two reads makes it look older, never
// younger; the rate is measured from the counter after the clock read
// at a window's start to the counter before the one at its end, so that
// pauses there make it lower (fewer ticks stand for half timerSlack),
// never higher. slackTicks is the ticks of half timerSlack: 0 (timerNow and
// deadlineAfter read the clock) until a measurement, and whenever the
// counter did not advance with the clock.
func (f *Fabric) clockRead(t0, t1 uint64) {
	const calWindow = int64(10 * time.Millisecond)
	f.roundTicks = t0
	switch d := f.roundAt - f.calAt; {
	case f.calAt == 0:
		f.calAt, f.calTicks = f.roundAt, t1
	case d >= calWindow:
		f.slackTicks = 0
		if t0 > f.calTicks {
			f.slackTicks = (t0 - f.calTicks) * uint64(timerSlack/2) / uint64(d)
		}
		f.calAt, f.calTicks = f.roundAt, t1
	}
}

// wakeEngine ends the engine's sleep on a shared fabric's ring or a TCP
// link's sockets, so that it sees the stop Close gave it at once (Close
// leaves either only after).
func (f *Fabric) wakeEngine() {
	switch {
	case f.shm != nil:
		f.shm.in.wake()
	case f.tcp != nil:
		f.tcp.wake()
	}
}

// driveHold is how long the engine leaves the rounds to polling loops after
// the last round one of them ran (idle): it sleeps that long at a time,
// and takes the rounds back within about that once the loops stop.
const driveHold = 200 * time.Microsecond

// idle is ctx.Context.Idle on a device of f: one round of the model on the
// calling goroutine, as the engine runs it, when no other goroutine is
// running one (and the engine is running: Engine mode, not closed); else
// it yields the processor. A polling loop that calls it after every empty
// poll carries its own requests to the wire and its peers' answers to its
// CQ, without waiting for the engine goroutine to be scheduled.
func (f *Fabric) idle() {
	if f.opts.Mode != Engine || !f.mu.TryLock() {
		runtime.Gosched()
		return
	}
	if f.stop == nil {
		f.mu.Unlock()
		runtime.Gosched()
		return
	}
	f.idleRound = true
	if !f.stepLocked() {
		f.releaseHeldLocked()
	}
	f.idleRound = false
	f.idleRounds.advance()
	if f.roundTimed {
		f.drivenAt.Store(f.roundAt)
	}
	f.mu.Unlock()
}

// releaseCount is a count that one goroutine at a time advances (the
// holder of Fabric.mu) and others read with Load. It is advanced with a
// release store, not sync/atomic's store, whose XCHG is a full fence: the
// unlock that ends a polling loop's round is one already, and the second
// cost 25 to 40 ns of a 500 ns round trip between processes
// (docs/benchmarks.md, "Fewer waits in the round trip").
type releaseCount struct{ v uint64 }

// Load returns the count.
func (c *releaseCount) Load() uint64 { return atomic.LoadUint64(&c.v) }

// advance adds one to the count (one writer at a time: a load and a
// release store of the next count, not an atomic add).
func (c *releaseCount) advance() { storeRelease64(&c.v, c.v+1) }

// driven reports whether a polling loop ran a round (idle) since the
// engine last asked (seen is the engine's own copy of idleRounds, from
// then), or within the last driveHold by the time of its last round that
// read the clock.
func (f *Fabric) driven(seen *uint64) bool {
	if n := f.idleRounds.Load(); n != *seen {
		*seen = n
		return true
	}
	d := f.drivenAt.Load()
	return d != 0 && f.now()-d < int64(driveHold)
}

// envSpin names the environment variable that chooses whether an engine
// runs bursts of empty rounds (engineSpins): "0" never, "1" always, unset
// (or anything else) when processors are to spare. It is read once, when
// the first engine starts.
const envSpin = "MLX5KIT_SIM_SPIN"

// engineBurst is how many empty rounds a spinning engine runs back to back
// before it yields its processor (each round is 100 to 200 ns of work: the
// burst lasts a few microseconds).
const engineBurst = 16

// spinSetting is envSpin's value, read once.
var spinSetting = sync.OnceValue(func() string { return os.Getenv(envSpin) })

// engineSpins reports whether an engine starting now runs bursts of empty
// rounds before it yields. By default only with processors to spare
// (GOMAXPROCS and the machine's CPUs at least 4), where the goroutines that
// wait for its answer (pollers) run on other processors at the same time:
// with fewer, a burst keeps a poller from its processor and lengthens
// every round trip (docs/benchmarks.md, "Where the engine's round trip
// goes"). envSpin overrides the choice.
func engineSpins() bool {
	return spinChoice(spinSetting(), runtime.GOMAXPROCS(0), runtime.NumCPU())
}

// spinChoice is engineSpins for envSpin's value setting, procs processors
// (GOMAXPROCS) and cpus CPUs.
func spinChoice(setting string, procs, cpus int) bool {
	switch setting {
	case "0":
		return false
	case "1":
		return true
	}
	return procs >= 4 && cpus >= 4
}

// engine polls like a device: it runs rounds while there is work, spins a
// little when there is none, then sleeps with a doubling back-off up to
// IdleSleep. While it spins it yields its processor after every empty
// round, or after a burst of engineBurst of them when processors are to
// spare (engineSpins).
func (f *Fabric) engine(stop, done chan struct{}) {
	defer close(done)
	const spins = 200
	idle := 0
	spin, burst := engineSpins(), 0
	sleep := time.Microsecond
	var idleSince, busySince time.Time
	idleSeen := f.idleRounds.Load() // the polling loops' rounds (driven)
	// One timer serves every back-off sleep, so that an idle engine does
	// not allocate (a timer per sleep was three allocations each). Since
	// Go 1.23 Reset on a stopped or fired timer leaves no stale tick in C.
	t := time.NewTimer(time.Hour)
	t.Stop()
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		default:
		}
		if f.driven(&idleSeen) {
			// A polling loop runs the rounds (idle): a round here
			// would only contend for the lock. Look again after
			// driveHold, on a timer that no peer's message ends,
			// so that peers do not pay for a futex wake-up.
			t.Reset(driveHold)
			select {
			case <-stop:
				return
			case <-t.C:
			}
			idle, burst, sleep = 0, 0, time.Microsecond
			continue
		}
		f.mu.Lock()
		progressed := f.stepLocked()
		if !progressed {
			progressed = f.releaseHeldLocked()
		}
		f.mu.Unlock()
		if progressed {
			idle, burst = 0, 0
			sleep = time.Microsecond
			if f.shm != nil {
				busySince = time.Now()
			}
			continue
		}
		if spin && idle < spins && burst < engineBurst-1 {
			// Within a burst: the next round at once. The rounds
			// before a sleep are counted by yields (idle), as
			// without bursts.
			burst++
			continue
		}
		burst = 0
		if idle <= spins {
			idle++
		}
		if idle < spins || (f.shm != nil && idle == spins && time.Since(busySince) < shmSpin) {
			// The busy path: an answer from another process usually
			// follows within microseconds; a futex sleep and wake-up
			// would cost more than the wait.
			if idle == spins {
				idle--
			}
			runtime.Gosched()
			continue
		}
		f.mu.Lock()
		if f.wireSweepHeld() {
			// A receive of a DCI gone completed: a round for it
			// rather than a sleep.
			f.mu.Unlock()
			idle, burst = 0, 0
			continue
		}
		f.stats.EngineSleeps++
		if f.shm != nil {
			// An idle engine runs few rounds (shmGoneRounds would
			// take seconds of them); the look costs little beside
			// the sleep.
			f.shm.dropGone()
		}
		f.mu.Unlock()
		if f.shm != nil || f.tcp != nil {
			// A peer's message wakes the engine at once; after a long
			// idle period the engine sleeps longer (shmDeepSleep).
			if idle == spins {
				idleSince = time.Now()
			}
			if f.shm != nil {
				f.shm.in.sleep(f.shm.slot, shmSleep(sleep, idleSince))
			} else {
				// Bytes from a peer end the sleep.
				f.tcp.sleep(f, shmSleep(sleep, idleSince))
			}
		} else {
			t.Reset(sleep)
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
		if sleep < f.opts.IdleSleep {
			sleep *= 2
			if sleep > f.opts.IdleSleep {
				sleep = f.opts.IdleSleep
			}
		}
	}
}

// addQP inserts q into the execution order.
func (f *Fabric) addQP(q *qp) {
	f.qps[q.qpn] = q
	i := sort.Search(len(f.qpList), func(i int) bool { return f.qpList[i].qpn >= q.qpn })
	f.qpList = append(f.qpList, nil)
	copy(f.qpList[i+1:], f.qpList[i:])
	f.qpList[i] = q
}

// qpByNum returns the QP numbered n (nil if none), looking in the map
// only when it is not the one found last.
func (f *Fabric) qpByNum(n uint32) *qp {
	if q := f.lastQP; q != nil && q.qpn == n {
		return q
	}
	q := f.qps[n]
	if q != nil {
		f.lastQP = q
	}
	return q
}

// mrByKey returns the MR whose key is k (nil if none), as qpByNum.
func (f *Fabric) mrByKey(k uint32) *mr {
	if m := f.lastMR; m != nil && m.key == k {
		return m
	}
	m := f.mrs[k]
	if m != nil {
		f.lastMR = m
	}
	return m
}

// removeQP takes q out of the execution order and frees its QPN.
func (f *Fabric) removeQP(q *qp) {
	q.dev.dropEventsOf(func(ev ctx.AsyncEvent) bool { return qpEvent(ev, q.qpn) })
	delete(f.qps, q.qpn)
	if f.lastQP == q {
		f.lastQP = nil
	}
	f.qpns.give(q.qpn)
	for i, x := range f.qpList {
		if x == q {
			f.qpList = slices.Delete(f.qpList, i, i+1) // zeroes the vacated slot
			break
		}
	}
}

func (f *Fabric) addSRQ(s *srq) {
	f.srqs[s.srqn] = s
	f.srqList = append(f.srqList, s)
}

// removeSRQ forgets s and frees its SRQN.
func (f *Fabric) removeSRQ(s *srq) {
	s.pd.dev.dropEventsOf(func(ev ctx.AsyncEvent) bool { return srqEvent(ev, s.srqn) })
	delete(f.srqs, s.srqn)
	f.srqns.give(s.srqn)
	for i, x := range f.srqList {
		if x == s {
			f.srqList = slices.Delete(f.srqList, i, i+1) // zeroes the vacated slot
			break
		}
	}
}

func (f *Fabric) addCQ(c *cq) {
	f.cqs[c.cqn] = c
	f.cqList = append(f.cqList, c)
}

// removeCQ forgets c and frees its CQN.
func (f *Fabric) removeCQ(c *cq) {
	c.dev.dropEventsOf(func(ev ctx.AsyncEvent) bool { return cqEvent(ev, c.cqn) })
	delete(f.cqs, c.cqn)
	f.cqns.give(c.cqn)
	for i, x := range f.cqList {
		if x == c {
			f.cqList = slices.Delete(f.cqList, i, i+1) // zeroes the vacated slot
			break
		}
	}
}
