//go:build !cgo || !linux

package verbs

// ArmLimit returns ErrUnavailable.
func (s *SharedReceiveQueue) ArmLimit(limit uint32) error { return ErrUnavailable }

// Limit returns ErrUnavailable.
func (s *SharedReceiveQueue) Limit() (uint32, error) { return 0, ErrUnavailable }
