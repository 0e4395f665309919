package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/hotcount/hotcount/bench"
	"github.com/hotcount/hotcount/proxy"
)

// runBench drives one hot counter from many client instances: hotcount
// bench --key K --mode M | --compare M,M,... [flags]. See package bench.
func runBench(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) > 0 && args[0] == "longtail" {
		return runBenchLongTail(ctx, args[1:], stdout, stderr)
	}
	fs := newFlagSet("bench", stdout, stderr)
	var c bench.Config
	var redis, key, mode, compare, ns, svg, rate string
	var asJSON bool
	var sec redisSecurity
	calibrate := bench.DefaultCalibrate
	fs.StringVar(&redis, "redis", "", "Redis seed addresses, comma-separated (empty: one embedded store shared by the instances)")
	fs.StringVar(&key, "key", "", "counter key; each run writes KEY:MODE:RUNID (required)")
	fs.StringVar(&mode, "mode", "", "single, sharded, buffered or combined")
	fs.StringVar(&compare, "compare", "", "modes to run alternately and compare, e.g. single,sharded,buffered,combined")
	fs.StringVar(&ns, "n", strconv.Itoa(bench.DefaultN), "sub-counters in sharded and combined mode; several, e.g. 1,2,4,8, run those modes once per value")
	fs.IntVar(&c.Procs, "procs", bench.DefaultProcs, "independent client instances")
	fs.StringVar(&rate, "rate", "0", "increments per second over all instances, offered open-loop, or a multiple of the calibrated ceiling, e.g. 4x (0: as fast as they can)")
	fs.DurationVar(&calibrate, "calibrate", calibrate, "with --redis, first measure one node's single-key INCR ceiling, open-loop, in steps of a third of this, then hold the runs' offer for at least this long (0: skip)")
	fs.StringVar(&svg, "svg", "", "write an SVG chart of the achieved rate against N to this file")
	fs.DurationVar(&c.Duration, "duration", bench.DefaultDuration, "how long each mode is driven")
	fs.DurationVar(&c.Flush, "flush", bench.DefaultFlush, "flush interval of the buffered modes")
	fs.IntVar(&c.Rounds, "rounds", 0, "rounds the modes alternate in (0: 1 for one mode, 3 with --compare)")
	fs.IntVar(&c.Workers, "workers", 0, "goroutines per instance, or with --rate the most calls one instance has in flight (0: 4 unbuffered, 1 buffered, with --rate as many as the rate needs)")
	fs.BoolVar(&c.Keep, "keep", false, "leave the benchmark keys in the cache")
	fs.BoolVar(&asJSON, "json", false, `print JSON: {"runs": [...], "ratios": {...}}`)
	sec.register(fs)
	if code, done := fs.parse(args); done {
		return code
	}
	switch {
	case key == "":
		return usagef(stderr, "bench: --key is required")
	case mode == "" && compare == "":
		return usagef(stderr, "bench: give --mode or --compare")
	case mode != "" && compare != "":
		return usagef(stderr, "bench: --mode and --compare are exclusive")
	case c.Procs < 1:
		return usagef(stderr, "bench: --procs must be at least 1, got %d", c.Procs)
	case c.Duration <= 0:
		return usagef(stderr, "bench: --duration must be positive, got %v", c.Duration)
	case c.Flush <= 0:
		return usagef(stderr, "bench: --flush must be positive, got %v", c.Flush)
	case c.Rounds < 0 || c.Workers < 0:
		return usagef(stderr, "bench: --rounds and --workers must not be negative")
	case calibrate < 0:
		return usagef(stderr, "bench: --calibrate must not be negative, got %v", calibrate)
	}
	if x, ok := strings.CutSuffix(rate, "x"); ok {
		v, err := strconv.ParseFloat(x, 64)
		if err != nil || !(v > 0) {
			return usagef(stderr, "bench: --rate %q: want increments per second or a positive multiple of the ceiling, e.g. 4x", rate)
		}
		if redis == "" || calibrate == 0 {
			return usagef(stderr, "bench: --rate %s needs --redis and the calibration (--calibrate)", rate)
		}
		c.RateCeilings = v
	} else if v, err := strconv.ParseFloat(rate, 64); err != nil || v < 0 || v != v {
		return usagef(stderr, "bench: --rate %q: want increments per second or a multiple of the ceiling, e.g. 4x", rate)
	} else {
		c.Rate = v
	}
	for _, f := range strings.Split(ns, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return usagef(stderr, "bench: --n takes sub-counter counts of at least 1, e.g. 8 or 1,2,4,8; got %q", ns)
		}
		c.Ns = append(c.Ns, n)
	}
	modes, err := bench.ParseModes(mode + compare)
	if err != nil {
		return usagef(stderr, "%v", err)
	}
	if mode != "" && len(modes) != 1 {
		return usagef(stderr, "bench: --mode takes one mode (use --compare for several)")
	}
	c.Key, c.Modes, c.Redis = key, modes, splitAddrs(redis)
	if c.Login, err = sec.forRedis(c.Redis); err != nil {
		return usagef(stderr, "bench: %v", err)
	}
	if len(c.Redis) > 0 {
		c.Calibrate = calibrate
	}
	if err := c.Validate(); err != nil {
		return usagef(stderr, "%v", err)
	}
	if svg != "" {
		if err := checkOutputFile(svg); err != nil {
			return usagef(stderr, "bench: --svg: %v", err)
		}
	}
	if len(c.Redis) == 0 {
		fmt.Fprintln(stderr, "hotcount: bench: no --redis: the instances share one embedded store; writes are counted from its Stats")
	}
	var bar *progressBar
	if isTerminal(stderr) {
		bar = &progressBar{w: stderr}
		c.Progress = bar.show
	}
	rep, err := bench.Run(ctx, c)
	bar.clear()
	if errors.Is(err, bench.ErrConfig) {
		return usagef(stderr, "%v", err)
	}
	if rep != nil && (len(rep.Runs) > 0 || rep.Calibration != nil) {
		if code := printBenchReport(stdout, stderr, rep, asJSON); code != exitOK {
			return code
		}
	}
	if svg != "" && rep != nil && len(rep.Runs) > 0 {
		if code := writeBenchSVG(svg, stderr, rep); code != exitOK {
			return code
		}
	}
	if err != nil {
		return failf(stderr, "%v", err)
	}
	var inexact []string
	for _, r := range rep.Runs {
		if !r.Exact {
			inexact = append(inexact, fmt.Sprintf("%s (sent %d, total %d)", r.Mode, r.Sent, r.Total))
		}
	}
	if len(inexact) > 0 {
		return failf(stderr, "bench: %v: %s", bench.ErrNotExact, strings.Join(inexact, ", "))
	}
	return exitOK
}

