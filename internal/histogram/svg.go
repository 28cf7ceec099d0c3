package histogram

import (
	"bufio"
	"fmt"
	"html"
	"io"
	"math"
)

// SVG geometry.
const (
	svgWidth  = 720
	svgHeight = 360
	svgLeft   = 60 // room for the count axis
	svgRight  = 20
	svgTop    = 50 // room for the title and the summary
	svgBottom = 75 // room for the value axis
)

// WriteSVG draws the histogram as an SVG bar chart: one bar per row of the
// text rendering (rowsPerOctave rows per power of two, so the value axis is
// logarithmic), bar heights on a logarithmic count axis so that the tail
// shows, and dashed lines at p50, p99 and p99.9. The title and the summary
// line head the picture.
func (h *Histogram) WriteSVG(w io.Writer, s Scale, title string) error {
	bw := bufio.NewWriter(w)
	p := func(format string, args ...any) { fmt.Fprintf(bw, format, args...) }
	p(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n",
		svgWidth, svgHeight, svgWidth, svgHeight)
	p(`<rect width="100%%" height="100%%" fill="white"/>` + "\n")
	p(`<text x="%d" y="18" font-size="14" font-weight="bold">%s</text>`+"\n", svgLeft, html.EscapeString(title))
	p(`<text x="%d" y="36">%s</text>`+"\n", svgLeft, html.EscapeString(h.Summary(s)))
	rows := h.rows()
	plotW := float64(svgWidth - svgLeft - svgRight)
	plotH := float64(svgHeight - svgTop - svgBottom)
	baseY := float64(svgHeight - svgBottom)
	p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="black"/>`+"\n", svgLeft, baseY, svgWidth-svgRight, baseY)
	p(`<line x1="%d" y1="%d" x2="%d" y2="%.1f" stroke="black"/>`+"\n", svgLeft, svgTop, svgLeft, baseY)
	if len(rows) > 0 {
		var peak uint64
		for _, r := range rows {
			peak = max(peak, r.count)
		}
		decades := math.Ceil(math.Log10(float64(peak) + 1))
		yOf := func(c float64) float64 { return baseY - plotH*math.Log10(c+1)/decades }
		for d := 0.0; d <= decades; d++ {
			c := math.Pow(10, d)
			y := yOf(c)
			if d == decades {
				y = yOf(c - 1) // the top of the axis
			}
			p(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/>`+"\n", svgLeft, y, svgWidth-svgRight, y)
			p(`<text x="%d" y="%.1f" text-anchor="end">%s</text>`+"\n", svgLeft-4, y+4, countLabel(c))
		}
		barW := plotW / float64(len(rows))
		// Label about ten rows on the value axis.
		every := max(1, len(rows)/10)
		for i, r := range rows {
			x := float64(svgLeft) + float64(i)*barW
			if r.count > 0 {
				y := yOf(float64(r.count))
				p(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="#4a78b5"><title>%s: %d</title></rect>`+"\n",
					x+0.5, y, math.Max(barW-1, 0.5), baseY-y, html.EscapeString(rangeLabel(r, s)), r.count)
			}
			if i%every == 0 {
				p(`<text x="%.1f" y="%.1f" text-anchor="end" transform="rotate(-40 %.1f %.1f)">%s</text>`+"\n",
					x+barW/2, baseY+14, x+barW/2, baseY+14, html.EscapeString(formatValue(s.apply(float64(r.low)))+s.Unit))
			}
		}
		// Percentile markers, placed within their row by value.
		for _, m := range []struct {
			name string
			p    float64
		}{{"p50", 50}, {"p99", 99}, {"p99.9", 99.9}} {
			v := h.Percentile(m.p)
			for i, r := range rows {
				if v < r.low || v > r.high {
					continue
				}
				frac := float64(v-r.low) / float64(r.high-r.low+1)
				x := float64(svgLeft) + (float64(i)+frac)*barW
				p(`<line x1="%.1f" y1="%d" x2="%.1f" y2="%.1f" stroke="#c0392b" stroke-dasharray="4 3"/>`+"\n", x, svgTop, x, baseY)
				p(`<text x="%.1f" y="%d" fill="#c0392b">%s</text>`+"\n", x+3, svgTop+10, m.name)
				break
			}
		}
	}
	p(`<text x="%d" y="%d" text-anchor="middle">%s</text>`+"\n", svgLeft+int(plotW/2), svgHeight-6, html.EscapeString("value ("+s.Unit+"), log scale; count, log scale"))
	p("</svg>\n")
	return bw.Flush()
}

func rangeLabel(r row, s Scale) string {
	return formatValue(s.apply(float64(r.low))) + "-" + formatValue(s.apply(float64(r.high))) + s.Unit
}

func countLabel(c float64) string {
	switch {
	case c >= 1e6:
		return fmt.Sprintf("%.0fM", c/1e6)
	case c >= 1e3:
		return fmt.Sprintf("%.0fk", c/1e3)
	}
	return fmt.Sprintf("%.0f", c)
}
