package nilness

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
)

type poller struct{ n int }

func (p *poller) Poll() int { return p.n }

func TestIs(t *testing.T) {
	var p *poller
	var st fmt.Stringer
	var m map[int]int
	var s []byte
	var c chan int
	var f func()
	for name, v := range map[string]any{"nil": nil, "nil pointer": p, "nil map": m, "nil slice": s, "nil chan": c, "nil func": f} {
		require.True(t, Is(v), name)
	}
	require.True(t, Is(st), "nil interface")
	var poll interface{ Poll() int } = p
	require.True(t, Is(poll), "interface holding a nil pointer")
	for name, v := range map[string]any{"pointer": &poller{}, "int": 0, "struct": poller{}, "empty slice": []byte{}, "string": ""} {
		require.False(t, Is(v), name)
	}
}
