package durability

// Self-healing cache view of durable-mode counters.
//
// The cache view of a durable counter can fall behind its log: a process
// killed between a commit and the flush of its buffer loses the delta from
// the view (never from the log), a delta the buffer refused (ViewMisses)
// is missing, and a cache node that comes back empty loses the view of
// every counter it held. The healer finds and repairs such differences
// without an operator.
//
// Every HealInterval a sweep reads the log's keys (Log.KeysAfter) from
// where the last sweep stopped, in key order, listPage at a time and at
// most healPerSweep of them, never the whole log. Of each page it takes
// the counters in durable mode and, rebuildChunk at a time, measures each
// counter's difference D = T − S between its exact total T (Log.ExactMulti) and its view S
// (the sum of its sub-counters). The measurement is made while this
// process's commits are held (for one flush, one cache read and one log
// read, each bounded by the Timeout) and after its buffer was flushed, so no
// increment of this process is between its commit and the cache: D is the
// view's error plus what other processes have in flight for the counter.
//
// A counter is repaired when two measurements at least one interval apart
// (two sweeps) found the same D ≠ 0: D is then added to one sub-counter
// with an idempotent increment. Deltas in flight come and go within a
// flush interval, so a D that stood still for a whole interval is the
// view's error; the counter may be written all the while, by this process
// or by any number of processes one after the other. A counter that
// several processes write at the same moment heals as soon as its D holds
// still across two sweeps. Should a repair still meet a delta that stayed
// in flight longer (a process whose flushes failed for an interval while
// this one could read), the view is off by that delta until the next
// sweeps repair it back: the log is never touched, and every repair is
// measured against it.
//
// Only one process sweeps per interval: each sweep first claims the
// interval's number (the clock's time divided by HealInterval) in the
// cache with an increment guarded by a token, so two processes never
// repair the same difference twice.
//
// The bound: a view error that stands still is repaired within
// 2 × HealInterval plus two sweeps' duration after it arose (with more
// than healPerSweep durable counters in the log, one more interval per
// healPerSweep counters: a pass over the log takes that many sweeps). A
// node found empty by the checkpoint round starts a sweep at once.
//
// Honest staleness: from the sweep that found a counter's view off until
// it is repaired, and from a node loss until the end of the first pass
// that started after it, Behind reports how long the view has been known
// to be behind; the Client adds it to the Stale of its readings.
//
// Clears: a counter whose log was cleared has no log keys and no exact
// total, so a sweep never adds to it; before a repair the tombstones of the
// counters are read, and a counter cleared since its first measurement is
// measured again instead of repaired.

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/internal/ns"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

const (
	// DefaultHealInterval is how often the cache view of durable-mode
	// counters is compared with the log.
	DefaultHealInterval = 5 * time.Second
	// healKey is the cache key whose tokens claim the sweeps.
	healKey = "hotcount:heal:{0}"
	// healTokenTTL is how long a sweep claim or a repair token is kept.
	healTokenTTL = time.Hour
)

// healPerSweep is the most log keys one sweep reads (and counters it
// measures); a sweep reads them listPage at a time from where the last one
// stopped. A variable for tests.
var healPerSweep = 100_000

// healObs is a measured difference of one counter.
type healObs struct {
	diff int64
	at   time.Time // when diff was first measured
}

type healer struct {
	d        *Service
	interval time.Duration
	kick     chan struct{}

	sweepMu sync.Mutex // one sweep at a time; guards obs and cursor
	obs     map[string]healObs
	cursor  string // last key of a partial pass ("" from the start)
	// passStart is when the pass over the log that the cursor is in
	// started.
	passStart time.Time

	mu     sync.RWMutex
	behind map[string]time.Time // counter → since when its view is known off
	lossAt time.Time            // a node loss not yet followed by a whole pass
	nstale atomic.Int64         // len(behind), plus 1 while lossAt is set

	sweeps, skipped, repairs, errs atomic.Uint64
	amount                         atomic.Int64
}

func (h *healer) init(d *Service, interval time.Duration) {
	h.d, h.interval = d, interval
	h.kick = make(chan struct{}, 1)
	h.obs = map[string]healObs{}
	h.behind = map[string]time.Time{}
}

// nodeLost notes that a cache node came back empty: every durable counter
// may be behind until a pass over the log that starts after now has
// ended. A sweep starts now.
func (h *healer) nodeLost(at time.Time) {
	h.mu.Lock()
	if h.lossAt.IsZero() {
		h.nstale.Add(1)
		h.lossAt = at
	}
	h.mu.Unlock()
	select {
	case h.kick <- struct{}{}:
	default:
	}
}

