package blueflame

import (
	"errors"
	"fmt"
	"os"
	"slices"

	"github.com/mlx5kit/mlx5kit/internal/names"
)

// copyMode is an implementation of the 64-byte chunk copy to the BlueFlame
// register.
type copyMode uint8

// Copy modes. Which ones exist depends on the architecture and the CPU; see
// availableModes.
const (
	// modeGeneric copies with ordinary Go 8-byte stores between calls to
	// the barrier functions. It exists on every architecture.
	modeGeneric copyMode = iota + 1
	// modeStore8 (amd64) copies each chunk with eight ascending 8-byte
	// MOVQ stores, like rdma-core's mmio_memcpy_x64 on x86-64.
	modeStore8
	// modeAVX512 (amd64 with AVX512F) copies each chunk with one 64-byte
	// VMOVDQU64 store, so the chunk leaves the core as one write.
	modeAVX512
	// modeSTP (arm64) copies each chunk with four ascending 16-byte STP
	// pair stores.
	modeSTP
	// modeNEON (arm64) copies each chunk with one VST1 (ST1) of four
	// 16-byte vector registers. rdma-core's NEON copy is vld4q_u64 and
	// vst4q_u64, that is LD4 and ST4: another single 64-byte store
	// instruction that leaves the same bytes in the register.
	modeNEON
)

var modeNames = [...]string{
	modeGeneric: "generic",
	modeStore8:  "store8",
	modeAVX512:  "avx512",
	modeSTP:     "stp",
	modeNEON:    "neon",
}

// String returns the mode's name as MLX5KIT_BLUEFLAME spells it.
func (m copyMode) String() string { return names.Of(m, modeNames[:], "Mode") }

// parseMode returns the mode with the given name ("generic", "store8",
// "avx512", "stp", "neon"), whether or not this machine can run it.
func parseMode(name string) (copyMode, error) {
	for m, n := range modeNames {
		if n != "" && n == name {
			return copyMode(m), nil
		}
	}
	return 0, fmt.Errorf("blueflame: parse mode %q: %w", name, errUnknownMode)
}

// envMode is the environment variable that forces the copy mode at start.
const envMode = "MLX5KIT_BLUEFLAME"

var (
	// errUnknownMode is returned for a mode name or value this package does
	// not define.
	errUnknownMode = errors.New("unknown BlueFlame copy mode")
	// errModeUnavailable is returned for a mode that this architecture or
	// CPU cannot run.
	errModeUnavailable = errors.New("BlueFlame copy mode not available on this machine")
)

// activeMode is read on every post (by post's assembly); it changes only at
// start and through setMode.
var activeMode copyMode

// currentMode returns the copy mode in use.
func currentMode() copyMode { return activeMode }

// setMode switches the copy mode for all registers. It is meant for tests and
// benchmarks and must not run concurrently with a post.
func setMode(m copyMode) error {
	if int(m) >= len(modeNames) || modeNames[m] == "" {
		return fmt.Errorf("blueflame: set mode %d: %w", uint8(m), errUnknownMode)
	}
	if !slices.Contains(availableModes, m) {
		return fmt.Errorf("blueflame: set mode %s: %w", m, errModeUnavailable)
	}
	activeMode = m
	return nil
}

// modeFromEnv returns the mode that the value of MLX5KIT_BLUEFLAME selects
// at start: the default for an empty value, the named mode when this machine
// can run it, an error otherwise.
func modeFromEnv(name string) (copyMode, error) {
	if name == "" {
		return availableModes[0], nil
	}
	m, err := parseMode(name)
	if err != nil {
		return 0, err
	}
	if !slices.Contains(availableModes, m) {
		return 0, fmt.Errorf("blueflame: set mode %s: %w", m, errModeUnavailable)
	}
	return m, nil
}

func init() {
	name := os.Getenv(envMode)
	m, err := modeFromEnv(name)
	if err != nil {
		panic(fmt.Sprintf("%s=%s: %v", envMode, name, err))
	}
	activeMode = m
}
