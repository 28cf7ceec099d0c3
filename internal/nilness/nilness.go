// Package nilness tells whether a value passed as an interface is nil,
// also when the interface holds a nil pointer, map, slice, channel or
// function: a public function that takes an interface refuses such a
// value with an error instead of panicking at its first method call.
package nilness

import "reflect"

// Is reports whether v is nil or holds a nil pointer, map, slice, channel
// or function.
func Is(v any) bool {
	if v == nil {
		return true
	}
	switch r := reflect.ValueOf(v); r.Kind() {
	case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Chan, reflect.Func:
		return r.IsNil()
	}
	return false
}