func printBenchReport(stdout, stderr io.Writer, rep *bench.Report, asJSON bool) int {
	if asJSON {
		return printJSON(stdout, stderr, rep)
	}
	if err := rep.WriteText(stdout); err != nil {
		return failf(stderr, "bench: writing the report: %v", err)
	}
	return exitOK
}

// writeBenchSVG writes the report's chart to file.
func writeBenchSVG(file string, stderr io.Writer, rep *bench.Report) int {
	var b bytes.Buffer
	if err := rep.WriteSVG(&b); err != nil {
		return failf(stderr, "bench: --svg: %v", err)
	}
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		return failf(stderr, "bench: --svg: %v", err)
	}
	return exitOK
}

// isTerminal reports whether w is a character device (a terminal).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

// progressBar draws one line of progress on a terminal.
type progressBar struct {
	w     io.Writer
	drawn bool
}

const barWidth = 30

func (b *progressBar) show(p bench.Progress) {
	frac := 0.0
	if p.Window > 0 {
		frac = min(1, float64(p.Elapsed)/float64(p.Window))
	}
	full := int(frac * barWidth)
	fmt.Fprintf(b.w, "\r%-8s %d/%d [%s%s] %5.1fs/%.1fs %d incr ",
		p.Mode, p.Step, p.Steps, strings.Repeat("#", full), strings.Repeat(".", barWidth-full),
		p.Elapsed.Round(100*time.Millisecond).Seconds(), p.Window.Seconds(), p.Sent)
	b.drawn = true
}

