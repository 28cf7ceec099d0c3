package perftool

import (
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"time"

	"github.com/mlx5kit/mlx5kit"
	"github.com/mlx5kit/mlx5kit/cgo"
	"github.com/mlx5kit/mlx5kit/cgo/emulate"
	"github.com/mlx5kit/mlx5kit/ctx"
	"github.com/mlx5kit/mlx5kit/internal/scenario"
)

// Flags points at the command's fields for the flags every measuring
// command takes: the device, the port and GID, the timeout and the peer.
type Flags struct {
	Device, Provider *string
	GIDIndex, Port   *int
	Timeout          *time.Duration
	Server, Client   *string
	KeyFile          *string
}

// Register defines the flags on fs with their defaults.
func (f Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(f.Device, "device", "", "device to open (default: the first)")
	fs.StringVar(f.Provider, "provider", "", "mlx5 or sim (default: $"+ctx.EnvProvider+", else mlx5, else sim with a note)")
	fs.IntVar(f.GIDIndex, "gid-index", -1, "local GID table entry on RoCE (default: $"+scenario.EnvGIDIndex+", or a RoCE v2 GID)")
	fs.IntVar(f.Port, "ib-port", 1, "local port")
	fs.DurationVar(f.Timeout, "timeout", 10*time.Second, "give up when a message or the exchange takes longer")
	fs.StringVar(f.Server, "server", "", "listen on this TCP address (e.g. :18515) for a client")
	fs.StringVar(f.Client, "client", "", "connect to a server at HOST:PORT")
	fs.StringVar(f.KeyFile, "key-file", "", "read the pre-shared key of -server and -client from this file (default: $"+EnvKey+")")
}

// Check returns what is wrong with the flags' values, or "".
func (f Flags) Check() string {
	switch {
	case *f.Provider != "" && *f.Provider != ctx.ProviderHardware && *f.Provider != ctx.ProviderSoftware:
		return fmt.Sprintf("-provider %q: want %s or %s", *f.Provider, ctx.ProviderHardware, ctx.ProviderSoftware)
	case *f.GIDIndex < -1 || *f.GIDIndex > 255:
		return fmt.Sprintf("-gid-index %d: want 0 to 255 (-1: the default)", *f.GIDIndex)
	case *f.Port < 1 || *f.Port > 255:
		return fmt.Sprintf("-ib-port %d: want 1 to 255", *f.Port)
	case *f.Timeout <= 0:
		return fmt.Sprintf("-timeout %v: want a positive duration", *f.Timeout)
	case *f.Server != "" && *f.Client != "":
		return "-server and -client exclude each other"
	case *f.Server != "":
		return checkAddress("-server", *f.Server)
	case *f.Client != "":
		return checkAddress("-client", *f.Client)
	}
	return ""
}

// checkAddress returns what is wrong with the value of the flag name, a
// TCP address: HOST:PORT (HOST may be empty) with a port number up to
// 65535 or a service name; "" when nothing is.
func checkAddress(name, address string) string {
	_, port, err := net.SplitHostPort(address)
	if err == nil {
		_, err = net.LookupPort("tcp", port)
	}
	if err != nil {
		return fmt.Sprintf("%s %q: want HOST:PORT, e.g. :18515 or localhost:18515 (%v)", name, address, err)
	}
	return ""
}

