package perftool

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// testOptions records what each option was given.
func testOptions(got *[]string) []Option {
	set := func(name, value string) error {
		*got = append(*got, name+"="+value)
		return nil
	}
	return []Option{
		{Short: 's', Long: []string{"size"}, Value: true, Set: set},
		{Short: 'a', Long: []string{"all"}, Set: set},
		{Short: 'F', Long: []string{"CPU-freq"}, Set: set},
		{Long: []string{"report_gbits"}, Set: set},
		{Short: 'R', Long: []string{"rdma_cm"}, Refuse: "(rdma_cm) is not supported"},
		{Short: 'n', Long: []string{"iters"}, Value: true, Set: func(name, value string) error {
			if value == "0" {
				return errors.New("want at least 1")
			}
			return set(name, value)
		}},
	}
}

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args      []string
		want, pos []string
	}{
		{[]string{"-s", "8"}, []string{"-s=8"}, nil},
		{[]string{"-s8"}, []string{"-s=8"}, nil},
		{[]string{"-s=8"}, []string{"-s=8"}, nil},
		{[]string{"--size", "8"}, []string{"--size=8"}, nil},
		{[]string{"--size=8"}, []string{"--size=8"}, nil},
		{[]string{"-size", "8"}, []string{"-size=8"}, nil},
		{[]string{"-size=8"}, []string{"-size=8"}, nil},
		{[]string{"-a"}, []string{"-a="}, nil},
		{[]string{"--all"}, []string{"--all="}, nil},
		{[]string{"-aF"}, []string{"-a=", "-F="}, nil},
		{[]string{"-aFs", "16"}, []string{"-a=", "-F=", "-s=16"}, nil},
		{[]string{"-aFs16"}, []string{"-a=", "-F=", "-s=16"}, nil},
		{[]string{"--report_gbits"}, []string{"--report_gbits="}, nil},
		{[]string{"host", "-a"}, []string{"-a="}, []string{"host"}},
		{[]string{"-a", "host", "-s", "4"}, []string{"-a=", "-s=4"}, []string{"host"}},
		{[]string{"-s", "4", "host"}, []string{"-s=4"}, []string{"host"}},
		{[]string{"-s", "-4"}, []string{"-s=-4"}, nil}, // the value is taken whatever it looks like
		{[]string{"-a", "--", "-s"}, []string{"-a="}, []string{"-s"}},
		{[]string{"-"}, nil, []string{"-"}},
		// getopt's rule: a one-letter flag that takes a value takes the
		// rest of its argument, so -nosuch is -n osuch.
		{[]string{"-nosuch"}, []string{"-n=osuch"}, nil},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var got []string
			pos, err := ParseArgs(tc.args, testOptions(&got))
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
			require.Equal(t, tc.pos, pos)
		})
	}
}

func TestParseArgsRefuses(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-X"}, "unknown flag -X"},
		{[]string{"-aX"}, "unknown flag -X"},
		{[]string{"-Xnosuch"}, "unknown flag -Xnosuch"},
		{[]string{"--nosuch"}, "unknown flag --nosuch"},
		{[]string{"--nosuch=3"}, "unknown flag --nosuch"},
		{[]string{"-s"}, "-s needs a value"},
		{[]string{"--size"}, "--size needs a value"},
		{[]string{"--all=1"}, "--all takes no value"},
		{[]string{"-R"}, "-R (rdma_cm) is not supported"},
		{[]string{"--rdma_cm"}, "--rdma_cm (rdma_cm) is not supported"},
		{[]string{"-n", "0"}, "-n: want at least 1"},
		{[]string{"--iters=0"}, "--iters: want at least 1"},
		{[]string{"-A"}, "unknown flag -A"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var got []string
			_, err := ParseArgs(tc.args, testOptions(&got))
			require.ErrorIs(t, err, ErrUsage)
			require.Contains(t, err.Error(), tc.want)
		})
	}
	// A one-letter name is not a long name with one dash: "-F" is the
	// short flag even though no long flag "F" exists, and a long name of
	// one letter is only reached with two dashes.
	var got []string
	opts := append(testOptions(&got), Option{Long: []string{"x"}, Set: func(n, v string) error { got = append(got, fmt.Sprint(n)); return nil }})
	_, err := ParseArgs([]string{"--x"}, opts)
	require.NoError(t, err)
	_, err = ParseArgs([]string{"-x"}, opts)
	require.ErrorIs(t, err, ErrUsage)
	require.Equal(t, []string{"--x"}, got)
}