// clear erases the bar, if one was drawn.
func (b *progressBar) clear() {
	if b != nil && b.drawn {
		fmt.Fprint(b.w, "\r\033[K")
	}
}

// runBenchLongTail is hotcount bench longtail: a namespace of many mostly
// cold counters and one viral key, through hotcount and sent directly,
// side by side. See bench.RunLongTail.
func runBenchLongTail(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("bench longtail", stdout, stderr)
	var c bench.LongTailConfig
	var redis, paths, workloads string
	var asJSON bool
	var sec redisSecurity
	fs.StringVar(&redis, "redis", "", "Redis Cluster seed addresses, comma-separated (required)")
	fs.IntVar(&c.Keys, "keys", bench.DefaultTailKeys, "tail counters (uniform random keys)")
	fs.IntVar(&c.TailClients, "clients", bench.DefaultTailClients, "callers of the tail (half of them in the mixed workload)")
	fs.IntVar(&c.ViralClients, "viral-clients", bench.DefaultViralClients, "callers of the viral key in the mixed workload")
	fs.IntVar(&c.Requests, "requests", bench.DefaultTailRequests, "INCRs per redis-benchmark run (tail, and viral key)")
	fs.DurationVar(&c.LibDuration, "duration", bench.DefaultLibDuration, "how long each library case runs")
	fs.DurationVar(&c.Flush, "flush", 0, "flush interval of the buffered namespace (0: the default)")
	fs.DurationVar(&c.UpstreamDelay, "upstream-delay", proxy.CounterFlushDelay, "flush delay of the proxy case's counters' connections to the cluster")
	fs.DurationVar(&c.BatchWindow, "batch-window", proxy.CounterBatchWindow, "longest wait of the proxy case's cold INCRs for one batch to every node (negative: none, each sent on its own)")
	fs.IntVar(&c.DirectClients, "direct-clients", 0, "also run the direct case with this many tail callers (a direct load near the proxy's rate); 0: not")
	fs.StringVar(&paths, "paths", bench.DefaultTailPaths, "proxy, library or both")
	fs.StringVar(&workloads, "workloads", bench.DefaultTailWorkloads, "tail, mixed and reads (cold GETs of the tail, proxy pair only)")
	fs.StringVar(&c.Benchmark, "redis-benchmark", bench.DefaultBenchmark, "the redis-benchmark program")
	fs.StringVar(&c.Store, "store", bench.DefaultTailStore, "durable store of the hotcount side: embedded (a SQLite store in a temporary folder, with its checkpoints, as serve and proxy --data run) or none (no checkpoints, as proxy without --data or --postgres)")
	fs.BoolVar(&asJSON, "json", false, "print the report as JSON")
	sec.register(fs)
	if code, done := fs.parse(args); done {
		return code
	}
	c.Redis = splitAddrs(redis)
	var err error
	if c.Login, err = sec.forRedis(c.Redis); err != nil {
		return usagef(stderr, "bench longtail: %v", err)
	}
	c.BenchmarkTLS = sec.benchmarkTLS()
	c.Paths, c.Workloads = splitList(paths), splitList(workloads)
	c.Log = stderr
	rep, err := bench.RunLongTail(ctx, c)
	if errors.Is(err, bench.ErrConfig) {
		return usagef(stderr, "%v", err)
	}
	if rep != nil && len(rep.Cases) > 0 {
		if asJSON {
			if code := printJSON(stdout, stderr, rep); code != exitOK {
				return code
			}
		} else if werr := rep.WriteText(stdout); werr != nil {
			return failf(stderr, "bench longtail: %v", werr)
		}
	}
	if err != nil {
		return failf(stderr, "bench longtail: %v", err)
	}
	return exitOK
}

// splitList splits a comma-separated list, dropping empty items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}
