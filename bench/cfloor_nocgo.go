//go:build !cgo

package bench

import "errors"

// errNoCgo is returned by the C baselines in builds without cgo.
var errNoCgo = errors.New("bench: the C baselines need cgo (CGO_ENABLED=1 and a C compiler)")

// haveCFloor reports whether the C baselines are built in: not without cgo.
const haveCFloor = false

// cFloor stands in for the C floor in builds without cgo; newCFloor fails.
type cFloor struct{}

func newCFloor(*queueMemory) (*cFloor, error) { return nil, errNoCgo }

func (*cFloor) free()                              {}
func (*cFloor) run(uint64) (uint64, error)         { return 0, errNoCgo }
func (*cFloor) runPostCall(uint64) (uint64, error) { return 0, errNoCgo }
func (*cFloor) post(uint64) error                  { return errNoCgo }
func (*cFloor) poll() (uint64, error)              { return 0, errNoCgo }
func (*cFloor) completeInC()                       {}
func (*cFloor) producerIndex() uint32              { return 0 }
func (*cFloor) consumerIndex() uint32              { return 0 }
func (*cFloor) setLocalAddress(uint64)             {}
