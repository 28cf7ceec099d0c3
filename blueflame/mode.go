package blueflame

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/mlx5kit/mlx5kit/internal/names"
)

// Mode is an implementation of the 64-byte chunk copy to the BlueFlame
// register.
type Mode uint8

// Copy modes. Which ones exist depends on the architecture and the CPU; see
// AvailableModes.
const (
	// ModeGeneric copies with ordinary Go 8-byte stores between calls to
	// the barrier functions. It exists on every architecture.
	ModeGeneric Mode = iota + 1
	// ModeStore8 (amd64) copies each chunk with eight ascending 8-byte
	// MOVQ stores, like rdma-core's mmio_memcpy_x64 on x86-64.
	ModeStore8
	// ModeAVX512 (amd64 with AVX512F) copies each chunk with one 64-byte
	// VMOVDQU64 store, so the chunk leaves the core as one write.
	ModeAVX512
	// ModeSTP (arm64) copies each chunk with four ascending 16-byte STP
	// pair stores.
	ModeSTP
	// ModeNEON (arm64) copies each chunk with one VST1 of four 16-byte
	// vector registers, the instruction behind rdma-core's vst4q_u64 copy.
	ModeNEON
)

var modeNames = [...]string{
	ModeGeneric: "generic",
	ModeStore8:  "store8",
	ModeAVX512:  "avx512",
	ModeSTP:     "stp",
	ModeNEON:    "neon",
}

// String returns the mode's name as MLX5KIT_BLUEFLAME spells it.
func (m Mode) String() string { return names.Of(m, modeNames[:], "Mode") }

// ParseMode returns the mode with the given name ("generic", "store8",
// "avx512", "stp", "neon"), whether or not this machine can run it.
func ParseMode(name string) (Mode, error) {
	for m, n := range modeNames {
		if n != "" && n == name {
			return Mode(m), nil
		}
	}
	return 0, fmt.Errorf("blueflame: parse mode %q: %w", name, ErrUnknownMode)
}

// EnvMode is the environment variable that forces the copy mode at start.
const EnvMode = "MLX5KIT_BLUEFLAME"

var (
	// ErrUnknownMode is returned for a mode name or value this package does
	// not define.
	ErrUnknownMode = errors.New("unknown BlueFlame copy mode")
	// ErrModeUnavailable is returned for a mode that this architecture or
	// CPU cannot run.
	ErrModeUnavailable = errors.New("BlueFlame copy mode not available on this machine")
)

// activeMode is read on every post (by post's assembly); it changes only at
// start and through SetMode.
var activeMode Mode

// AvailableModes returns the modes this machine can run, the default (the
// one chosen when MLX5KIT_BLUEFLAME is unset) first.
func AvailableModes() []Mode { return slices.Clone(availableModes) }

// CurrentMode returns the copy mode in use.
func CurrentMode() Mode { return activeMode }

// SetMode switches the copy mode for all registers. It is meant for tests and
// benchmarks and must not run concurrently with a post.
func SetMode(m Mode) error {
	if int(m) >= len(modeNames) || modeNames[m] == "" {
		return fmt.Errorf("blueflame: set mode %d: %w", uint8(m), ErrUnknownMode)
	}
	if !slices.Contains(availableModes, m) {
		return fmt.Errorf("blueflame: set mode %s: %w", m, ErrModeUnavailable)
	}
	activeMode = m
	return nil
}

// modeFromEnv returns the mode that the value of MLX5KIT_BLUEFLAME selects
// at start: the default for an empty value, the named mode when this machine
// can run it, an error otherwise.
func modeFromEnv(name string) (Mode, error) {
	if name == "" {
		return availableModes[0], nil
	}
	m, err := ParseMode(name)
	if err != nil {
		return 0, err
	}
	if !slices.Contains(availableModes, m) {
		return 0, fmt.Errorf("blueflame: set mode %s: %w", m, ErrModeUnavailable)
	}
	return m, nil
}

func init() {
	name := os.Getenv(EnvMode)
	m, err := modeFromEnv(name)
	if err != nil {
		panic(fmt.Sprintf("%s=%s: %v", EnvMode, name, err))
	}
	activeMode = m
}
