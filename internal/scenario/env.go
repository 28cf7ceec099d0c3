package scenario

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/rc"
	"github.com/mlx5kit/mlx5kit/transport"
)

// bufSize is the size of each of the two registered buffers: room for the
// largest payload (64 KiB) several times over, with guards around it.
const bufSize = 1 << 20

// guard is the number of bytes around a destination that must stay as they
// were poisoned.
const guard = 64

// poison is the byte value a destination and its guards are filled with
// before an operation.
const poison = 0xa5

// allAccess is every access flag a region may be registered with.
const allAccess = ctx.AccessLocalWrite | ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic

// env is what every scenario starts from: on one Context, a protection
// domain, two registered buffers ("side" 0 and 1), a completion queue and a
// poller for each side.
type env struct {
	c    *ctx.Context
	o    Options
	dev  ctx.DeviceAttr
	link ctx.LinkLayer
	port uint8
	gid  ctx.GIDSelector

	pd  *ctx.ProtectionDomain
	buf [2]*ctx.Buffer
	mr  [2]*ctx.MemoryRegion
	cq  [2]*ctx.CompletionQueue
	p   [2]*transport.Poller

	// closers run in reverse order by close, after the PD and CQs.
	closers []func() error
}

// newEnv builds an env on c. The caller must call close.
func newEnv(c *ctx.Context, o Options) (e *env, err error) {
	if c == nil {
		return nil, errors.New("scenario: nil context")
	}
	e = &env{c: c, o: o, port: o.Port}
	if e.o.Timeout <= 0 {
		e.o.Timeout = DefaultTimeout
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, e.close())
			e = nil
		}
	}()
	if e.dev, err = c.Query(); err != nil {
		return e, err
	}
	pa, err := e.choosePort()
	if err != nil {
		return e, err
	}
	e.link = pa.LinkLayer
	e.gid = o.GID
	if e.pd, err = c.AllocProtectionDomain(); err != nil {
		return e, err
	}
	for i := range 2 {
		if e.buf[i], err = ctx.AllocBuffer(bufSize, ctx.BufferOptions{}); err != nil {
			return e, err
		}
		if e.mr[i], err = e.pd.RegisterBuffer(e.buf[i], allAccess); err != nil {
			return e, err
		}
		if e.cq[i], err = c.CreateCompletionQueue(ctx.CompletionQueueConfig{Depth: 256}); err != nil {
			return e, err
		}
		if e.p[i], err = transport.NewPoller(e.cq[i]); err != nil {
			return e, err
		}
	}
	return e, nil
}

// choosePort sets e.port to Options.Port, or when that is 0 to the first
// ACTIVE port of the device, and returns the port's attributes. A device
// whose port 1 is down (a second port of a multi-port device, or a cable
// in port 2 only) runs the scenarios on the port that is up; a port named
// in Options must be ACTIVE.
func (e *env) choosePort() (ctx.PortAttr, error) {
	if e.port != 0 {
		pa, err := e.c.QueryPort(e.port)
		if err != nil {
			return pa, err
		}
		if pa.State != ctx.PortStateActive {
			return pa, fmt.Errorf("port %d of %s is %v, not ACTIVE", e.port, e.c.DeviceName(), pa.State)
		}
		return pa, nil
	}
	states := make([]string, 0, e.dev.PhysPortCount)
	for p := uint8(1); p <= e.dev.PhysPortCount && p != 0; p++ {
		pa, err := e.c.QueryPort(p)
		if err != nil {
			return pa, err
		}
		if pa.State == ctx.PortStateActive {
			e.port = p
			return pa, nil
		}
		states = append(states, fmt.Sprintf("port %d %v", p, pa.State))
	}
	return ctx.PortAttr{}, fmt.Errorf("no port of %s is ACTIVE (%s)", e.c.DeviceName(), strings.Join(states, ", "))
}

