package scenario

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"strconv"
	"time"

	"github.com/mlx5kit/mlx5kit/ctx"
)

// EnvGIDIndex is the environment variable FromEnv reads for
// Options.GIDIndex: the local GID table entry used on RoCE.
const EnvGIDIndex = "MLX5KIT_GID_INDEX"

// DefaultTimeout bounds each wait for completions when Options.Timeout is 0.
const DefaultTimeout = 10 * time.Second

// ErrSkip is returned (wrapped, with the reason) by a scenario that the
// device cannot run, such as DC on a device without DC support.
var ErrSkip = errors.New("scenario: not supported by the device")

// Options tune how a scenario runs.
type Options struct {
	// Port is the local port (0 means 1).
	Port uint8
	// GIDIndex is the local GID table entry the queue pairs address each
	// other by on RoCE (and on InfiniBand when the port has no LID). A
	// negative value picks one with PickGIDIndex.
	GIDIndex int
	// Timeout bounds each wait for completions (0: DefaultTimeout).
	Timeout time.Duration
	// Progress, when set, is called before every poll while a scenario
	// waits: a software HCA in manual mode is stepped there.
	Progress func() error
}

// FromEnv returns Options with GIDIndex from MLX5KIT_GID_INDEX (a number;
// unset or empty picks one, see PickGIDIndex).
func FromEnv() (Options, error) {
	o := Options{GIDIndex: -1}
	if s := os.Getenv(EnvGIDIndex); s != "" {
		n, err := strconv.Atoi(s)
		if err != nil || n < 0 || n > 255 {
			return o, fmt.Errorf("scenario: %s=%q: want a GID index from 0 to 255", EnvGIDIndex, s)
		}
		o.GIDIndex = n
	}
	return o, nil
}

// PickGIDIndex returns the GID table entry to address the port by: on an
// Ethernet (RoCE) port the first RoCE v2 GID that is an IPv4-mapped address,
// else the first RoCE v2 GID, else the first GID; on InfiniBand 0.
func PickGIDIndex(c *ctx.Context, port uint8) (uint8, error) {
	if port == 0 {
		port = 1
	}
	pa, err := c.QueryPort(port)
	if err != nil {
		return 0, fmt.Errorf("scenario: pick GID: %w", err)
	}
	if pa.LinkLayer != ctx.LinkLayerEthernet {
		return 0, nil
	}
	gids, err := c.QueryGIDs(port)
	if err != nil {
		return 0, fmt.Errorf("scenario: pick GID: %w", err)
	}
	best, rank := -1, 0
	for _, g := range gids {
		r := 1
		if g.Type == ctx.GIDTypeRoCEv2 {
			r = 2
			if netip.AddrFrom16(g.GID).Is4In6() {
				r = 3
			}
		}
		if r > rank {
			best, rank = g.Index, r
		}
	}
	if best < 0 || best > 255 {
		return 0, fmt.Errorf("scenario: pick GID: RoCE port %d of %s has no usable GID", port, c.DeviceName())
	}
	return uint8(best), nil
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
