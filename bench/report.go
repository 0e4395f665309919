package bench

import (
	"fmt"
	"io"
	"slices"
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
	// Rounds is how many rounds each run was split into.
	Rounds int `json:"rounds"`
	// OfferedPerSec is the offered rate (Config.Rate); 0 for unpaced runs.
	OfferedPerSec float64 `json:"offered_per_sec"`
	// Calibration is one node's ceiling; nil without Config.Calibrate.
	Calibration *Calibration `json:"calibration,omitempty"`
	// Runs holds one entry per run (mode, and N in a sweep), its rounds
	// summed.
	Runs []Result `json:"runs"`
	// RatioBase is the label of the run the ratios compare with; empty
	// with one run.
	RatioBase string `json:"ratio_base,omitempty"`
	// Ratios compares each run, by label, with RatioBase; nil with one
	// run.
	Ratios map[string]Ratio `json:"ratios,omitempty"`
}

// Result is what one run achieved over its rounds.
type Result struct {
	// Label names the run: the mode, followed by " n=N" in a sweep.
	Label string `json:"label"`
	// Mode, N, Procs, Workers and TargetRate (0: unpaced) describe the
	// load; open-loop, Workers is the most calls one instance had in
	// flight at once.
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
	// OfferedPerSec is the open-loop rate offered (TargetRate); 0 when
	// unpaced.
	OfferedPerSec float64 `json:"offered_per_sec"`
	// AchievedPerSec counts the increments acknowledged within the load
	// windows, per second of window.
	AchievedPerSec float64 `json:"achieved_per_sec"`
	// Achieved is AchievedPerSec / OfferedPerSec (0 when unpaced).
	Achieved float64 `json:"achieved"`
	// Dropped counts increments scheduled while their queue was full;
	// Unserved those still queued when a window ended. Neither was sent.
	Dropped  int64 `json:"dropped"`
	Unserved int64 `json:"unserved"`
	// Late counts increments acknowledged after their window ended:
	// sent (in Sent and the total) but not achieved.
	Late int64 `json:"late"`
	// Latency is the time from each increment's scheduled start (its
	// actual start when unpaced) to its acknowledgement; open-loop, it
	// includes the wait in the queue.
	Latency Latency `json:"latency"`
	// QueueWait is, open-loop, the time from each increment's scheduled
	// start until its call started: it waits in its instance's queue only
	// while Workers calls of the instance are in flight, so a long wait
	// means the generator's callers, not the cache, held it up.
	QueueWait Latency `json:"queue_wait"`
	// Call is, open-loop, the time from the start of an increment's call
	// to its acknowledgement: the cache's (and the client's) part of Latency.
	Call Latency `json:"call"`
	// GeneratorCPU is the CPU this process (every instance, the
	// dispatcher and the read sampler) used during the load windows, in
	// CPUs; MachineCPU is what the whole machine used, of CPUs. Both are
	// 0 where they cannot be read.
	GeneratorCPU float64 `json:"generator_cpu"`
	MachineCPU   float64 `json:"machine_cpu"`
	CPUs         int     `json:"cpus"`
	// NodeCPU is each primary's CPU during the windows (INFO cpu), in
	// CPUs; MaxNodeCPU the largest. Empty on the embedded store.
	NodeCPU    map[string]float64 `json:"node_cpu,omitempty"`
	MaxNodeCPU float64            `json:"max_node_cpu,omitempty"`
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
	// NodeWritesPerSec is each primary's write rate during the windows.
	NodeWritesPerSec map[string]float64 `json:"node_writes_per_sec"`
	// NodeUtilisation is each primary's write rate over the calibrated
	// ceiling; nil without a calibration.
	NodeUtilisation map[string]float64 `json:"node_utilisation,omitempty"`
	// MaxNodeUtilisation is the largest of NodeUtilisation.
	MaxNodeUtilisation float64 `json:"max_node_utilisation,omitempty"`
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
	// CachedVsUncached is ReadCached's p50 over ReadUncached's, both
	// sampled in the same loop (0 without samples).
	CachedVsUncached float64 `json:"cached_vs_uncached"`
	// ReadErrors counts sampled reads that failed.
	ReadErrors int `json:"read_errors"`
	// Problems lists errors seen (last Incr error, close errors, ...).
	Problems []string `json:"problems,omitempty"`
}

