package scenario

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// EnvGIDIndex is the environment variable FromEnv reads for
// Options.GID: the local GID table entry used on RoCE.
const EnvGIDIndex = "MLX5KIT_GID_INDEX"

// DefaultTimeout bounds each wait for completions when Options.WaitTimeout is 0.
const DefaultTimeout = 10 * time.Second

// ErrSkip is returned (wrapped, with the reason) by a scenario that the
// device cannot run, such as DC on a device without DC support.
var ErrSkip = errors.New("scenario: not supported by the device")

// Options tune how a scenario runs.
type Options struct {
	// Port is the local port; 0 means the device's first ACTIVE port.
	Port uint8
	// GID selects the local GID table entry the queue pairs address each
	// other by on RoCE (on InfiniBand they go by LID); unset,
	// ctx.ChooseGID picks one.
	GID ctx.GIDSelector
	// Timeout bounds each wait for completions (0: DefaultTimeout).
	Timeout time.Duration
	// Progress, when set, is called before every poll while a scenario
	// waits: a software HCA in manual mode is stepped there.
	Progress func() error
}

// FromEnv returns Options with GID from MLX5KIT_GID_INDEX (a number from 0
// to 255; unset or empty leaves GID unset: ctx.ChooseGID picks one).
func FromEnv() (Options, error) {
	var o Options
	if s := os.Getenv(EnvGIDIndex); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 255 {
			return o, fmt.Errorf("scenario: %s=%q: want a GID index from 0 to 255", EnvGIDIndex, s)
		}
		o.GID = ctx.GIDIndex(uint8(n))
	}
	return o, nil
}

// Func is a scenario: it runs on c and returns nil when everything was as
// expected.
type Func func(c *ctx.Context, o Options) error

// Scenario is a named scenario.
type Scenario struct {
	// Name is a short name usable as a subtest name, e.g. "RCWrite".
	Name string
	// Run runs it.
	Run Func
}

// All returns every scenario, in a fixed order.
func All() []Scenario {
	return []Scenario{
		{"RCWrite", RCWrite},
		{"RCWriteImm", RCWriteImm},
		{"RCRead", RCRead},
		{"RCAtomics", RCAtomics},
		{"RCSendRecv", RCSendRecv},
		{"SRQ", SRQ},
		{"DC", DC},
		{"UD", UD},
		{"ErrorRemoteAccess", ErrorRemoteAccess},
		{"ErrorFlush", ErrorFlush},
	}
}
