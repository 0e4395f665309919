package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
)

// Timeouts and bounds of one round.
const (
	openConcurrency = 16               // instances opened or closed at once
	closeTimeout    = 30 * time.Second // draining every instance
	checkTimeout    = 10 * time.Second // reading back the total, clearing
)

// instance is one client instance and what it achieved.
type instance struct {
	c      *hotcount.Client
	sent   atomic.Int64
	errors atomic.Int64
	last   atomic.Value // error: the last Incr error
}

// openInstances opens p clients of cfg concurrently. On error the ones
// already open are closed.
func openInstances(ctx context.Context, b backend, cfg hotcount.Config, p int) ([]*instance, error) {
	ins := make([]*instance, p)
	errs := make([]error, p)
	forEach(p, func(i int) {
		c, err := b.open(ctx, cfg)
		if err != nil {
			errs[i] = err
			return
		}
		ins[i] = &instance{c: c}
	})
	if err := errors.Join(errs...); err != nil {
		_ = closeInstances(ins)
		return nil, err
	}
	return ins, nil
}

// closeInstances closes every instance (draining buffered deltas) and
// returns what went wrong.
func closeInstances(ins []*instance) error {
	ctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	errs := make([]error, len(ins))
	forEach(len(ins), func(i int) {
		if ins[i] != nil {
			errs[i] = ins[i].c.Close(ctx)
		}
	})
	return errors.Join(errs...)
}

// forEach calls f(0..n-1), openConcurrency at a time.
func forEach(n int, f func(int)) {
	sem := make(chan struct{}, openConcurrency)
	var wg sync.WaitGroup
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			f(i)
		})
	}
	wg.Wait()
}

// drive increments key from every instance for window, rate increments per
// second in total (0: unpaced), with w workers per instance. It returns
// the time from the start until the last increment returned.
func drive(ctx context.Context, ins []*instance, key string, rate float64, window time.Duration, w int) time.Duration {
	start := time.Now()
	end := start.Add(window)
	per := rate / float64(len(ins)*w) // increments per second of one worker
	var wg sync.WaitGroup
	for _, in := range ins {
		for range w {
			wg.Go(func() { work(ctx, in, key, start, end, per) })
		}
	}
	wg.Wait()
	return time.Since(start)
}

// work is one worker: it increments key until end, per increments per
// second (0: as fast as it can). A paced worker sleeps until its next
// increment is due, at least pacingTick, and then issues every increment
// due by now, so it catches up after falling behind.
func work(ctx context.Context, in *instance, key string, start, end time.Time, per float64) {
	var done int64
	for ctx.Err() == nil {
		now := time.Now()
		if !now.Before(end) {
			// Send what fell due during the last tick; a worker that fell
			// further behind leaves its backlog unsent.
			if due := int64(end.Sub(start).Seconds() * per); per > 0 && due-done <= int64(per*pacingTick.Seconds())+1 {
				for ; done < due && ctx.Err() == nil; done++ {
					in.incr(ctx, key)
				}
			}
			return
		}
		if per > 0 {
			due := int64(now.Sub(start).Seconds() * per)
			if due <= done {
				next := start.Add(time.Duration(float64(done+1) / per * float64(time.Second)))
				if wait := max(time.Until(next), pacingTick); wait > 0 {
					if !sleep(ctx, min(wait, time.Until(end))) {
						return
					}
				}
				continue
			}
			for ; done < due && ctx.Err() == nil; done++ {
				in.incr(ctx, key)
			}
			continue
		}
		in.incr(ctx, key)
	}
}

func (in *instance) incr(ctx context.Context, key string) {
	if err := in.c.Incr(ctx, key, 1); err != nil {
		in.errors.Add(1)
		in.last.Store(err)
		return
	}
	in.sent.Add(1)
}

// sleep waits d or until ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// sum adds the instances' counts.
func sum(ins []*instance) (sent, failed int64, last error) {
	for _, in := range ins {
		sent += in.sent.Load()
		failed += in.errors.Load()
		if e, ok := in.last.Load().(error); ok {
			last = e
		}
	}
	return sent, failed, last
}

// watch calls f about four times a second with the window's progress,
// until stop is closed.
func watch(ins []*instance, window time.Duration, stop <-chan struct{}, f func(elapsed time.Duration, sent int64)) {
	start := time.Now()
	t := time.NewTicker(250 * time.Millisecond)
	defer t.Stop()
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			s, _, _ := sum(ins)
			f(min(time.Since(start), window), s)
		}
	}
}

// round is the raw outcome of one load window.
type round struct {
	key            string
	base, total    int64 // the key's value before and after the round
	sent, failed   int64
	lastErr        error
	elapsed        time.Duration
	window, drain  map[string]int64 // writes by node
	reads          readSamples
	labelsByNode   map[string]int
	closeErr       error
	primaries      []string
	readErrs       int
	readErrExample error
}

