package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount"
)

// Defaults of the soak's flags.
const (
	defaultSoakDuration = 10 * time.Minute
	defaultSoakKeys     = 1000
	defaultSoakInterval = 10 * time.Second
)

// Soak limits: the verdict allows this much growth between the first and
// the last sample before it suspects a leak.
const (
	soakGoroutineSlack = 10       // goroutines
	soakHeapSlack      = 32 << 20 // bytes of HeapInuse, on top of doubling
	soakWorkers        = 4
	soakCheckKey       = "check"
)

// soakSample is one line of soak output.
type soakSample struct {
	Elapsed    string `json:"elapsed"`
	ElapsedMS  int64  `json:"elapsed_ms"`
	Incrs      int64  `json:"incrs"`
	Gets       int64  `json:"gets"`
	Clears     int64  `json:"clears"`
	Resizes    int64  `json:"resizes"`
	Errors     int64  `json:"errors"`
	HeapInuse  uint64 `json:"heap_inuse"`
	Sys        uint64 `json:"sys"`
	Goroutines int    `json:"goroutines"`
	Unflushed  int64  `json:"unflushed"`
}

// soakVerdict compares the first and the last sample.
type soakVerdict struct {
	Verdict        string `json:"verdict"` // "stable", "growth" (leak suspected) or "fail"
	Reason         string `json:"reason,omitempty"`
	Duration       string `json:"duration"`
	HeapStart      uint64 `json:"heap_inuse_start"`
	HeapEnd        uint64 `json:"heap_inuse_end"`
	SysStart       uint64 `json:"sys_start"`
	SysEnd         uint64 `json:"sys_end"`
	GoroutineStart int    `json:"goroutines_start"`
	GoroutineEnd   int    `json:"goroutines_end"`
	// GoroutineBefore is the count before the Client was opened, and
	// GoroutineAfterClose the count once it was closed.
	GoroutineBefore     int    `json:"goroutines_before_open"`
	GoroutineAfterClose int    `json:"goroutines_after_close"`
	Incrs               int64  `json:"incrs"`
	Gets                int64  `json:"gets"`
	Clears              int64  `json:"clears"`
	Resizes             int64  `json:"resizes"`
	Errors              int64  `json:"errors"`
	LastError           string `json:"last_error,omitempty"`
	Resize              string `json:"resize"` // "on", or why it is off
	CheckExact          bool   `json:"check_exact"`
	// Removed is how many counters the run cleared at its end (none with
	// --keep, when Kept is set).
	Removed int  `json:"removed_keys"`
	Kept    bool `json:"kept"`
	// ResizeConflicts counts resizes answered ErrConflict (a clear or
	// another resize of the counter at the same moment).
	ResizeConflicts int64 `json:"resize_conflicts"`
}

// soakCounts are the operation counters of a soak run.
type soakCounts struct {
	incrs, gets, clears, resizes, errs atomic.Int64
	conflicts                          atomic.Int64 // resizes that met a clear or another resize
	lastErr                            atomic.Value // string
}

func (s *soakCounts) fail(err error) {
	s.errs.Add(1)
	s.lastErr.Store(err.Error())
}

