// Package perftestwire recognizes perftest's own TCP exchange, so that a
// tool or an endpoint exchange that meets it can say so instead of failing
// on a bad magic number or a timeout.
package perftestwire

import "strings"

// Version reports whether b, the first four bytes a peer sent, are the
// start of a version string as perftest's exchange begins with one ("6.06",
// NUL-padded to 16 bytes): a digit, a dot, and two digits or a digit and a
// NUL. It returns the version as far as those bytes go. The tools'
// parameters and the endpoint exchange begin with magic numbers of capital
// letters, which never match.
func Version(b []byte) (string, bool) {
	digit := func(c byte) bool { return c >= '0' && c <= '9' }
	if len(b) < 4 || !digit(b[0]) || b[1] != '.' || !digit(b[2]) || !digit(b[3]) && b[3] != 0 {
		return "", false
	}
	return strings.TrimRight(string(b[:4]), "\x00"), true
}