// close closes everything the env and the scenario created: the PD (and
// with it every QP, SRQ, address handle and memory region), the CQs, then
// the buffers.
func (e *env) close() error {
	var errs []error
	for i := len(e.closers) - 1; i >= 0; i-- {
		errs = append(errs, e.closers[i]())
	}
	if e.pd != nil {
		errs = append(errs, e.pd.Close())
	}
	for i := range 2 {
		if e.cq[i] != nil {
			errs = append(errs, e.cq[i].Close())
		}
	}
	for i := range 2 {
		if e.buf[i] != nil {
			errs = append(errs, e.buf[i].Close())
		}
	}
	return errors.Join(errs...)
}

// run builds an env on c, runs body and closes the env; the error names the
// scenario.
func run(name string, c *ctx.Context, o Options, body func(e *env) error) error {
	e, err := newEnv(c, o)
	if err != nil {
		if errors.Is(err, ErrSkip) {
			return err
		}
		return fmt.Errorf("scenario %s: set up: %w", name, err)
	}
	err = body(e)
	if cerr := e.close(); cerr != nil {
		err = errors.Join(err, fmt.Errorf("close: %w", cerr))
	}
	if err != nil && !errors.Is(err, ErrSkip) {
		return fmt.Errorf("scenario %s on %v: %w", name, c, err)
	}
	return err
}

// rcConfig returns an RC configuration for the env's port and GID with the
// given receive depth (0: none).
func (e *env) rcConfig(recvDepth uint32) rc.Config {
	cfg := rc.Config{
		SendDepth:  64,
		RecvDepth:  recvDepth,
		MaxSendSGE: min(4, max(e.dev.MaxSGE, 1)),
		MaxInline:  min(128, e.dev.MaxInline),
		Port:       e.port,
		GID:        e.gid,
	}
	if recvDepth > 0 {
		cfg.MaxRecvSGE = min(4, max(e.dev.MaxSGE, 1))
	}
	return cfg
}

// rcPair creates an RC QP on each side with cfg, adds each to its side's
// poller and connects them to each other.
func (e *env) rcPair(cfg0, cfg1 rc.Config) (a, b *rc.QP, err error) {
	if a, err = rc.New(e.pd, e.cq[0], cfg0); err != nil {
		return nil, nil, err
	}
	if b, err = rc.New(e.pd, e.cq[1], cfg1); err != nil {
		return nil, nil, err
	}
	if err = e.p[0].Add(a); err != nil {
		return nil, nil, err
	}
	if err = e.p[1].Add(b); err != nil {
		return nil, nil, err
	}
	if err = a.Connect(b.Endpoint()); err != nil {
		return nil, nil, err
	}
	if err = b.Connect(a.Endpoint()); err != nil {
		return nil, nil, err
	}
	return a, b, nil
}

// addr returns the address of byte off of side i's buffer.
func (e *env) addr(i, off int) uint64 { return uint64(e.mr[i].Addr()) + uint64(off) }

// mem returns n bytes at off of side i's buffer.
func (e *env) mem(i, off, n int) []byte { return e.mr[i].Bytes()[off : off+n] }

// lkey returns side i's lkey.
func (e *env) lkey(i int) uint32 { return e.mr[i].LKey() }

// rkey returns side i's rkey.
func (e *env) rkey(i int) uint32 { return e.mr[i].RKey() }

// fill writes n pseudo-random bytes from seed at off of side i and returns
// a copy of them.
func (e *env) fill(i, off, n int, seed uint64) []byte {
	b := e.mem(i, off, n)
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	for k := range b {
		b[k] = byte(r.Uint32())
	}
	return bytes.Clone(b)
}

// pattern returns n pseudo-random bytes from seed (not in registered
// memory: an inline payload).
func pattern(n int, seed uint64) []byte {
	r := rand.New(rand.NewPCG(seed, ^seed))
	b := make([]byte, n)
	for k := range b {
		b[k] = byte(r.Uint32())
	}
	return b
}

// poisonAt fills [off-guard, off+n+guard) of side i with the poison byte.
func (e *env) poisonAt(i, off, n int) {
	lo := max(off-guard, 0)
	b := e.mem(i, lo, off+n+guard-lo)
	for k := range b {
		b[k] = poison
	}
}