// runSoak runs mixed load (buffered and unbuffered increments, reads,
// clears, resizes) for --duration and prints memory and goroutine counts
// every --interval, then a verdict comparing the first and last sample.
func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := newFlagSet("soak", stdout, stderr)
	redis := fs.String("redis", "", "Redis seed addresses, comma-separated (empty: the embedded store)")
	duration := fs.Duration("duration", defaultSoakDuration, "how long to run")
	keys := fs.Int("keys", defaultSoakKeys, "number of distinct counters")
	interval := fs.Duration("interval", defaultSoakInterval, "time between samples")
	asJSON := fs.Bool("json", false, "print JSON lines")
	keep := fs.Bool("keep", false, "keep the counters the run wrote (default: clear them at the end)")
	var sec redisSecurity
	sec.register(fs)
	if code, done := fs.parse(args); done {
		return code
	}
	switch {
	case *duration <= 0:
		return usagef(stderr, "soak: --duration must be positive, got %v", *duration)
	case *interval <= 0 || *interval > *duration:
		return usagef(stderr, "soak: --interval must be in (0, --duration], got %v", *interval)
	case *keys < 2:
		return usagef(stderr, "soak: --keys must be at least 2, got %d", *keys)
	}
	rc, err := sec.forRedis(splitAddrs(*redis))
	if err != nil {
		return usagef(stderr, "soak: %v", err)
	}
	before := runtime.NumGoroutine()
	prefix := fmt.Sprintf("soak:%d:", time.Now().UnixNano())
	c, err := hotcount.New(ctx, hotcount.Config{
		Redis:      rc,
		Defaults:   hotcount.Namespace{N: 4, ReadCacheTTL: 100 * time.Millisecond, FlushInterval: 100 * time.Millisecond},
		Namespaces: []hotcount.Namespace{{Prefix: prefix + "b:", Buffered: true}},
	})
	if err != nil {
		return openFailure(stderr, "soak", err)
	}
	var counts soakCounts
	names := make([]string, *keys)
	for i := range names {
		kind := "u:" // half the keys buffered, half written through
		if i%2 == 0 {
			kind = "b:"
		}
		names[i] = fmt.Sprintf("%s%s%d", prefix, kind, i)
	}
	checkKey := prefix + "b:" + soakCheckKey
	var checkSent atomic.Int64

	// Workers run until the last sample is taken, so first and last
	// sample see the same load.
	workCtx, stopWork := context.WithCancel(ctx)
	defer stopWork()
	var wg sync.WaitGroup
	for w := range soakWorkers {
		wg.Go(func() { soakWorker(workCtx, c, names, checkKey, &checkSent, &counts, uint64(w)) })
	}
	resize := "on"
	if err := c.Resize(ctx, names[1], 4); errors.Is(err, hotcount.ErrNoMetadata) {
		resize = "off: the store keeps no counter metadata"
	} else {
		wg.Go(func() { soakResizer(workCtx, c, names, &counts) })
	}

	start := time.Now()
	var first, last soakSample
	emit := func() int {
		s := soakSnapshot(start, c, &counts)
		if first.Elapsed == "" {
			first = s
		}
		last = s
		if *asJSON {
			return printJSON(stdout, stderr, s)
		}
		fmt.Fprintf(stdout, "%8s  incrs %d  gets %d  clears %d  resizes %d  errors %d  heap_inuse %s  sys %s  goroutines %d  unflushed %d\n",
			s.Elapsed, s.Incrs, s.Gets, s.Clears, s.Resizes, s.Errors, mib(s.HeapInuse), mib(s.Sys), s.Goroutines, s.Unflushed)
		return exitOK
	}
	tick := time.NewTicker(*interval)
	end := time.NewTimer(*duration)
	code := exitOK
	for done := false; !done; {
		select {
		case <-ctx.Done():
			done = true
		case <-end.C:
			code, done = emit(), true
		case <-tick.C:
			if time.Until(start.Add(*duration)) > *interval/2 { // the end sample is near
				code = emit()
				done = code != exitOK
			}
		}
	}
	tick.Stop()
	end.Stop()
	stopWork()
	wg.Wait()
	// removeKeys clears every counter the run wrote, unless --keep.
	removeKeys := func() (int, error) {
		if *keep {
			return 0, nil
		}
		cctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		for i, k := range append(names, checkKey) {
			if err := c.Clear(cctx, k); err != nil {
				return i, err
			}
		}
		return len(names) + 1, nil
	}
	if code != exitOK || ctx.Err() != nil {
		if n, err := removeKeys(); err != nil {
			fmt.Fprintf(stderr, "hotcount: soak: removed %d of %d counters: %v\n", n, len(names)+1, err)
		}
		_ = c.Close(context.Background())
		if code == exitOK {
			code = exitFailure
		}
		return code
	}

	// The check key is never cleared or resized: after a flush it must
	// read exactly what was sent.
	closeCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	exact, checkWhy := false, ""
	if err := c.Flush(closeCtx); err != nil {
		checkWhy = fmt.Sprintf("flush: %v", err)
	} else {
		time.Sleep(150 * time.Millisecond) // past the read cache TTL
		switch r, err := c.Get(closeCtx, checkKey); {
		case err != nil:
			checkWhy = fmt.Sprintf("read: %v", err)
		case r.Value != checkSent.Load():
			checkWhy = fmt.Sprintf("reads %d, %d sent", r.Value, checkSent.Load())
		default:
			exact = true
		}
	}
	removed, rmErr := removeKeys()
	if err := c.Close(closeCtx); err != nil {
		return failf(stderr, "soak: close: %v", err)
	}
	afterClose := settledGoroutines(before)
	v := soakJudge(first, last, time.Since(start), &counts)
	v.Resize, v.CheckExact = resize, exact
	v.GoroutineBefore, v.GoroutineAfterClose = before, afterClose
	v.Removed, v.Kept = removed, *keep
	v.ResizeConflicts = counts.conflicts.Load()
	switch {
	case rmErr != nil:
		v.Verdict, v.Reason = "fail", fmt.Sprintf("removing the counters: %v (%d removed)", rmErr, removed)
	case first.Elapsed == "":
		v.Verdict, v.Reason = "fail", "interrupted before the first sample"
	case afterClose > before+soakGoroutineSlack:
		v.Verdict, v.Reason = "growth", fmt.Sprintf("%d goroutines after Close, %d before New", afterClose, before)
	case !exact:
		v.Verdict, v.Reason = "fail", "check counter does not read what was sent ("+checkWhy+")"
	}
	if *asJSON {
		if code := printJSON(stdout, stderr, v); code != exitOK {
			return code
		}
	} else {
		fmt.Fprintf(stdout, "verdict: %s %s\n  heap_inuse %s -> %s, sys %s -> %s, goroutines %d -> %d over %s (%d before open, %d after close)\n  incrs %d, gets %d, clears %d, resizes %d (resize %s), errors %d, check counter exact: %v\n",
			v.Verdict, v.Reason, mib(v.HeapStart), mib(v.HeapEnd), mib(v.SysStart), mib(v.SysEnd),
			v.GoroutineStart, v.GoroutineEnd, v.Duration, v.GoroutineBefore, v.GoroutineAfterClose, v.Incrs, v.Gets, v.Clears, v.Resizes, v.Resize, v.Errors, v.CheckExact)
		if v.LastError != "" {
			fmt.Fprintf(stdout, "  last error: %s\n", v.LastError)
		}
		if v.Kept {
			fmt.Fprintf(stdout, "  kept the counters under %s\n", prefix)
		} else {
			fmt.Fprintf(stdout, "  removed the %d counters it wrote\n", v.Removed)
		}
	}
	if v.Verdict != "stable" {
		return exitFailure
	}
	return exitOK
}

