// Package fieldcheck checks configuration values against the width of the
// verbs or PRM fields they go into, so that ctx and the transports refuse a
// value the provider or the device would otherwise mask silently, with one
// message shape.
package fieldcheck

import "fmt"

// Field is a value and the range of the field it goes into.
type Field struct {
	Name     string
	Value    uint64
	Min, Max uint64
}

// Check returns an error naming the first field outside its range, its
// value and the range, wrapping sentinel; nil when every field fits.
func Check(sentinel error, fields ...Field) error {
	for _, f := range fields {
		if f.Value < f.Min || f.Value > f.Max {
			return fmt.Errorf("%s %d out of range %d..%d: %w", f.Name, f.Value, f.Min, f.Max, sentinel)
		}
	}
	return nil
}
