package bench

import (
	"context"
	"errors"
	"fmt"
	"net"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// Timeouts and bounds of one round.
const (
	openConcurrency = 16               // instances opened or closed at once
	closeTimeout    = 30 * time.Second // draining every instance
	checkTimeout    = 10 * time.Second // reading back the total, clearing
	// openCallTimeout bounds each call of an unbuffered open-loop run
	// (the client's default is 2 s). Such a run keeps up to
	// openCallBudget's worth of the offered rate in flight; a node that
	// falls behind answers them late, and a call that timed out would
	// leave its increment's outcome unknown (the total then no longer
	// checks). Late answers are reported as latency and, after the
	// window, as late.
	openCallTimeout = 10 * time.Second
)

// instanceConfig returns the client configuration of the instances of
// run v.
func (s *settings) instanceConfig(v variant) hotcount.Config {
	cfg := hotcount.Config{
		Defaults: hotcount.Namespace{N: v.n, NoColdStart: true, Buffered: v.mode.buffered(), FlushInterval: s.Flush},
		Meta:     hotcount.MetaConfig{NaiveLabels: s.NaiveLabels},
	}
	if s.Rate > 0 && !v.mode.buffered() {
		cfg.Timeout = openCallTimeout
	}
	return cfg
}

// instance is one client instance and what it achieved.
type instance struct {
	c        *hotcount.Client
	sent     atomic.Int64 // acknowledged increments
	achieved atomic.Int64 // of those, acknowledged within the window
	errors   atomic.Int64
	dropped  atomic.Int64 // scheduled but refused by a full queue
	unserved atomic.Int64 // scheduled but still queued when the window ended
	last     atomic.Value // error: the last Incr error
	lat      hist         // scheduled (or actual) start to acknowledgement
	wait     hist         // open-loop: scheduled start to its call's start
	call     hist         // open-loop: its call's start to its acknowledgement
}

// Opening an instance again after its connection timed out (see
// openInstances).
const (
	// openRetryWithin bounds the attempts of one instance: none starts
	// this long after its first. A node capped at 0.3% of a CPU, on a
	// machine whose CPUs were all busy, left a new connection's handshake
	// unanswered for up to 35 s.
	openRetryWithin = 30 * time.Second
	// openRetryPause is the wait before each further attempt: three CFS
	// periods of a node capped at 0.3% of a CPU.
	openRetryPause = time.Second
)

// openRetry says how openInstances retries an instance whose connection
// timed out: attempts start for within after the first, pause apart.
type openRetry struct {
	within, pause time.Duration
}

// defaultOpenRetry is the retry of every run and calibration.
var defaultOpenRetry = openRetry{within: openRetryWithin, pause: openRetryPause}

// openInstances opens p clients of cfg concurrently. On error the ones
// already open are closed.
//
// An instance whose open timed out (the backend unavailable because a
// connection's handshake or first slot-map read was not answered within
// the client's dial timeout, 2 s) is opened again, r.pause later, until
// r.within has passed since its first attempt: a node capped at a small
// share of a CPU answers a new connection only when its quota lets it
// run, and on a busy machine that was once later than the dial timeout
// for all eight instances of a run, which failed the whole bench (the
// calibration before it had left no increment queued at any node: its
// calls had all returned). Other errors, and a ctx that ends, are not
// retried. The error of an instance that never opened says how
// many attempts it made over how long, and wraps the last one's error.
func openInstances(ctx context.Context, b backend, cfg hotcount.Config, p int, r openRetry) ([]*instance, error) {
	ins := make([]*instance, p)
	errs := make([]error, p)
	forEach(p, func(i int) {
		c, err := openRetrying(ctx, b, cfg, r)
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

// openRetrying opens one client of cfg, again after each attempt that
// timed out, as openInstances says.
func openRetrying(ctx context.Context, b backend, cfg hotcount.Config, r openRetry) (*hotcount.Client, error) {
	first := time.Now()
	for attempt := 1; ; attempt++ {
		c, err := b.open(ctx, cfg)
		if err == nil {
			return c, nil
		}
		if !openTimedOut(err) || ctx.Err() != nil {
			return nil, err
		}
		if time.Since(first)+r.pause >= r.within {
			return nil, fmt.Errorf("connection still timing out after %d attempt(s) over %v: %w", attempt, time.Since(first).Round(time.Millisecond), err)
		}
		t := time.NewTimer(r.pause)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// openTimedOut says whether err is an open that failed because the
// backend did not answer in time (a dial, handshake or slot-map read that
// timed out), as opposed to one that answered with an error.
func openTimedOut(err error) bool {
	if !errors.Is(err, store.ErrUnavailable) {
		return false
	}
	var ne net.Error
	return errors.Is(err, context.DeadlineExceeded) || (errors.As(err, &ne) && ne.Timeout())
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

// latencyEvery is how often a closed-loop worker times an increment: one
// in latencyEvery, so that timing does not slow a buffered Incr (a few
// nanoseconds) several times over.
const latencyEvery = 16

// drive increments key from every instance for window: open-loop at rate
// increments per second in total, or closed-loop as fast as they can when
// rate is 0, with w workers per instance (open-loop: at most w calls of
// an instance in flight). It returns the time from the start until the
// last increment returned.
func drive(ctx context.Context, ins []*instance, key string, rate float64, window time.Duration, w int) time.Duration {
	start := time.Now()
	end := start.Add(window)
	var wg sync.WaitGroup
	if rate <= 0 {
		for _, in := range ins {
			for range w {
				wg.Go(func() { in.closedLoop(ctx, key, end) })
			}
		}
		wg.Wait()
		return time.Since(start)
	}
	queues := make([]chan time.Duration, len(ins))
	for i, in := range ins {
		queues[i] = make(chan time.Duration, maxBacklog)
		wg.Go(func() {
			in.serve(ctx, queues[i], start, end, w, func(at time.Duration, taken time.Time) {
				in.issue(ctx, key, start.Add(at), taken, end)
			})
		})
	}
	dispatch(ctx, ins, queues, rate, start, end)
	for _, q := range queues {
		close(q)
	}
	wg.Wait()
	return time.Since(start)
}

// dispatch schedules increment k at start + k/rate until end, handing
// each, when it falls due, to the next instance's queue (round robin); a
// full queue drops it. It wakes every millisecond and never waits for the
// cache: that is what makes the load open-loop.
func dispatch(ctx context.Context, ins []*instance, queues []chan time.Duration, rate float64, start, end time.Time) {
	total := int64(end.Sub(start).Seconds() * rate)
	var next int64
	t := time.NewTicker(time.Millisecond)
	defer t.Stop()
	for next < total {
		due := min(total, int64(time.Since(start).Seconds()*rate)+1)
		for ; next < due; next++ {
			i := next % int64(len(queues))
			at := time.Duration(float64(next) / rate * float64(time.Second))
			select {
			case queues[i] <- at:
			default:
				ins[i].dropped.Add(1)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// serve issues the increments of its instance's queue until the queue
// is closed, each in a goroutine of its own, with at most inFlight of
// them out at once: an increment waits in the queue only while inFlight
// calls are in flight. issue makes the call of the increment scheduled at
// at, taken from the queue at taken. Increments taken after end (or once
// ctx is done) are not issued but counted as unserved.
func (in *instance) serve(ctx context.Context, q <-chan time.Duration, start, end time.Time, inFlight int, issue func(at time.Duration, taken time.Time)) {
	slots := make(chan struct{}, max(inFlight, 1))
	var wg sync.WaitGroup
	defer wg.Wait()
	for at := range q {
		if ctx.Err() != nil || !time.Now().Before(end) {
			in.unserved.Add(1)
			continue
		}
		slots <- struct{}{} // waits while inFlight calls are out
		now := time.Now()
		if ctx.Err() != nil || !now.Before(end) {
			<-slots
			in.unserved.Add(1)
			continue
		}
		in.wait.add(now.Sub(start.Add(at)))
		wg.Go(func() {
			defer func() { <-slots }()
			issue(at, now)
		})
	}
}

// issue makes one open-loop call: the increment scheduled at start, taken
// from the queue at taken.
func (in *instance) issue(ctx context.Context, key string, start, taken, end time.Time) {
	if done, ok := in.incr(ctx, key, start, end); ok {
		in.call.add(done.Sub(taken))
	}
}

// closedLoop is one unpaced worker: it increments key until end, as fast
// as the cache answers, timing one increment in latencyEvery.
func (in *instance) closedLoop(ctx context.Context, key string, end time.Time) {
	for i := 0; ctx.Err() == nil; i++ {
		if i%latencyEvery == 0 {
			now := time.Now()
			if !now.Before(end) {
				return
			}
			in.incr(ctx, key, now, end)
			continue
		}
		if err := in.c.Incr(ctx, key, 1); err != nil {
			in.errors.Add(1)
			in.last.Store(err)
			continue
		}
		in.sent.Add(1)
		in.achieved.Add(1) // the window's end is checked every latencyEvery calls
	}
}

// incr increments key once and records its latency from start. It
// returns when the increment was acknowledged, and whether it was.
func (in *instance) incr(ctx context.Context, key string, start, end time.Time) (time.Time, bool) {
	err := in.c.Incr(ctx, key, 1)
	done := time.Now()
	if err != nil {
		in.errors.Add(1)
		in.last.Store(err)
		return done, false
	}
	in.sent.Add(1)
	if !done.After(end) {
		in.achieved.Add(1)
	}
	in.lat.add(done.Sub(start))
	return done, true
}

// tally is what the instances of a window achieved together.
type tally struct {
	sent, achieved, failed, dropped, unserved int64
	lastErr                                   error
}

// sum adds the instances' counts.
func sum(ins []*instance) tally {
	var t tally
	for _, in := range ins {
		t.sent += in.sent.Load()
		t.achieved += in.achieved.Load()
		t.failed += in.errors.Load()
		t.dropped += in.dropped.Load()
		t.unserved += in.unserved.Load()
		if e, ok := in.last.Load().(error); ok {
			t.lastErr = e
		}
	}
	return t
}

// latencies merges the instances' latency histograms.
func latencies(ins []*instance) *hist {
	h := new(hist)
	for _, in := range ins {
		h.merge(&in.lat)
	}
	return h
}

// waits merges the instances' queue-wait and call histograms.
func waits(ins []*instance) (wait, call *hist) {
	wait, call = new(hist), new(hist)
	for _, in := range ins {
		wait.merge(&in.wait)
		call.merge(&in.call)
	}
	return wait, call
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
			f(min(time.Since(start), window), sum(ins).sent)
		}
	}
}

// round is the raw outcome of one load window.
type round struct {
	key            string
	base, total    int64 // the key's value before and after the round
	tally                // what the instances achieved
	lat            *hist // latency of the increments
	wait, call     *hist // their wait for a caller, and the call itself (open-loop)
	elapsed        time.Duration
	workers        int                // goroutines per instance (open-loop: calls in flight)
	cpu            cpuUse             // the generator's and the machine's CPU over the window
	nodeCPU        map[string]float64 // each primary's CPU over the window, in CPUs
	window, drain  map[string]int64   // writes by node
	reads          readSamples
	labelsByNode   map[string]int
	closeErr       error
	primaries      []string
	readErrs       int
	readErrExample error
}

// runRound drives run v for one window on its key and checks that the
// total grew from base by the acknowledged increments. In the first round
// the key is cleared first. step and steps are for Progress.
func runRound(ctx context.Context, s *settings, b backend, v variant, base int64, step, steps int) (*round, error) {
	key, m, n := s.runKey(v), v.mode, v.n
	cfg := s.instanceConfig(v)
	// The checker reads the total back; it may wait longer than the
	// instances' default timeout on a loaded machine.
	checker, err := openRetrying(ctx, b, hotcount.Config{Defaults: hotcount.Namespace{N: n, NoColdStart: true}, Reads: hotcount.ReadConfig{NoCache: true}, Meta: hotcount.MetaConfig{NaiveLabels: s.NaiveLabels}, Timeout: checkTimeout}, defaultOpenRetry)
	if err != nil {
		return nil, err
	}
	defer checker.Close(context.Background())
	reader, err := openRetrying(ctx, b, hotcount.Config{Defaults: hotcount.Namespace{N: n, NoColdStart: true}, Meta: hotcount.MetaConfig{NaiveLabels: s.NaiveLabels}}, defaultOpenRetry)
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
	// A clear removes the counter's metadata as well: it comes first.
	if step <= len(s.variants) {
		if err := checker.Clear(ctx, key); err != nil {
			return nil, fmt.Errorf("clearing %q before the run: %w", key, err)
		}
	}
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
	out.base = base
	ins, err := openInstances(ctx, b, cfg, s.Procs, defaultOpenRetry)
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
	node0 := nodeCPUs(ctx, b, out.primaries)
	cpu0 := sampleCPU()
	out.workers = s.workers(m, len(out.labelsByNode))
	out.elapsed = drive(ctx, ins, key, s.Rate, s.segment, out.workers)
	out.cpu = cpuBetween(cpu0, sampleCPU(), runtime.NumCPU())
	out.nodeCPU = nodeCPUsSince(ctx, b, node0)
	close(stop)
	bg.Wait()
	out.tally, out.lat = sum(ins), latencies(ins)
	out.wait, out.call = waits(ins)

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

// clearKeys deletes the counters that the runs wrote, and their metadata
// records: benchmark keys are not reused.
func clearKeys(s *settings, b backend, runs []variant) error {
	ctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
	defer cancel()
	var errs []error
	for _, v := range runs {
		c, err := b.open(ctx, hotcount.Config{Defaults: hotcount.Namespace{N: v.n, NoColdStart: true}, Reads: hotcount.ReadConfig{NoCache: true}, Meta: hotcount.MetaConfig{NaiveLabels: s.NaiveLabels}, Timeout: checkTimeout})
		if err != nil {
			return err
		}
		key := s.runKey(v)
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

// nodeCPU is a node's CPU time (INFO cpu) and when it was read.
type nodeCPU struct {
	seconds float64
	at      time.Time
}

// nodeCPUs reads the CPU time of each node; nodes that do not answer, and
// every node of the embedded store, are left out.
func nodeCPUs(ctx context.Context, b backend, nodes []string) map[string]nodeCPU {
	out := make(map[string]nodeCPU, len(nodes))
	for _, n := range nodes {
		if s, err := b.cpuSeconds(ctx, n); err == nil {
			out[n] = nodeCPU{s, time.Now()}
		}
	}
	return out
}

// nodeCPUsSince returns the CPU each node of before has used since, in
// CPUs over the time between the two readings.
func nodeCPUsSince(ctx context.Context, b backend, before map[string]nodeCPU) map[string]float64 {
	if len(before) == 0 {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), checkTimeout)
	defer cancel()
	out := make(map[string]float64, len(before))
	for n, c0 := range before {
		if s1, err := b.cpuSeconds(cctx, n); err == nil {
			if d := time.Since(c0.at).Seconds(); d > 0 {
				out[n] = (s1 - c0.seconds) / d
			}
		}
	}
	return out
}