// soakWorker mixes operations: ~90% increments (one in ten on the check
// key), ~9.9% reads, ~0.1% clears.
func soakWorker(ctx context.Context, c *hotcount.Client, names []string, checkKey string, checkSent *atomic.Int64, counts *soakCounts, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, uint64(time.Now().UnixNano())))
	for i := 0; ctx.Err() == nil; i++ {
		k := names[rng.IntN(len(names))]
		switch r := rng.IntN(1000); {
		case r < 90:
			if err := c.Incr(ctx, checkKey, 1); err != nil {
				counts.fail(err)
				continue
			}
			checkSent.Add(1)
			counts.incrs.Add(1)
		case r < 900:
			if err := c.Incr(ctx, k, 1+int64(rng.IntN(3))); err != nil {
				if ctx.Err() == nil {
					counts.fail(err)
				}
				continue
			}
			counts.incrs.Add(1)
		case r < 999:
			if _, err := c.Get(ctx, k); err != nil {
				if ctx.Err() == nil {
					counts.fail(err)
				}
				continue
			}
			counts.gets.Add(1)
		default:
			if err := c.Clear(ctx, k); err != nil {
				if ctx.Err() == nil {
					counts.fail(err)
				}
				continue
			}
			counts.clears.Add(1)
		}
		if i%64 == 63 {
			time.Sleep(time.Millisecond) // leave the backend some air
		}
	}
}