// Open opens the device named by provider and device ("" for the default)
// and returns it with what it is: its description and, on the software
// HCA, a note saying so and why. With no provider named (by -provider or
// MLX5KIT_PROVIDER) it opens the first mlx5 device, and when there is none
// (cgo.NoDeviceReason says why, a build without cgo included) it chooses
// the software HCA itself and says so in the note; any other failure to
// open the NIC is returned.
func Open(provider, device string) (*ctx.Context, string, error) {
	why := "asked for with -provider " + provider
	if provider == "" {
		if env := os.Getenv(ctx.EnvProvider); env != "" {
			provider, why = env, "asked for with "+ctx.EnvProvider+"="+env
		}
	}
	c, err := mlx5kit.Open(mlx5kit.Options{Provider: provider, Device: device})
	if err != nil && provider == "" && cgo.NoDeviceReason() != "" {
		why = "no mlx5 device: " + cgo.NoDeviceReason() + "; -provider sim or " + ctx.EnvProvider + "=sim chooses it without this note"
		c, err = mlx5kit.Open(mlx5kit.Options{Provider: ctx.ProviderSoftware, Device: device})
	}
	if err != nil {
		return nil, "", err
	}
	what := c.String()
	if Emulated(c) {
		what += "\nnote:    an emulated device (" + emulate.EnvEmulate + "=1): rdma-core's libmlx5 drives the model (package sim) " +
			"behind an emulated uverbs kernel, not a NIC: the numbers are those of the model"
	}
	if c.Kind() == ctx.KindSoftware {
		what += "\nnote:    the software HCA, not a NIC: the numbers are those of the model (" + why + ")"
	}
	return c, what, nil
}

// ProbeDevice opens the device as Open does and closes it: Run's probe,
// so that a server whose device does not open (a name no device has, a
// software HCA that cannot join its fabric or link) says so before it
// listens, not once a client has come.
func ProbeDevice(provider, device string) error {
	c, _, err := Open(provider, device)
	if err != nil {
		return err
	}
	return c.Close()
}

// Emulated reports whether c is a device of the hardware provider that
// the emulated uverbs kernel stands behind (MLX5KIT_EMULATE=1): while the
// emulation is on, libibverbs lists only its devices.
func Emulated(c *ctx.Context) bool {
	return c.Kind() == ctx.KindHardware && emulate.Enabled()
}

// OnModel reports whether c's queues are executed by the software HCA,
// directly or through the emulated kernel: a busy-polling loop must then
// give its processor to the model's engine.
func OnModel(c *ctx.Context) bool {
	return c.Kind() == ctx.KindSoftware || Emulated(c)
}

// GIDSelector resolves the -gid-index flag: the entry index names when it
// is not negative, else the one MLX5KIT_GID_INDEX names, else none (the
// queue pair chooses one, ctx.ChooseGID).
func GIDSelector(index int) (ctx.GIDSelector, error) {
	if index > 255 {
		return ctx.GIDSelector{}, fmt.Errorf("GID index %d: want 0 to 255", index)
	}
	if index >= 0 {
		return ctx.GIDIndex(uint8(index)), nil
	}
	o, err := scenario.FromEnv()
	return o.GID, err
}

// FirstErr returns the first non-nil error.
func FirstErr(errs ...error) error {
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Setup is an opened device and the ends made on it.
type Setup struct {
	Context *ctx.Context
	What    string // the device, as Open describes it
	Ends    []*End
}

// OpenEnds opens the device (as Open) and makes one end per name on it
// as cfg says, each handed to wrap for the command's own type. It closes
// what it made if it fails.
func OpenEnds[E any](provider, device string, cfg EndConfig, wrap func(*End) E, names ...string) (*Setup, []E, error) {
	c, what, err := Open(provider, device)
	if err != nil {
		return nil, nil, err
	}
	s := &Setup{Context: c, What: what}
	ends := make([]E, 0, len(names))
	for _, name := range names {
		x, err := NewEnd(name, c, cfg)
		if err != nil {
			_ = s.Close()
			return nil, nil, err
		}
		s.Ends = append(s.Ends, x)
		ends = append(ends, wrap(x))
	}
	return s, ends, nil
}

// Close closes the ends, then the device.
func (s *Setup) Close() error {
	errs := make([]error, 0, len(s.Ends)+1)
	for i := len(s.Ends) - 1; i >= 0; i-- {
		errs = append(errs, s.Ends[i].Close())
	}
	return errors.Join(append(errs, s.Context.Close())...)
}
