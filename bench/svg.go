package bench

import (
	"errors"
	"fmt"
	"html"
	"io"
	"math"
	"slices"
	"strings"
)

// ErrNoChart is returned by WriteSVG for a report without a run to chart.
var ErrNoChart = errors.New("bench: nothing to chart (no unbuffered or buffered run with an achieved rate)")

// Chart geometry, in SVG user units.
const (
	svgW, svgH                 = 720, 400
	svgLeft, svgRight          = 80, 230
	svgTop, svgBottom          = 40, 60
	svgPlotW, svgPlotH float64 = svgW - svgLeft - svgRight, svgH - svgTop - svgBottom
)

// series styles, by mode.
var svgColor = map[Mode]string{Single: "#d62728", Sharded: "#1f77b4", Buffered: "#9467bd", Combined: "#2ca02c"}

// WriteSVG draws the achieved increments per second against N as an SVG
// chart: one line for sharded (with single as its N=1 point when sharded
// did not run at N=1) and one for combined, the offered rate as a dashed line, and,
// with a calibration, the capacity of the nodes the sub-counters use
// (ceiling × min(N, primaries)) as a dotted line. Buffered runs are single
// points at N=1. The x axis is logarithmic in N.
func (r *Report) WriteSVG(w io.Writer) error {
	type point struct{ n, y float64 }
	lines := map[Mode][]point{}
	var ns []float64
	maxY := r.OfferedPerSec
	shardedOne := slices.ContainsFunc(r.Runs, func(run Result) bool { return run.Mode == Sharded && run.N == 1 })
	for _, run := range r.Runs {
		y := run.AchievedPerSec
		if y <= 0 || (run.Mode == Single && shardedOne) {
			continue // sharded at N=1 is single
		}
		m := run.Mode
		if m == Single {
			m = Sharded
		}
		lines[m] = append(lines[m], point{float64(run.N), y})
		if !slices.Contains(ns, float64(run.N)) {
			ns = append(ns, float64(run.N))
		}
		maxY = max(maxY, y)
	}
	if len(ns) == 0 {
		return ErrNoChart
	}
	slices.Sort(ns)
	var capacity []point
	if c := r.Calibration; c != nil && c.IncrPerSec > 0 && len(r.Primaries) > 0 {
		for _, n := range ns {
			y := c.IncrPerSec * min(n, float64(len(r.Primaries)))
			capacity = append(capacity, point{n, y})
		}
		// The capacity line may leave the plot above; it is clipped.
		maxY = max(maxY, min(capacity[len(capacity)-1].y, 1.25*maxY))
	}
	yTop := niceCeil(maxY * 1.05)
	lo, hi := math.Log2(ns[0]), math.Log2(ns[len(ns)-1])
	x := func(n float64) float64 {
		if hi == lo {
			return svgLeft + svgPlotW/2
		}
		return svgLeft + (math.Log2(n)-lo)/(hi-lo)*svgPlotW
	}
	y := func(v float64) float64 { return svgTop + svgPlotH - min(v, yTop)/yTop*svgPlotH }

	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 %d %d" width="%d" height="%d" font-family="sans-serif" font-size="12">`+"\n", svgW, svgH, svgW, svgH)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="white"/>`+"\n", svgW, svgH)
	fmt.Fprintf(&b, `<defs><clipPath id="plot"><rect x="%d" y="%d" width="%.1f" height="%.1f"/></clipPath></defs>`+"\n", svgLeft, svgTop, svgPlotW, svgPlotH)
	title := "Achieved increments/s against N"
	if r.OfferedPerSec > 0 {
		title += fmt.Sprintf(", %s/s offered", si(r.OfferedPerSec))
	}
	fmt.Fprintf(&b, `<text x="%d" y="22" font-size="14" font-weight="bold">%s</text>`+"\n", svgLeft, html.EscapeString(title))
	// Axes, grid and ticks.
	for i := 0; i <= 4; i++ {
		v := yTop * float64(i) / 4
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" stroke="#ddd"/>`+"\n", svgLeft, svgLeft+svgPlotW, y(v), y(v))
		fmt.Fprintf(&b, `<text x="%d" y="%.1f" text-anchor="end" dominant-baseline="middle">%s</text>`+"\n", svgLeft-6, y(v), si(v))
	}
	for _, n := range ns {
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%.1f" stroke="#ddd"/>`+"\n", x(n), x(n), svgTop, svgTop+svgPlotH)
		fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle">%g</text>`+"\n", x(n), svgTop+svgPlotH+16, n)
	}
	fmt.Fprintf(&b, `<text x="%.1f" y="%d" text-anchor="middle">N (sub-counters)</text>`+"\n", svgLeft+svgPlotW/2, svgH-18)
	fmt.Fprintf(&b, `<text transform="translate(18 %.1f) rotate(-90)" text-anchor="middle">increments/s</text>`+"\n", svgTop+svgPlotH/2)
	fmt.Fprintf(&b, `<rect x="%d" y="%d" width="%.1f" height="%.1f" fill="none" stroke="#444"/>`+"\n", svgLeft, svgTop, svgPlotW, svgPlotH)

	legendY := svgTop + 6
	legend := func(style, label string) {
		lx := svgLeft + svgPlotW + 14
		fmt.Fprintf(&b, `<line x1="%.1f" x2="%.1f" y1="%d" y2="%d" %s/>`+"\n", lx, lx+22, legendY, legendY, style)
		fmt.Fprintf(&b, `<text x="%.1f" y="%d" dominant-baseline="middle">%s</text>`+"\n", lx+28, legendY, html.EscapeString(label))
		legendY += 20
	}
	offeredStyle := `stroke="#555" stroke-width="1.5" stroke-dasharray="6 4"`
	if r.OfferedPerSec > 0 {
		legend(offeredStyle, "offered")
	}
	if len(capacity) > 0 {
		style := `stroke="#ff7f0e" stroke-width="1.5" stroke-dasharray="2 3" fill="none"`
		b.WriteString(`<polyline points="`)
		for _, p := range capacity {
			fmt.Fprintf(&b, "%.1f,%.1f ", x(p.n), y(p.y))
		}
		fmt.Fprintf(&b, `" %s clip-path="url(#plot)"/>`+"\n", style)
		legend(style, "node ceiling × nodes used")
	}
	for _, m := range []Mode{Sharded, Combined, Buffered} {
		pts := lines[m]
		if len(pts) == 0 {
			continue
		}
		slices.SortFunc(pts, func(a, b point) int { return int(a.n - b.n) })
		style := fmt.Sprintf(`stroke="%s" stroke-width="2.5" fill="none"`, svgColor[m])
		if len(pts) > 1 {
			b.WriteString(`<polyline points="`)
			for _, p := range pts {
				fmt.Fprintf(&b, "%.1f,%.1f ", x(p.n), y(p.y))
			}
			fmt.Fprintf(&b, `" %s/>`+"\n", style)
		}
		// Unbuffered values are labelled below their points, buffered ones
		// above, so that the two lines' labels do not overlap where they meet.
		dy := -9.0
		if m == Sharded {
			dy = 18
		}
		for _, p := range pts {
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="4" fill="%s"/>`+"\n", x(p.n), y(p.y), svgColor[m])
			fmt.Fprintf(&b, `<text x="%.1f" y="%.1f" text-anchor="middle" fill="%s">%s</text>`+"\n", x(p.n), y(p.y)+dy, svgColor[m], si(p.y))
		}
		name := string(m) + " achieved"
		if m == Sharded {
			name = "single / sharded achieved"
		}
		legend(style, name)
	}
	if r.OfferedPerSec > 0 {
		fmt.Fprintf(&b, `<line x1="%d" x2="%.1f" y1="%.1f" y2="%.1f" %s/>`+"\n", svgLeft, svgLeft+svgPlotW, y(r.OfferedPerSec), y(r.OfferedPerSec), offeredStyle)
	}
	if c := r.Calibration; c != nil {
		fmt.Fprintf(&b, `<text x="%d" y="%d" font-size="11" fill="#555">one node's single-key ceiling: %s/s; %d primaries</text>`+"\n",
			svgLeft, svgH-4, si(c.IncrPerSec), len(r.Primaries))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(w, b.String())
	return err
}

// niceCeil rounds v up to 1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6 or 8 times a
// power of ten (each divides into four round ticks).
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 1.2, 1.6, 2, 2.4, 3, 4, 5, 6, 8, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

// si writes v with a k or M suffix: 5400 is "5.4k".
func si(v float64) string {
	switch {
	case v >= 1e6:
		return trimZero(fmt.Sprintf("%.2f", v/1e6)) + "M"
	case v >= 1e3:
		return trimZero(fmt.Sprintf("%.1f", v/1e3)) + "k"
	}
	return fmt.Sprintf("%.0f", v)
}

func trimZero(s string) string {
	if strings.Contains(s, ".") {
		s = strings.TrimRight(strings.TrimRight(s, "0"), ".")
	}
	return s
}