// soakResizer grows and shrinks random counters, one at a time (a shrink
// waits out the metadata TTL).
func soakResizer(ctx context.Context, c *hotcount.Client, names []string, counts *soakCounts) {
	rng := rand.New(rand.NewPCG(7, uint64(time.Now().UnixNano())))
	sizes := []int{2, 4, 8}
	for ctx.Err() == nil {
		k := names[rng.IntN(len(names))]
		if err := c.Resize(ctx, k, sizes[rng.IntN(len(sizes))]); err != nil {
			switch {
			case errors.Is(err, hotcount.ErrConflict):
				// A clear or another resize of the counter at the same
				// moment: answered as such, and tried again later.
				counts.conflicts.Add(1)
			case ctx.Err() == nil:
				counts.fail(err)
			}
			continue
		}
		counts.resizes.Add(1)
	}
}

// soakSnapshot reads the runtime's memory and goroutine counts, after a
// GC so that heaps of two samples compare.
func soakSnapshot(start time.Time, c *hotcount.Client, counts *soakCounts) soakSample {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	el := time.Since(start)
	return soakSample{
		Elapsed:    el.Round(time.Second).String(),
		ElapsedMS:  el.Milliseconds(),
		Incrs:      counts.incrs.Load(),
		Gets:       counts.gets.Load(),
		Clears:     counts.clears.Load(),
		Resizes:    counts.resizes.Load(),
		Errors:     counts.errs.Load(),
		HeapInuse:  ms.HeapInuse,
		Sys:        ms.Sys,
		Goroutines: runtime.NumGoroutine(),
		Unflushed:  c.Stats().Buffer.Unflushed,
	}
}

// soakJudge compares the first and the last sample: growth of goroutines
// past soakGoroutineSlack, or of HeapInuse past twice the start plus
// soakHeapSlack, is suspect.
func soakJudge(first, last soakSample, d time.Duration, counts *soakCounts) soakVerdict {
	v := soakVerdict{
		Verdict:        "stable",
		Duration:       d.Round(time.Second).String(),
		HeapStart:      first.HeapInuse,
		HeapEnd:        last.HeapInuse,
		SysStart:       first.Sys,
		SysEnd:         last.Sys,
		GoroutineStart: first.Goroutines,
		GoroutineEnd:   last.Goroutines,
		Incrs:          counts.incrs.Load(),
		Gets:           counts.gets.Load(),
		Clears:         counts.clears.Load(),
		Resizes:        counts.resizes.Load(),
		Errors:         counts.errs.Load(),
	}
	if s, ok := counts.lastErr.Load().(string); ok {
		v.LastError = s
	}
	switch {
	case last.Goroutines > first.Goroutines+soakGoroutineSlack:
		v.Verdict, v.Reason = "growth", fmt.Sprintf("goroutines grew by %d", last.Goroutines-first.Goroutines)
	case last.HeapInuse > 2*first.HeapInuse+soakHeapSlack:
		v.Verdict, v.Reason = "growth", fmt.Sprintf("heap in use grew from %s to %s", mib(first.HeapInuse), mib(last.HeapInuse))
	}
	return v
}

// settledGoroutines returns the goroutine count once it has come down to
// base, or after a second of waiting for exiting goroutines to finish.
func settledGoroutines(base int) int {
	deadline := time.Now().Add(time.Second)
	n := runtime.NumGoroutine()
	for n > base && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
		n = runtime.NumGoroutine()
	}
	return n
}

func mib(b uint64) string { return fmt.Sprintf("%.1fMiB", float64(b)/(1<<20)) }