// Behind returns how long the cache view of durable counter key has been
// known to be behind its log, or 0.
func (d *Service) Behind(key string) time.Duration {
	h := &d.heal
	if h.nstale.Load() == 0 {
		return 0
	}
	h.mu.RLock()
	since, ok := h.behind[key]
	if !ok || (!h.lossAt.IsZero() && h.lossAt.Before(since)) {
		since = h.lossAt
	}
	h.mu.RUnlock()
	if since.IsZero() {
		return 0
	}
	return max(d.cfg.Clock.Now().Sub(since), 0)
}

// HealReport is the outcome of one sweep.
type HealReport struct {
	// Claimed is false when another process swept this interval.
	Claimed bool
	// Keys is the number of counters measured, Behind how many of them
	// had a view different from the log.
	Keys, Behind int
	// Repaired is the number of counters repaired and Amount the sum of
	// the repairs (positive: the view was behind).
	Repaired int
	Amount   int64
}

// Heal runs one sweep of the healer now (see the file comment of heal.go):
// it measures durable-mode counters against the log and repairs those
// whose difference stood still since the last sweep.
func (d *Service) Heal(ctx context.Context) (HealReport, error) {
	h := &d.heal
	h.sweepMu.Lock()
	defer h.sweepMu.Unlock()
	var rep HealReport
	if d.com == nil || h.d == nil {
		return rep, nil
	}
	start := d.cfg.Clock.Now()
	claimed, err := h.claim(ctx, start)
	if err != nil || !claimed {
		if err != nil {
			h.errs.Add(1)
		} else {
			h.skipped.Add(1)
		}
		return rep, err
	}
	rep.Claimed = true
	h.sweeps.Add(1)
	// Page through the log from the cursor: at most healPerSweep keys
	// this sweep, one page (listPage) at a time, each measured before the
	// next is read.
	if h.cursor == "" {
		h.passStart = start
	}
	for budget := healPerSweep; budget > 0; {
		from, limit := h.cursor, min(listPage, budget)
		lctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
		page, err := d.be.KeysAfter(lctx, "", from, limit)
		cancel()
		if err != nil {
			h.errs.Add(1)
			return rep, fmt.Errorf("heal: %w", err)
		}
		budget -= len(page)
		keys := make([]string, 0, len(page))
		for _, k := range page {
			if keyspace.Validate(k) == nil && d.ns.Lookup(k).Mode == ns.ModeDurable {
				keys = append(keys, k)
			}
		}
		seen := make(map[string]bool, len(keys))
		for s := 0; s < len(keys); s += rebuildChunk {
			if err := h.sweepChunk(ctx, keys[s:min(s+rebuildChunk, len(keys))], seen, &rep); err != nil {
				h.errs.Add(1)
				return rep, err
			}
		}
		last := len(page) < limit // the end of the log
		to := ""
		if !last {
			to = page[len(page)-1]
		}
		h.forget(from, to, seen, last)
		h.cursor = to
		if last {
			break
		}
	}
	return rep, nil
}

// forget drops what the healer holds of the counters after from (all
// from the start for "") up to to (to the end when last) that a sweep
// read from the log without measuring them (cleared, or no longer in
// durable mode). At the end of a pass that started after a node loss,
// the staleness of the loss ends: every counter was measured since.
func (h *healer) forget(from, to string, seen map[string]bool, last bool) {
	in := func(k string) bool { return k > from && (last || k <= to) && !seen[k] }
	h.mu.Lock()
	defer h.mu.Unlock()
	for k := range h.obs {
		if in(k) {
			delete(h.obs, k)
		}
	}
	for k := range h.behind {
		if in(k) {
			delete(h.behind, k)
		}
	}
	if last && !h.lossAt.IsZero() && h.lossAt.Before(h.passStart) {
		h.lossAt = time.Time{}
	}
	h.recount()
}

// recount sets nstale; h.mu is held.
func (h *healer) recount() {
	n := int64(len(h.behind))
	if !h.lossAt.IsZero() {
		n++
	}
	h.nstale.Store(n)
}

// claim takes the sweep of the current interval, unless another process
// took it.
func (h *healer) claim(ctx context.Context, now time.Time) (bool, error) {
	n := now.UnixNano() / int64(h.interval)
	ctx, cancel := context.WithTimeout(ctx, h.d.cfg.Timeout)
	defer cancel()
	res, err := h.d.eng.Store().IncrMulti(ctx, []store.IncrOp{{Key: healKey, Delta: 1,
		TokenKey: healKey + ":" + strconv.FormatInt(n, 10), TTL: healTokenTTL}})
	if err == nil && res[0].Err != nil {
		err = res[0].Err
	}
	if err != nil {
		return false, fmt.Errorf("heal: claim: %w", err)
	}
	return res[0].Applied, nil
}

