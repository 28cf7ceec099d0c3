package perftestwire

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestVersion(t *testing.T) {
	for in, want := range map[string]string{"6.06": "6.06", "5.7\x00": "5.7", "9.99": "9.99"} {
		v, ok := Version([]byte(in))
		require.True(t, ok, "%q", in)
		require.Equal(t, want, v)
	}
	for _, in := range []string{"MXPN", "MXPF", "6x06", "6.0x", ".606", "\x00\x00\x00\x00", "6.0"} {
		_, ok := Version([]byte(in))
		require.False(t, ok, "%q", in)
	}
}

// TestParseVersion: perftest's version field is digits, a dot and digits
// up to the first NUL; what strconv.ParseFloat takes besides ("NaN",
// "Inf", "1e3", "0x1p9", "+6.06", "9_9") is refused with ErrVersion.
func TestParseVersion(t *testing.T) {
	field := func(s string) []byte {
		b := make([]byte, 16)
		copy(b, s)
		return b
	}
	for in, want := range map[string]float64{"6.06": 6.06, "5.70": 5.7, "10.1": 10.1, "6.06\x00junk": 6.06} {
		s, v, err := ParseVersion(field(in))
		require.NoError(t, err, "%q", in)
		require.Equal(t, want, v, "%q", in)
		require.Equal(t, strings.TrimSuffix(strings.SplitN(in, "\x00", 2)[0], "\x00"), s)
	}
	for _, in := range []string{"NaN", "Inf", "+Inf", "1e3", "0x1p9", "+6.06", "-6.06", "9_9", "6.0_6", "6", "6.", ".06", "", " 6.06", "6.06 ", "MXPF", "6.06e1"} {
		_, _, err := ParseVersion(field(in))
		require.ErrorIs(t, err, ErrVersion, "%q", in)
	}
	_, _, err := ParseVersion([]byte("1234567890.12345")) // no NUL at all
	require.NoError(t, err)
}

// FuzzParseVersion feeds arbitrary version fields to ParseVersion: it must
// never panic, every failure must match ErrVersion, and a version it
// accepts is finite, not negative, the string up to the first NUL, and
// digits, a dot and digits.
func FuzzParseVersion(f *testing.F) {
	for _, s := range []string{"6.06\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00", "5.70", "NaN", "0x1p9", "1e308", "9" + strings.Repeat("9", 400) + ".9"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		s, v, err := ParseVersion(b)
		if err != nil {
			if !errors.Is(err, ErrVersion) {
				t.Fatalf("%q: error %v does not match ErrVersion", b, err)
			}
			return
		}
		if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
			t.Fatalf("%q read as %v", b, v)
		}
		if want, _, _ := strings.Cut(string(b), "\x00"); s != want {
			t.Fatalf("%q read as string %q, want %q", b, s, want)
		}
		whole, frac, ok := strings.Cut(s, ".")
		if !ok || strings.Trim(whole, "0123456789") != "" || strings.Trim(frac, "0123456789") != "" || whole == "" || frac == "" {
			t.Fatalf("%q accepted as version %q", b, s)
		}
	})
}
