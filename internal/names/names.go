// Package names turns the values of the module's small enumerated types
// into their names through one table per type, in place of a hand-written
// switch per String method.
package names

import "strconv"

// Of returns table[v] when v indexes a non-empty entry of table, and
// otherwise typeName(v), e.g. "QPType(9)".
func Of[T ~uint8 | ~uint16 | ~uint32](v T, table []string, typeName string) string {
	if uint64(v) < uint64(len(table)) && table[v] != "" {
		return table[v]
	}
	return typeName + "(" + strconv.FormatUint(uint64(v), 10) + ")"
}