// runRound drives mode m for one window on its key and checks that the
// total grew from base by the acknowledged increments. In the first round
// (base 0) the key is cleared first. step and steps are for Progress.
func runRound(ctx context.Context, s *settings, b backend, m Mode, base int64, step, steps int) (*round, error) {
	key := s.runKey(m)
	n := m.n(s.N)
	cfg := hotcount.Config{Defaults: hotcount.Namespace{N: n, NoColdStart: true, Buffered: m.buffered(), FlushInterval: s.Flush}, Meta: hotcount.MetaConfig{NaiveLabels: s.NaiveLabels}}
	// The checker reads the total back; it may wait longer than the
	// instances' default timeout on a loaded machine.
	checker, err := b.open(ctx, hotcount.Config{Defaults: hotcount.Namespace{N: n, NoColdStart: true}, Reads: hotcount.ReadConfig{NoCache: true}, Meta: hotcount.MetaConfig{NaiveLabels: s.NaiveLabels}, Timeout: checkTimeout})
	if err != nil {
		return nil, err
	}
	defer checker.Close(context.Background())
	reader, err := b.open(ctx, hotcount.Config{Defaults: hotcount.Namespace{N: n, NoColdStart: true}, Meta: hotcount.MetaConfig{NaiveLabels: s.NaiveLabels}})
	if err != nil {
		return nil, err
	}
	defer reader.Close(context.Background())
	topo, err := checker.Store().Topology(ctx)
	if err != nil {
		return nil, err
	}
	// A first write settles the key's label set (it pins placed labels in
	// its metadata record) before the write counters are first read; +1
	// and -1 leave its value as it was.
	out := &round{key: key, primaries: append([]string(nil), topo.Nodes...), labelsByNode: map[string]int{}}
	for _, d := range []int64{1, -1} {
		if err := checker.Incr(ctx, key, d); err != nil {
			return nil, fmt.Errorf("settling the labels of %q: %w", key, err)
		}
	}
	subs, err := checker.SubKeys(ctx, key)
	if err != nil {
		return nil, err
	}
	for _, sk := range subs {
		out.labelsByNode[topo.NodeOf(sk)]++
	}
	if step <= len(s.Modes) {
		if err := checker.Clear(ctx, key); err != nil {
			return nil, fmt.Errorf("clearing %q before the run: %w", key, err)
		}
	}
	out.base = base
	ins, err := openInstances(ctx, b, cfg, s.Procs)
	if err != nil {
		return nil, fmt.Errorf("opening %d instances: %w", s.Procs, err)
	}
	before, err := b.calls(ctx, out.primaries)
	if err != nil {
		_ = closeInstances(ins)
		return nil, err
	}

	stop := make(chan struct{})
	var bg sync.WaitGroup
	bg.Go(func() {
		out.reads, out.readErrs, out.readErrExample = sampleReads(ctx, b, reader, checker, key, subs, s.ReadEvery, stop)
	})
	if s.Progress != nil {
		bg.Go(func() {
			watch(ins, s.segment, stop, func(e time.Duration, sent int64) {
				s.Progress(Progress{Mode: m, Step: step, Steps: steps, Elapsed: e, Window: s.segment, Sent: sent})
			})
		})
	}
	out.elapsed = drive(ctx, ins, key, s.Rate, s.segment, s.workers(m))
	close(stop)
	bg.Wait()
	out.sent, out.failed, out.lastErr = sum(ins)

	// The counters are read with a fresh context: a cancelled run still
	// drains and reports what it did.
	cctx, cancel := context.WithTimeout(context.Background(), closeTimeout)
	defer cancel()
	mid, err := b.calls(cctx, out.primaries)
	if err != nil {
		_ = closeInstances(ins)
		return nil, err
	}
	out.closeErr = closeInstances(ins)
	after, err := b.calls(cctx, out.primaries)
	if err != nil {
		return nil, err
	}
	out.window, out.drain = writesBetween(b, before, mid), writesBetween(b, mid, after)
	rctx, cancel2 := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel2()
	got, err := checker.Get(rctx, key)
	if err != nil {
		return nil, fmt.Errorf("reading back %q: %w", key, err)
	}
	out.total = got.Value
	return out, nil
}

// clearKeys deletes the counters that the modes wrote, and their metadata
// records: benchmark keys are not reused.
func clearKeys(s *settings, b backend, modes []Mode) error {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	var errs []error
	for _, m := range modes {
		c, err := b.open(ctx, hotcount.Config{Defaults: hotcount.Namespace{N: m.n(s.N), NoColdStart: true}, Reads: hotcount.ReadConfig{NoCache: true}, Meta: hotcount.MetaConfig{NaiveLabels: s.NaiveLabels}, Timeout: checkTimeout})
		if err != nil {
			return err
		}
		key := s.runKey(m)
		if err := c.Clear(ctx, key); err != nil {
			errs = append(errs, err)
		} else if err := c.Store().Del(ctx, []string{keyspace.MetaKey(key)}); err != nil {
			errs = append(errs, err)
		}
		_ = c.Close(ctx)
	}
	return errors.Join(errs...)
}

// writesBetween returns the cache writes of each node between two
// readings of the call counts. The counts are subtracted before they are
// turned into writes, so scripts of earlier runs cannot skew a run.
func writesBetween(b backend, from, to map[string]calls) map[string]int64 {
	out := make(map[string]int64, len(to))
	for n, c := range to {
		out[n] = b.writes(c.minus(from[n]))
	}
	return out
}
