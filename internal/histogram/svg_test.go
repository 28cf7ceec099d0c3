package histogram

import (
	"encoding/xml"
	"io"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// elements parses an SVG document and counts its elements by name.
func elements(t *testing.T, doc string) map[string]int {
	t.Helper()
	d := xml.NewDecoder(strings.NewReader(doc))
	n := map[string]int{}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return n
		}
		require.NoError(t, err, "the SVG must be well-formed XML")
		if se, ok := tok.(xml.StartElement); ok {
			n[se.Name.Local]++
		}
	}
}

func TestWriteSVG(t *testing.T) {
	var h Histogram
	for i := 0; i < 900; i++ {
		h.Record(1100 + uint64(i%50))
	}
	for i := 0; i < 100; i++ {
		h.Record(8000)
	}
	var b strings.Builder
	require.NoError(t, h.WriteSVG(&b, Scale{Factor: 1e-3, Unit: "µs"}, "round trip <RC>"))
	doc := b.String()
	n := elements(t, doc)
	require.Equal(t, 1, n["svg"])
	// A white background and one bar per non-empty row: the data fill two
	// rows (1100-1149 lies in the quarter-octave row 1024-1279, 8000 in
	// 7168-8191).
	require.Equal(t, 1+2, n["rect"])
	require.Contains(t, doc, "round trip &lt;RC&gt;", "the title is escaped")
	require.Contains(t, doc, ">p50<")
	require.Contains(t, doc, ">p99.9<")
	require.Contains(t, doc, h.Summary(Scale{Factor: 1e-3, Unit: "µs"}))
}

func TestWriteSVGEmpty(t *testing.T) {
	var h Histogram
	var b strings.Builder
	require.NoError(t, h.WriteSVG(&b, Scale{}, "empty"))
	n := elements(t, b.String())
	require.Equal(t, 1, n["rect"], "only the background")
	require.Contains(t, b.String(), "n=0")
}
