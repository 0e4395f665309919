package simulate

import (
	"encoding/csv"
	"fmt"
	"html"
	"io"
	"strconv"
	"text/tabwriter"
)

// WriteText writes a human-readable summary of r.
func WriteText(w io.Writer, r *Result) error {
	c := r.Config
	fmt.Fprintf(w, "%d nodes × %.0f writes/s, %d Zipf(%.2f) keys at %.0f/s (hottest %.0f/s), viral key %q at %.0f/s on node %d, %d s\n",
		c.Nodes, c.Capacity, c.Keys, c.ZipfS, r.BackgroundRate, r.HottestBackgroundKeyRate, c.ViralKey, c.ViralRate, r.ViralHomeNode, c.Seconds)
	fmt.Fprintf(w, "%d hashed labels on %d nodes all distinct: %.4f exact, %.4f Monte Carlo (%d trials); expected collisions %.3f exact, %.3f Monte Carlo\n",
		c.N, c.Nodes, r.PAllDistinctExact, r.PAllDistinctMonteCarlo, r.MonteCarloTrials, r.ExpectedCollisionsExact, r.ExpectedCollisionsMonteCarlo)
	fmt.Fprintf(w, "labels \"0\"..\"%d\" by real CRC16 slots, over %d key names: all distinct %.4f\n\n", c.N-1, r.MonteCarloTrials, r.PAllDistinctNaiveLabels)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "strategy\tn\tpeak util\tpeak node\ts over cap\tnode-s over cap\tcache writes/s\tread keys\tread nodes\tcollisions\tloss ms")
	for _, s := range r.Strategies {
		fmt.Fprintf(tw, "%s\t%d\t%.2f\t%d\t%d\t%d\t%.0f\t%d\t%d\t%d\t%.0f\n",
			s.Strategy, s.N, s.PeakUtilisation, s.PeakNode, s.SecondsOverCapacity, s.NodeSecondsOverCapacity,
			s.MeanCacheWritesPerSec, s.ReadKeys, s.ReadNodes, s.Collisions, s.LossWindowMS)
	}
	return tw.Flush()
}

// csvHeader is the first CSV row; one row per strategy follows.
var csvHeader = []string{"strategy", "n", "peak_utilisation", "peak_node", "peak_second",
	"seconds_over_capacity", "node_seconds_over_capacity", "mean_cache_writes_per_sec",
	"read_keys", "read_nodes", "collisions", "max_subcounters_per_node", "split_keys", "loss_window_ms"}

// WriteCSV writes one row per strategy, after a header row.
func WriteCSV(w io.Writer, r *Result) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	f := func(x float64) string { return strconv.FormatFloat(x, 'g', 6, 64) }
	i := strconv.Itoa
	for _, s := range r.Strategies {
		row := []string{string(s.Strategy), i(s.N), f(s.PeakUtilisation), i(s.PeakNode), i(s.PeakSecond),
			i(s.SecondsOverCapacity), i(s.NodeSecondsOverCapacity), f(s.MeanCacheWritesPerSec),
			i(s.ReadKeys), i(s.ReadNodes), i(s.Collisions), i(s.MaxSubCountersPerNode), i(s.SplitKeys), f(s.LossWindowMS)}
		if err := cw.Write(row); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}

// WriteSVG writes a bar chart of each strategy's peak utilisation, with a
// line at 100 % (capacity). Bars over capacity are red.
func WriteSVG(w io.Writer, r *Result) error {
	const (
		width, height = 640, 360
		left, right   = 60, 20
		top, bottom   = 40, 60
	)
	peak := 1.0
	for _, s := range r.Strategies {
		peak = max(peak, s.PeakUtilisation)
	}
	scaleMax := peak * 1.1
	plotH := float64(height - top - bottom)
	y := func(u float64) float64 { return float64(top) + plotH*(1-u/scaleMax) }
	n := max(1, len(r.Strategies))
	slot := float64(width-left-right) / float64(n)

	ew := &errWriter{w: w}
	ew.printf(`<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="12">`+"\n",
		width, height, width, height)
	ew.printf(`<rect width="%d" height="%d" fill="white"/>`+"\n", width, height)
	ew.printf(`<text x="%d" y="22" font-size="14">Peak node utilisation by strategy (%d nodes, viral %.0f/s, capacity %.0f/s)</text>`+"\n",
		left, r.Config.Nodes, r.Config.ViralRate, r.Config.Capacity)
	ew.printf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, top, left, height-bottom)
	ew.printf(`<line x1="%d" y1="%d" x2="%d" y2="%d" stroke="black"/>`+"\n", left, height-bottom, width-right, height-bottom)
	ew.printf(`<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#c00" stroke-dasharray="6 4"/>`+"\n", left, y(1), width-right, y(1))
	ew.printf(`<text x="%d" y="%.1f" text-anchor="end">100%%</text>`+"\n", left-4, y(1)+4)
	ew.printf(`<text x="%d" y="%.1f" text-anchor="end">0%%</text>`+"\n", left-4, y(0)+4)
	for i, s := range r.Strategies {
		x := float64(left) + slot*float64(i) + slot*0.15
		bw := slot * 0.7
		fill := "#4a7"
		if s.PeakUtilisation > 1 {
			fill = "#d44"
		}
		ew.printf(`<rect x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s: %.2f</title></rect>`+"\n",
			x, y(s.PeakUtilisation), bw, y(0)-y(s.PeakUtilisation), fill, html.EscapeString(string(s.Strategy)), s.PeakUtilisation)
		ew.printf(`<text x="%.1f" y="%.1f" text-anchor="middle">%.0f%%</text>`+"\n", x+bw/2, y(s.PeakUtilisation)-4, 100*s.PeakUtilisation)
		ew.printf(`<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x+bw/2, height-bottom+18, html.EscapeString(string(s.Strategy)))
	}
	ew.printf("</svg>\n")
	return ew.err
}

// errWriter keeps the first write error.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) printf(format string, args ...any) {
	if e.err == nil {
		_, e.err = fmt.Fprintf(e.w, format, args...)
	}
}
