package perftestwire

import (
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
