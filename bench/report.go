package bench

import (
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
)

// Report is the outcome of Run.
type Report struct {
	// Backend is "redis" or "embedded".
	Backend string `json:"backend"`
	// Primaries are the nodes whose writes were counted.
	Primaries []string `json:"primaries"`
	// Rounds is how many rounds each mode ran in.
	Rounds int `json:"rounds"`
	// Runs holds one entry per mode, its rounds summed.
	Runs []Result `json:"runs"`
	// RatioBase is the mode the ratios compare with; empty with one mode.
	RatioBase Mode `json:"ratio_base,omitempty"`
	// Ratios compares each mode with RatioBase; nil with one mode.
	Ratios map[Mode]Ratio `json:"ratios,omitempty"`
}

// Result is what one mode achieved over its rounds.
type Result struct {
	// Mode, N, Procs, Workers and TargetRate (0: unpaced) describe the load.
	Mode       Mode    `json:"mode"`
	N          int     `json:"n"`
	Procs      int     `json:"procs"`
	Workers    int     `json:"workers"`
	TargetRate float64 `json:"target_rate"`
	// Key is the key written (in every round).
	Key string `json:"key"`
	// Seconds is the time spent incrementing (load windows only).
	Seconds float64 `json:"seconds"`
	// Sent counts acknowledged Incr calls; Errors the failed ones.
	Sent   int64 `json:"sent"`
	Errors int64 `json:"errors"`
	// Total is the value read back after the last round's instances were
	// closed; Exact says that after every round the value had grown by
	// exactly that round's acknowledged increments (so Total == Sent).
	Total int64 `json:"total"`
	Exact bool  `json:"exact"`
	// IncrPerSec is Sent / Seconds.
	IncrPerSec float64 `json:"incr_per_sec"`
	// CacheWrites counts write commands received by the primaries during
	// the load windows and the closes that followed; DrainWrites is the
	// part sent by the closes.
	CacheWrites int64 `json:"cache_writes"`
	DrainWrites int64 `json:"drain_writes"`
	// CacheWritesPerSec is the write rate during the load windows.
	CacheWritesPerSec float64 `json:"cache_writes_per_sec"`
	// CacheWritesPerIncr is CacheWrites / Sent.
	CacheWritesPerIncr float64 `json:"cache_writes_per_incr"`
	// WritesByNode splits CacheWrites by primary.
	WritesByNode map[string]int64 `json:"writes_by_node"`
	// MaxNodeShare is the largest node's part of CacheWrites.
	MaxNodeShare float64 `json:"max_node_share"`
	// IdealNodeShare is 1/primaries: the share of a write load spread
	// evenly over every primary. One key (N=1) cannot do better than 1, N
	// sub-counters no better than 1/min(N, primaries).
	IdealNodeShare float64 `json:"ideal_node_share"`
	// PlacementNodeShare is the largest node's part of the sub-counters
	// (of the last round's key): the share that uniform writes over the
	// labels are expected to give.
	PlacementNodeShare float64 `json:"placement_node_share"`
	// LabelsByNode counts the last round's sub-counters per primary.
	LabelsByNode map[string]int `json:"labels_by_node"`
	// ReadCached, ReadUncached and ReadRaw are sampled read latencies
	// during the load: the summed read with and without the read cache,
	// and the N sub-keys read one GET at a time.
	ReadCached   Latency `json:"read_cached"`
	ReadUncached Latency `json:"read_uncached"`
	ReadRaw      Latency `json:"read_raw"`
	// ReadErrors counts sampled reads that failed.
	ReadErrors int `json:"read_errors"`
	// Problems lists errors seen (last Incr error, close errors, ...).
	Problems []string `json:"problems,omitempty"`
}

// Ratio compares a mode with the base mode: the mode's figure divided by
// the base's.
type Ratio struct {
	IncrPerSec         float64 `json:"incr_per_sec"`
	CacheWritesPerIncr float64 `json:"cache_writes_per_incr"`
	MaxNodeShare       float64 `json:"max_node_share"`
}