// expect checks that side i holds want at off, byte for byte, and that the
// guard bytes on each side still hold the poison.
func (e *env) expect(i, off int, want []byte, what string) error {
	got := e.mem(i, off, len(want))
	if !bytes.Equal(got, want) {
		k := 0
		for k < len(want) && got[k] == want[k] {
			k++
		}
		return fmt.Errorf("%s: %d bytes differ from byte %d on (got %#02x, want %#02x)", what, len(want), k, got[k], want[k])
	}
	lo := max(off-guard, 0)
	for k, b := range e.mem(i, lo, off-lo) {
		if b != poison {
			return fmt.Errorf("%s: byte %d before the destination changed to %#02x", what, off-lo-k, b)
		}
	}
	for k, b := range e.mem(i, off+len(want), guard) {
		if b != poison {
			return fmt.Errorf("%s: byte %d after the destination changed to %#02x", what, k, b)
		}
	}
	return nil
}

// load64 and store64 read and write a 64-bit value in host byte order at
// off of side i: the byte order of the device's 8-byte atomics in the mode
// mlx5_core sets (atomic_req_8B_endianness_mode, host endianness), the
// only one in which mlx5_ib reports IBV_ATOMIC_HCA.
func (e *env) load64(i, off int) uint64 { return binary.NativeEndian.Uint64(e.mem(i, off, 8)) }

func (e *env) store64(i, off int, v uint64) { binary.NativeEndian.PutUint64(e.mem(i, off, 8), v) }

// wait polls side i's CQ until n completions have arrived and returns
// copies of them. It fails when the time runs out first, or when more than
// n arrive in the same batch.
func (e *env) wait(i, n int) ([]transport.Completion, error) {
	out := make([]transport.Completion, 0, n)
	deadline := time.Now().Add(e.o.Timeout)
	for spins := 0; len(out) < n; spins++ {
		if e.o.Progress != nil {
			if err := e.o.Progress(); err != nil {
				return out, fmt.Errorf("progress: %w", err)
			}
		}
		got := e.p[i].Poll(n-len(out), func(c *transport.Completion) { out = append(out, *c) })
		if err := e.p[i].Err(); err != nil {
			return out, fmt.Errorf("poll CQ %#x: %w", e.cq[i].CQN(), err)
		}
		if got == 0 && spins%1024 == 1023 && time.Now().After(deadline) {
			return out, fmt.Errorf("side %d: %d of %d completions within %v: %s", i, len(out), n, e.o.Timeout, describe(out))
		}
	}
	return out, nil
}

// quiet checks that no further completion arrives on side i's CQ for a
// short while.
func (e *env) quiet(i int) error {
	end := time.Now().Add(20 * time.Millisecond)
	for time.Now().Before(end) {
		if e.o.Progress != nil {
			if err := e.o.Progress(); err != nil {
				return err
			}
		}
		var extra []transport.Completion
		if e.p[i].Poll(16, func(c *transport.Completion) { extra = append(extra, *c) }) > 0 {
			return fmt.Errorf("side %d: unexpected completions %s", i, describe(extra))
		}
	}
	return nil
}

// waitOK is wait that also requires every completion to be successful.
func (e *env) waitOK(i, n int) ([]transport.Completion, error) {
	out, err := e.wait(i, n)
	if err != nil {
		return out, err
	}
	for _, c := range out {
		if err := c.Err(); err != nil {
			return out, fmt.Errorf("side %d: %w", i, err)
		}
	}
	return out, nil
}

// describe formats completions for an error message.
func describe(cs []transport.Completion) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for k, c := range cs {
		if k > 0 {
			b.WriteString(", ")
		}
		fmt.Fprintf(&b, "{wrid %d %v qpn %#x status %v", c.WRID, c.Opcode, c.QPN, c.Match)
		if c.Match == transport.MatchError {
			fmt.Fprintf(&b, " %v", c.Syndrome)
		}
		fmt.Fprintf(&b, " bytes %d imm %#x}", c.ByteCount, c.Immediate)
	}
	b.WriteByte(']')
	return b.String()
}

// check returns an error "what: got X, want Y" when got != want.
func check[T comparable](what string, got, want T) error {
	if got != want {
		return fmt.Errorf("%s: got %v, want %v", what, got, want)
	}
	return nil
}

// firstErr returns the first non-nil error.
func firstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