// measure returns D = exact − view of every key, read while this
// process's commits are held and its buffer is flushed.
func (h *healer) measure(ctx context.Context, keys []string) (map[string]int64, error) {
	d := h.d
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.closed {
		return nil, fmt.Errorf("heal: %w", store.ErrClosed)
	}
	// Commits wait while the lock is held: bound it by one round trip
	// each for the flush and the read (a cache that cannot take the flush
	// fails the sweep, and commits go on).
	fctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	err := d.eng.Flush(fctx)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("heal: %w", err)
	}
	rctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	reads, _, _, err := d.eng.Read(rctx, keys, nil)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("heal: %w", err)
	}
	ectx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
	exact, err := d.be.ExactMulti(ectx, keys)
	cancel()
	if err != nil {
		return nil, fmt.Errorf("heal: %w", err)
	}
	out := make(map[string]int64, len(reads))
	for _, r := range reads {
		sum, err := r.Sum()
		if err != nil {
			continue // an unreadable view is not healed by adding to it
		}
		t := exact[r.Key]
		diff := t - sum
		if (sum < 0 && diff < t) || (sum > 0 && diff > t) {
			continue // overflow
		}
		out[r.Key] = diff
	}
	return out, nil
}

// sweepChunk measures keys and repairs those whose difference stood still
// since the previous sweep.
func (h *healer) sweepChunk(ctx context.Context, keys []string, seen map[string]bool, rep *HealReport) error {
	d := h.d
	diffs, err := h.measure(ctx, keys)
	if err != nil {
		return err
	}
	now := d.cfg.Clock.Now()
	var cands []string
	h.mu.Lock()
	for _, k := range keys {
		diff, ok := diffs[k]
		if !ok {
			continue
		}
		seen[k] = true
		rep.Keys++
		if diff == 0 {
			delete(h.obs, k)
			delete(h.behind, k)
			continue
		}
		rep.Behind++
		if _, ok := h.behind[k]; !ok {
			h.behind[k] = now
		}
		o, ok := h.obs[k]
		if ok && o.diff == diff && now.Sub(o.at) >= h.interval {
			cands = append(cands, k)
			continue
		}
		if !ok || o.diff != diff {
			h.obs[k] = healObs{diff: diff, at: now}
		}
	}
	h.recount()
	h.mu.Unlock()
	if len(cands) == 0 {
		return nil
	}
	tctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	tombs, err := d.be.Tombstones(tctx, cands)
	cancel()
	if err != nil {
		return fmt.Errorf("heal: %w", err)
	}
	dls, err := d.recordedDeadlines(ctx, cands)
	if err != nil {
		return fmt.Errorf("heal: %w", err)
	}
	var ops []store.IncrOp
	for _, k := range cands {
		o := h.obs[k]
		if at, ok := tombs[k]; ok && !at.Before(o.at.Add(-h.interval)) {
			delete(h.obs, k) // cleared meanwhile: measure again
			continue
		}
		write, _, err := d.eng.Labels(ctx, k)
		if err != nil {
			return fmt.Errorf("heal %q: %w", k, err)
		}
		expireAt, ended := viewDeadline(dls, k, write[0], now)
		if ended {
			h.mu.Lock()      // Behind reads h.behind from callers' goroutines
			delete(h.obs, k) // the clean-up pass clears its log
			delete(h.behind, k)
			h.recount()
			h.mu.Unlock()
			continue
		}
		ops = append(ops, store.IncrOp{Key: keyspace.SubKey(k, write[0]), Delta: o.diff, TTL: healTokenTTL, ExpireAt: expireAt,
			TokenKey: keyspace.AuxKey(k, write[0], "heal", strconv.FormatInt(o.at.UnixNano(), 10)+"."+strconv.FormatInt(o.diff, 10))})
	}
	if len(ops) == 0 {
		return nil
	}
	ictx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	res, err := d.eng.Store().IncrMulti(ictx, ops)
	cancel()
	if err != nil {
		return fmt.Errorf("heal: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for j, r := range res {
		key, _, _ := keyspace.ParseSubKey(ops[j].Key)
		if r.Err != nil {
			continue // measured again next sweep
		}
		delete(h.obs, key)
		delete(h.behind, key)
		d.eng.Drop(key)
		if r.Applied {
			rep.Repaired++
			rep.Amount += ops[j].Delta
			h.repairs.Add(1)
			h.amount.Add(ops[j].Delta)
		}
	}
	h.recount()
	return nil
}

// stats fills the healer's part of s.
func (h *healer) stats(s *Stats) {
	s.HealSweeps, s.HealSkipped, s.HealErrors = h.sweeps.Load(), h.skipped.Load(), h.errs.Load()
	s.Repairs, s.RepairedAmount = h.repairs.Load(), h.amount.Load()
	h.mu.RLock()
	s.Behind = uint64(len(h.behind))
	h.mu.RUnlock()
}
