package bench

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/sim"

	// The hardware provider registers itself with ctx when imported.
	_ "github.com/mlx5kit/mlx5kit/cgo"
)

// EnvDevice names the device the ping-pong benchmarks open (with
// MLX5KIT_PROVIDER=mlx5); empty opens the first one.
const EnvDevice = "MLX5KIT_DEVICE"

// bufSize is the registered buffer of each side: room for a ping and a pong
// of the largest payload at every depth the throughput benchmarks use.
const bufSize = 4 << 20

// side is one end of a ping-pong: a device context, a protection domain and
// a registered buffer.
type side struct {
	c   *ctx.Context
	pd  *ctx.ProtectionDomain
	buf *ctx.Buffer
	mr  *ctx.MemoryRegion
}

// addr returns the address of byte off of the side's buffer.
func (s *side) addr(off int) uint64 { return uint64(s.mr.Addr()) + uint64(off) }

// pingEnv is the two sides of the ping-pong benchmarks: two contexts on one
// mlx5 device (the QPs talk through the device's loopback), or two HCAs of
// a private software HCA fabric whose engine goroutine plays the device.
type pingEnv struct {
	provider string
	device   string
	fabric   *sim.Fabric // nil on hardware
	s        [2]side
}

var (
	envOnce sync.Once
	envErr  error
	env     *pingEnv
)

// sharedEnv opens the environment once per test binary. Hardware is used
// when MLX5KIT_PROVIDER=mlx5, or when it is unset and an mlx5 device opens;
// otherwise the software HCA.
func sharedEnv(tb testing.TB) *pingEnv {
	envOnce.Do(func() {
		env, envErr = openEnv()
		if envErr == nil {
			// A "key: value" line: benchstat keeps it with the results.
			fmt.Printf("provider: %s\n", env.describe())
		}
	})
	if envErr != nil {
		tb.Fatal(envErr)
	}
	return env
}

func openEnv() (*pingEnv, error) {
	want := os.Getenv(ctx.EnvProvider)
	device := os.Getenv(EnvDevice)
	if want == "" || want == ctx.ProviderHardware {
		e, err := openHardware(device)
		if err == nil {
			return e, nil
		}
		if want == ctx.ProviderHardware {
			return nil, fmt.Errorf("bench: open %s device %q: %w", ctx.ProviderHardware, device, err)
		}
	}
	if want != "" && want != ctx.ProviderSoftware && want != ctx.ProviderHardware {
		return nil, fmt.Errorf("bench: %s=%q: unknown provider", ctx.EnvProvider, want)
	}
	return openSim()
}

func openHardware(device string) (*pingEnv, error) {
	e := &pingEnv{provider: ctx.ProviderHardware}
	for i := range e.s {
		c, err := ctx.Open(ctx.Options{Provider: ctx.ProviderHardware, Device: device})
		if err != nil {
			e.close()
			return nil, err
		}
		e.s[i].c = c
		e.device = c.DeviceName()
	}
	return e, e.setup()
}

// newStats returns fresh round-trip statistics whose waits, on the
// software HCA, run the model's rounds themselves (Context.Idle), as the
// kit's own polling loops do; on a NIC they spin and yield.
func (e *pingEnv) newStats() *rtStats {
	st := newRTStats()
	if e.fabric != nil {
		st.step = e.s[0].c.Idle // both devices are on one Fabric
	}
	return st
}

// simIdleSleep keeps the engine's back-off short, so a ping that follows
// a pause in the benchmark (timer stopped) does not wait for a long sleep.
const simIdleSleep = 20 * time.Microsecond

func openSim() (*pingEnv, error) {
	f := sim.New(sim.Options{Mode: sim.Engine, Devices: 2, IdleSleep: simIdleSleep})
	e := &pingEnv{provider: ctx.ProviderSoftware, device: "sim0+sim1", fabric: f}
	for i := range e.s {
		c, err := f.Open(fmt.Sprintf("sim%d", i))
		if err != nil {
			e.close()
			return nil, err
		}
		e.s[i].c = c
	}
	return e, e.setup()
}

func (e *pingEnv) setup() error {
	const access = ctx.AccessLocalWrite | ctx.AccessRemoteWrite | ctx.AccessRemoteRead | ctx.AccessRemoteAtomic
	for i := range e.s {
		s := &e.s[i]
		var err error
		if s.pd, err = s.c.AllocProtectionDomain(); err != nil {
			return errors.Join(err, e.close())
		}
		if s.buf, err = ctx.AllocBuffer(bufSize, ctx.BufferOptions{}); err != nil {
			return errors.Join(err, e.close())
		}
		if s.mr, err = s.pd.RegisterBuffer(s.buf, access); err != nil {
			return errors.Join(err, e.close())
		}
	}
	return nil
}

func (e *pingEnv) close() error {
	var errs []error
	for i := range e.s {
		if c := e.s[i].c; c != nil {
			errs = append(errs, c.Close())
		}
		if b := e.s[i].buf; b != nil {
			errs = append(errs, b.Close())
		}
	}
	if e.fabric != nil {
		errs = append(errs, e.fabric.Close())
	}
	return errors.Join(errs...)
}

// engineSleeps is the number of back-off sleeps the software HCA's engine
// has taken (0 on hardware). A round trip during which the engine slept
// pays the sleep's wake-up latency.
func (e *pingEnv) engineSleeps() uint64 {
	if e.fabric == nil {
		return 0
	}
	return e.fabric.Stats().EngineSleeps
}

// describe is the provider line the benchmarks print.
func (e *pingEnv) describe() string {
	if e.fabric != nil {
		return fmt.Sprintf("sim (software HCA, no NIC: the round trips time the model, not a network; engine idle sleep %v)", simIdleSleep)
	}
	return fmt.Sprintf("%s (%s)", e.provider, e.device)
}