// Ratio compares a run with the base run: the run's figure divided by
// the base's.
type Ratio struct {
	IncrPerSec         float64 `json:"incr_per_sec"`
	AchievedPerSec     float64 `json:"achieved_per_sec"`
	CacheWritesPerIncr float64 `json:"cache_writes_per_incr"`
	MaxNodeShare       float64 `json:"max_node_share"`
}

// aggregate sums the rounds of run v into a Result; cal, when set, is
// the ceiling utilisation is measured against.
func aggregate(s *settings, v variant, rs []*round, cal *Calibration) Result {
	m := v.mode
	run := Result{
		Label: s.label(v), Mode: m, N: v.n, Procs: s.Procs, Workers: rs[len(rs)-1].workers, TargetRate: s.Rate,
		OfferedPerSec: s.Rate, Exact: true, WritesByNode: map[string]int64{},
	}
	var elapsed time.Duration
	var windowWrites, achieved int64
	windowByNode := map[string]int64{}
	var reads readSamples
	lat, wait, call := new(hist), new(hist), new(hist)
	var genCPU, machineCPU float64 // CPU seconds over the windows
	nodeCPU := map[string]float64{}
	for _, r := range rs {
		secs := r.elapsed.Seconds()
		genCPU += r.cpu.generator * secs
		machineCPU += r.cpu.machine * secs
		run.CPUs = max(run.CPUs, r.cpu.cpus)
		for n, c := range r.nodeCPU {
			nodeCPU[n] += c * secs
		}
		if r.wait != nil {
			wait.merge(r.wait)
			call.merge(r.call)
		}
		run.Key = r.key
		run.Sent += r.sent
		run.Errors += r.failed
		run.Dropped += r.dropped
		run.Unserved += r.unserved
		achieved += r.achieved
		lat.merge(r.lat)
		run.Total = r.total
		if r.total-r.base != r.sent {
			run.Exact = false
		}
		elapsed += r.elapsed
		for n, v := range r.window {
			run.WritesByNode[n] += v
			windowByNode[n] += v
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
	window := s.segment.Seconds() * float64(len(rs))
	if run.Seconds > 0 {
		run.IncrPerSec = float64(run.Sent) / run.Seconds
		run.CacheWritesPerSec = float64(windowWrites) / run.Seconds
	}
	if window > 0 {
		run.AchievedPerSec = float64(achieved) / window
	}

	run.Late = run.Sent - achieved
	if run.Seconds > 0 {
		run.GeneratorCPU = genCPU / run.Seconds
		run.MachineCPU = machineCPU / run.Seconds
		for n, c := range nodeCPU {
			if run.NodeCPU == nil {
				run.NodeCPU = map[string]float64{}
			}
			run.NodeCPU[n] = c / run.Seconds
			run.MaxNodeCPU = max(run.MaxNodeCPU, c/run.Seconds)
		}
	}
	run.QueueWait, run.Call = wait.latency(), call.latency()
	if s.Rate > 0 {
		run.Achieved = div(run.AchievedPerSec, s.Rate)
	}
	run.Latency = lat.latency()
	if run.Sent > 0 {
		run.CacheWritesPerIncr = float64(run.CacheWrites) / float64(run.Sent)
	}
	run.NodeWritesPerSec = map[string]float64{}
	if cal != nil && cal.IncrPerSec > 0 {
		run.NodeUtilisation = map[string]float64{}
	}
	for n, w := range windowByNode {
		if run.Seconds > 0 {
			run.NodeWritesPerSec[n] = float64(w) / run.Seconds
		}
		if run.NodeUtilisation != nil {
			u := div(run.NodeWritesPerSec[n], cal.IncrPerSec)
			run.NodeUtilisation[n] = u
			run.MaxNodeUtilisation = max(run.MaxNodeUtilisation, u)
		}
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
	if run.ReadCached.Samples > 0 && run.ReadUncached.P50Ms > 0 {
		run.CachedVsUncached = div(run.ReadCached.P50Ms, run.ReadUncached.P50Ms)
	}
	return run
}

// ratios compares every run with the base run (single when present, else
// the first).
func ratios(runs []Result) (string, map[string]Ratio) {
	if len(runs) < 2 {
		return "", nil
	}
	base := runs[0]
	for _, r := range runs {
		if r.Mode == Single {
			base = r
		}
	}
	out := make(map[string]Ratio, len(runs))
	for _, r := range runs {
		out[r.label()] = Ratio{
			IncrPerSec:         div(r.IncrPerSec, base.IncrPerSec),
			AchievedPerSec:     div(r.AchievedPerSec, base.AchievedPerSec),
			CacheWritesPerIncr: div(r.CacheWritesPerIncr, base.CacheWritesPerIncr),
			MaxNodeShare:       div(r.MaxNodeShare, base.MaxNodeShare),
		}
	}
	return base.label(), out
}

// label returns r.Label, or the mode for a Result built without one.
func (r *Result) label() string {
	if r.Label != "" {
		return r.Label
	}
	return string(r.Mode)
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

// WriteText prints the report as tables.
func (r *Report) WriteText(w io.Writer) error {
	if c := r.Calibration; c != nil {
		fmt.Fprintf(w, "calibration: one node (%s) took %.0f single-key INCR/s from %d×%d callers, open-loop, %d offered rates in %.1f s (latency p50/p99 %s ms; node CPU %.1f%% of one core)\n",
			c.Node, c.IncrPerSec, c.Procs, c.Workers, len(c.Steps), c.Seconds, lat(c.Latency), 100*c.NodeCPU)
		for _, st := range c.Steps {
			kept := "kept up"
			if !st.KeptUp {
				kept = "did not keep up"
			}
			step := "offered"
			if st.Hold {
				step = "held (the ceiling)"
			}
			spread := ""
			if len(st.SliceRates) > 0 {
				spread = fmt.Sprintf(" (%d slices: %.0f to %.0f/s)", len(st.SliceRates), slices.Min(st.SliceRates), slices.Max(st.SliceRates))
			}
			fmt.Fprintf(w, "  %s %.0f/s for %.1f s: achieved %.0f/s%s, latency p50/p99 %s ms, %s\n", step, st.OfferedPerSec, st.Seconds, st.AchievedPerSec, spread, lat(st.Latency), kept)
		}
		fmt.Fprintln(w)
	}
	paced := r.OfferedPerSec > 0
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	head := "mode\tn\tprocs\t"
	if paced {
		head += "offered/s\tachieved/s\tachieved\t"
	} else {
		head += "incr/s\t"
	}
	head += "incr p50/p99 ms\texact\twrites/s\twrites/incr\tmax node share\tideal\tplaced\t"
	if r.Calibration != nil {
		head += "max node util\t"
	}
	head += "cached p50/p99 ms\tuncached p50/p99 ms\traw p50/p99 ms\t\n"
	fmt.Fprint(tw, head)
	for _, run := range r.Runs {
		fmt.Fprintf(tw, "%s\t%d\t%d\t", run.Mode, run.N, run.Procs)
		if paced {
			fmt.Fprintf(tw, "%.0f\t%.0f\t%.1f%%\t", run.OfferedPerSec, run.AchievedPerSec, 100*run.Achieved)
		} else {
			fmt.Fprintf(tw, "%.0f\t", run.IncrPerSec)
		}
		fmt.Fprintf(tw, "%s\t%v\t%.1f\t%.3g\t%.3f\t%.3f\t%.3f\t", lat(run.Latency), run.Exact,
			run.CacheWritesPerSec, run.CacheWritesPerIncr, run.MaxNodeShare, run.IdealNodeShare, run.PlacementNodeShare)
		if r.Calibration != nil {
			fmt.Fprintf(tw, "%.0f%%\t", 100*run.MaxNodeUtilisation)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t\n", lat(run.ReadCached), lat(run.ReadUncached), lat(run.ReadRaw))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w)
	for _, run := range r.Runs {
		fmt.Fprintf(w, "%s: writes by node %s", run.label(), nodeList(run.WritesByNode, run.NodeWritesPerSec, run.NodeUtilisation))
		if run.DrainWrites > 0 {
			fmt.Fprintf(w, " (%d sent by Close)", run.DrainWrites)
		}
		fmt.Fprintln(w)
		if run.Dropped > 0 || run.Unserved > 0 || run.Late > 0 {
			fmt.Fprintf(w, "%s: %d increments dropped (queue full), %d still queued at the end of a window (not sent), %d acknowledged after it (sent, not achieved)\n", run.label(), run.Dropped, run.Unserved, run.Late)
		}
		if run.QueueWait.Samples > 0 {
			fmt.Fprintf(w, "%s: wait for a caller p50/p99 %s ms (%d×%d callers), then the call %s ms\n", run.label(), lat(run.QueueWait), run.Procs, run.Workers, lat(run.Call))
		}
		if c := cpuLine(run); c != "" {
			fmt.Fprintf(w, "%s: %s\n", run.label(), c)
		}
		for _, p := range run.Problems {
			fmt.Fprintf(w, "%s: %s\n", run.label(), p)
		}
	}
	for _, run := range r.Runs {
		if run.N > 1 && run.CachedVsUncached > 0 {
			fmt.Fprintf(w, "%s: cached read p50 %.3f ms, uncached N=%d read p50 %.3f ms: %s of it\n",
				run.label(), run.ReadCached.P50Ms, run.N, run.ReadUncached.P50Ms, fraction(run.CachedVsUncached))
		}
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintf(w, "\nagainst %s:\n", r.RatioBase)
		tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintf(tw, "mode\tincr/s\tachieved/s\twrites/incr\tmax node share\t\n")
		for _, run := range r.Runs {
			x := r.Ratios[run.label()]
			fmt.Fprintf(tw, "%s\t%.2fx\t%.2fx\t%.3gx\t%.3fx\t\n", run.label(), x.IncrPerSec, x.AchievedPerSec, x.CacheWritesPerIncr, x.MaxNodeShare)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(w, "\n%s backend, %d primaries, %d round(s) per run; cache writes are INCRBY+EVALSHA+EVAL calls of every client of the cluster",
		r.Backend, len(r.Primaries), r.Rounds)
	if paced {
		fmt.Fprintf(w, "; %.0f increments/s offered open-loop, latency from each increment's scheduled start", r.OfferedPerSec)
	}
	if r.Calibration != nil {
		fmt.Fprintf(w, "; utilisation is a node's writes/s over the calibrated ceiling")
	}
	fmt.Fprintln(w)
	return nil
}

// fraction writes a ratio below 1 as "1/K", others as "K×".
func fraction(x float64) string {
	if x > 0 && x < 1 {
		return fmt.Sprintf("1/%.0f", 1/x)
	}
	return fmt.Sprintf("%.2f×", x)
}

func lat(l Latency) string {
	if l.Samples == 0 {
		return "-"
	}
	return fmt.Sprintf("%.3f/%.3f", l.P50Ms, l.P99Ms)
}

// nodeList writes "node=writes (rate/s, util%)" for each node, sorted.
func nodeList(m map[string]int64, rate, util map[string]float64) string {
	names := make([]string, 0, len(m))
	for n := range m {
		names = append(names, n)
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, n := range names {
		parts[i] = fmt.Sprintf("%s=%d", n, m[n])
		switch u, ok := util[n]; {
		case ok:
			parts[i] += fmt.Sprintf(" (%.0f/s, %.0f%%)", rate[n], 100*u)
		case rate[n] > 0:
			parts[i] += fmt.Sprintf(" (%.0f/s)", rate[n])
		}
	}
	if len(parts) == 0 {
		return "(none)"
	}
	return strings.Join(parts, " ")
}

// cpuLine describes where a run's CPU went: the generator's, the
// machine's and the busiest node's; "" when none was measured.
func cpuLine(run Result) string {
	var parts []string
	if run.GeneratorCPU > 0 {
		parts = append(parts, fmt.Sprintf("generator CPU %.2f", run.GeneratorCPU))
	}
	if run.CPUs > 0 {
		parts = append(parts, fmt.Sprintf("machine busy %.2f of %d CPUs", run.MachineCPU, run.CPUs))
	}
	if len(run.NodeCPU) > 0 {
		lo := run.MaxNodeCPU
		for _, c := range run.NodeCPU {
			lo = min(lo, c)
		}
		parts = append(parts, fmt.Sprintf("nodes' CPU %.2f%%–%.2f%% of one CPU each", 100*lo, 100*run.MaxNodeCPU))
	}
	return strings.Join(parts, ", ")
}