// aggregate sums the rounds of one mode into a Run.
func aggregate(s *settings, m Mode, rs []*round) Result {
	run := Result{
		Mode: m, N: m.n(s.N), Procs: s.Procs, Workers: s.workers(m), TargetRate: s.Rate,
		Exact: true, WritesByNode: map[string]int64{},
	}
	var elapsed time.Duration
	var windowWrites int64
	var reads readSamples
	for _, r := range rs {
		run.Key = r.key
		run.Sent += r.sent
		run.Errors += r.failed
		run.Total = r.total
		if r.total-r.base != r.sent {
			run.Exact = false
		}
		elapsed += r.elapsed
		for n, v := range r.window {
			run.WritesByNode[n] += v
			windowWrites += v
		}
		for n, v := range r.drain {
			run.WritesByNode[n] += v
			run.DrainWrites += v
		}
		reads.merge(r.reads)
		run.ReadErrors += r.readErrs
		if r.lastErr != nil {
			run.Problems = append(run.Problems, "incr: "+r.lastErr.Error())
		}
		if r.closeErr != nil {
			run.Problems = append(run.Problems, "close: "+r.closeErr.Error())
		}
		if r.readErrExample != nil {
			run.Problems = append(run.Problems, "read: "+r.readErrExample.Error())
		}
	}
	run.CacheWrites = windowWrites + run.DrainWrites
	run.Seconds = elapsed.Seconds()
	if run.Seconds > 0 {
		run.IncrPerSec = float64(run.Sent) / run.Seconds
		run.CacheWritesPerSec = float64(windowWrites) / run.Seconds
	}
	if run.Sent > 0 {
		run.CacheWritesPerIncr = float64(run.CacheWrites) / float64(run.Sent)
	}
	var top int64
	for _, v := range run.WritesByNode {
		top = max(top, v)
	}
	if run.CacheWrites > 0 {
		run.MaxNodeShare = float64(top) / float64(run.CacheWrites)
	}
	if last := rs[len(rs)-1]; len(last.primaries) > 0 {
		run.IdealNodeShare = 1 / float64(len(last.primaries))
		run.LabelsByNode = last.labelsByNode
		most := 0
		for _, c := range last.labelsByNode {
			most = max(most, c)
		}
		run.PlacementNodeShare = float64(most) / float64(run.N)
	}
	run.ReadCached = latency(reads.cached)
	run.ReadUncached = latency(reads.uncached)
	run.ReadRaw = latency(reads.raw)
	return run
}

// ratios compares every run with the base run (single when present, else
// the first).
func ratios(runs []Result) (Mode, map[Mode]Ratio) {
	if len(runs) < 2 {
		return "", nil
	}
	base := runs[0]
	for _, r := range runs {
		if r.Mode == Single {
			base = r
		}
	}
	out := make(map[Mode]Ratio, len(runs))
	for _, r := range runs {
		out[r.Mode] = Ratio{
			IncrPerSec:         div(r.IncrPerSec, base.IncrPerSec),
			CacheWritesPerIncr: div(r.CacheWritesPerIncr, base.CacheWritesPerIncr),
			MaxNodeShare:       div(r.MaxNodeShare, base.MaxNodeShare),
		}
	}
	return base.Mode, out
}

// div returns a/b to 4 significant digits, or 0 when b is 0 (JSON has no
// infinity).
func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	f, _ := strconv.ParseFloat(strconv.FormatFloat(a/b, 'g', 4, 64), 64)
	return f
}

// WriteText prints the report as a table.
func (r *Report) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "mode\tn\tprocs\tincr/s\tsent\ttotal\texact\twrites/s\twrites/incr\tmax node\tideal\tplaced\tcached p50/p99 ms\tuncached p50/p99 ms\traw p50/p99 ms\t\n")
	for _, run := range r.Runs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%d\t%d\t%v\t%.1f\t%.3g\t%.3f\t%.3f\t%.3f\t%s\t%s\t%s\t\n",
			run.Mode, run.N, run.Procs, run.IncrPerSec, run.Sent, run.Total, run.Exact,
			run.CacheWritesPerSec, run.CacheWritesPerIncr, run.MaxNodeShare, run.IdealNodeShare,
			run.PlacementNodeShare, lat(run.ReadCached), lat(run.ReadUncached), lat(run.ReadRaw))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, run := range r.Runs {
		fmt.Fprintf(w, "%s: writes by node %s", run.Mode, nodeList(run.WritesByNode))
		if run.DrainWrites > 0 {
			fmt.Fprintf(w, " (%d sent by Close)", run.DrainWrites)
		}
		fmt.Fprintln(w)
		for _, p := range run.Problems {
			fmt.Fprintf(w, "%s: %s\n", run.Mode, p)
		}
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintf(w, "\nagainst %s:\n", r.RatioBase)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "mode\tincr/s\twrites/incr\tmax node share\t\n")
		for _, run := range r.Runs {
			x := r.Ratios[run.Mode]
			fmt.Fprintf(tw, "%s\t%.2fx\t%.3gx\t%.3fx\t\n", run.Mode, x.IncrPerSec, x.CacheWritesPerIncr, x.MaxNodeShare)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\n%s backend, %d primaries, %d round(s) per mode; cache writes are INCRBY+EVALSHA+EVAL calls of every client of the cluster\n",
		r.Backend, len(r.Primaries), r.Rounds)
	return nil
}

func lat(l Latency) string {
	if l.Samples == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f/%.3f", l.P50Ms, l.P99Ms)
}

func nodeList(m map[string]int64) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%d", n, m[n])
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, " ")
}
