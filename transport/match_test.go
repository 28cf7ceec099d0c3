package transport_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/mlx5kit/mlx5kit/transport"
)

// TestMatchNames checks the names of the ways a completion is matched,
// and that a Completion reports its match in the Match field.
func TestMatchNames(t *testing.T) {
	want := map[transport.Match]string{
		transport.MatchOK:         "OK",
		transport.MatchError:      "ERROR",
		transport.MatchUnknownQPN: "UNKNOWN_QPN",
		transport.MatchUnmatched:  "UNMATCHED",
		transport.MatchUnexpected: "UNEXPECTED",
		transport.Match(9):        "Match(9)",
	}
	for m, name := range want {
		require.Equal(t, name, m.String())
	}
	c := transport.Completion{Match: transport.MatchUnmatched}
	require.True(t, c.IsError())
	c.Match = transport.MatchOK
	require.False(t, c.IsError())
	require.NoError(t, c.Err())
}
