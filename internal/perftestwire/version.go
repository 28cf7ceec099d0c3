// Package perftestwire recognizes perftest's own TCP exchange, so that a
// tool or an endpoint exchange that meets it can say so instead of failing
// on a bad magic number or a timeout, and reads the version that exchange
// begins with.
package perftestwire

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
)

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

// ErrVersion is what ParseVersion's error matches.
var ErrVersion = errors.New("not a perftest version")

// ParseVersion reads the version field of perftest's exchange (its
// MAX_VERSION bytes: the version string, NUL-padded) and returns the
// string, up to the first NUL, and its value: the string must be digits,
// a dot and digits ("6.06", "5.70"). Anything else, "NaN", "Inf", a sign,
// an exponent or a hexadecimal float included, which strconv.ParseFloat
// would take, is an error matching ErrVersion that quotes the string.
func ParseVersion(b []byte) (string, float64, error) {
	s := string(b)
	if i := strings.IndexByte(s, 0); i >= 0 {
		s = s[:i]
	}
	whole, frac, dot := strings.Cut(s, ".")
	if !dot || !digits(whole) || !digits(frac) {
		return s, 0, fmt.Errorf("%q: %w (want digits, a dot and digits, as \"6.06\")", s, ErrVersion)
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return s, 0, fmt.Errorf("%q: %w: %w", s, ErrVersion, err)
	}
	return s, v, nil
}

// digits reports whether s is one or more decimal digits.
func digits(s string) bool {
	if s == "" {
		return false
	}
	for i := range len(s) {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
