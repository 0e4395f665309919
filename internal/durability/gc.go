package durability

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/internal/engine"
	"github.com/hotcount/hotcount/internal/ns"
	"github.com/hotcount/hotcount/store"
)

// Clears, deadlines and the clean-up pass.
//
// A clear is recorded in the durable store at once (ClearCounter: the
// counter's checkpoints, metadata, rollup total and log events go, and a
// tombstone keeps a late checkpoint, a restore or a rebuild from bringing
// the counter back).
//
// # A deadline is part of the counter
//
// Every copy of a counter's value carries its deadline, so that no copy
// outlives the counter. The durable store records deadlines in one table
// (durable.SetDeadlines), beside the checkpoints and the log:
//
//   - Expire records the deadline exactly, Persist removes it.
//   - In a namespace with a TTL, the deadline is TTL after the counter's
//     first write, given by the cache (PEXPIREAT … NX with the write). The
//     checkpoint round reads it from the cache (the cold key's deadline,
//     or a sharded counter's record) for the counters it saves that it has
//     not recorded one for, and records it before it saves their values;
//     the clean-up pass does the same for the counters this process wrote
//     (durable-mode ones too). Both record what the cache holds, exact
//     whichever process wrote first, and replace an estimate; neither
//     replaces a record that has passed (the sweep settles it first). A
//     counter the cache does not hold yet (a delta not flushed) is noted
//     with an estimate, the time this process saw it written plus the TTL,
//     which never replaces a record.
//   - A restore after a node came back empty (at start, too), a rebuild of
//     a durable counter's view and a repair by the healer give the
//     sub-counters they write the recorded deadline (the cold one exactly
//     at it, the others store.DeadlineGrace later), or this process's
//     pending estimate; a counter whose deadline passed is not written
//     back at all.
//   - Grows and folds happen in the cache: a new sub-counter takes the
//     counter's deadline from its record, and a fold gives the one it
//     moves a value into that deadline too, if it has none (meta).
//
// # The clean-up pass
//
// The clean-up pass runs every CleanupInterval. It writes the pending
// notes, then takes the deadline records that have passed, oldest first,
// and clears each counter in the store as of its recorded deadline. A
// record is never earlier than its counter's deadline (Expire and Persist
// rewrite it), so the counter it names has ended by then, even when its
// cache node lost its data. The cache is asked about each key: when a
// counter started again under it since (or was extended), it lives on,
// and only what is older than it is cleared (ClearEnded): its values are
// checkpointed again first (a value equal to the old counter's last
// checkpoint was never saved again), a sharded one keeps its metadata,
// and the record moves to its deadline (or goes, when it has none). A
// counter the cache no longer serves loses every row. The pass never
// touches the cache.
//
// Then the pass prunes IDs and tombstones past their retention (the
// tombstone of a clear as of a past deadline counts its retention from
// the deadline) and measures the store (durable.Stats) for the metrics.

// DefaultCleanupInterval is how often the clean-up pass runs.
const DefaultCleanupInterval = time.Minute

// cleanupBatch is how many passed deadlines one step of the pass takes;
// cleanupWorkers how many of them are looked at concurrently.
const (
	cleanupBatch   = 1000
	cleanupWorkers = 8
)

// CleanupReport is the outcome of one clean-up pass.
type CleanupReport struct {
	// Noted is the number of deadline estimates written.
	Noted int
	// Pruned is what the prune removed.
	Pruned durable.PruneReport
	// Expired is the number of expired counters cleared in the store;
	// Moved the deadline records moved to a later deadline (a counter
	// started again under the key, or was extended).
	Expired, Moved int
	// Errors is the number of counters the pass could not settle (left
	// for the next pass).
	Errors int
	// Store is the durable store's size after the pass; Cache what each
	// cache node holds (when the cache can tell: Redis).
	Store durable.Stats
	Cache []store.NodeUsage
}

// gc is the clean-up state of a Service.
type gc struct {
	mu      sync.Mutex
	pending map[string]time.Time // counter → deadline estimate to write
	noted   sync.Map             // counter → unix ns it was last noted until
	nnoted  atomic.Int64

	running                                  sync.Mutex // one pass at a time
	passes, passErrs, expired, moved, errs   atomic.Uint64
	clears, clearErrs, notes, prunedIDs, pTS atomic.Uint64
	lastPass                                 atomic.Int64
	store                                    atomic.Pointer[durable.Stats]
	cache                                    atomic.Pointer[[]store.NodeUsage]
}

// noteTTL notes a write of key, for the deadline estimate of a counter in
// a namespace with a TTL. It costs a map look-up per write; a counter is
// noted again once its last estimate has passed.
func (d *Service) noteTTL(n *ns.Namespace, key string) {
	if n.TTL <= 0 {
		return
	}
	now := d.cfg.Clock.Now()
	if v, ok := d.gc.noted.Load(key); ok && now.UnixNano() < v.(int64) {
		return
	}
	at := now.Add(n.TTL)
	if d.gc.nnoted.Load() >= MaxTracked {
		d.gc.noted.Clear() // forget, and note again: only costs writes
		d.gc.nnoted.Store(0)
	}
	if _, loaded := d.gc.noted.Swap(key, at.UnixNano()); !loaded {
		d.gc.nnoted.Add(1)
	}
	d.gc.mu.Lock()
	if _, ok := d.gc.pending[key]; !ok {
		if d.gc.pending == nil {
			d.gc.pending = map[string]time.Time{}
		}
		d.gc.pending[key] = at
	}
	d.gc.mu.Unlock()
}

// Cleared records in the durable store that the counter key was cleared
// (or expired) now: its checkpoints, metadata and log go, and no
// checkpoint read before now, restore or rebuild brings it back.
func (d *Service) Cleared(ctx context.Context, key string) error {
	now := d.cfg.Clock.Now()
	d.gc.noted.Delete(key)
	ctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
	defer cancel()
	if err := d.be.ClearCounter(ctx, key, now); err != nil {
		d.gc.clearErrs.Add(1)
		return fmt.Errorf("clear %q in the durable store: %w", key, err)
	}
	d.gc.clears.Add(1)
	d.ck.cleared(key)
	return nil
}

// Deadline records the deadline of key (zero: none) in the durable store.
// A deadline not after now is a clear.
func (d *Service) Deadline(ctx context.Context, key string, at time.Time) error {
	if !at.IsZero() && !at.After(d.cfg.Clock.Now()) {
		return d.Cleared(ctx, key)
	}
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	if err := d.be.SetDeadlines(ctx, map[string]time.Time{key: at}, false); err != nil {
		return fmt.Errorf("record the deadline of %q: %w", key, err)
	}
	if !at.IsZero() {
		d.gc.noted.Store(key, at.UnixNano())
	}
	return nil
}

// Cleanup runs one clean-up pass now (see the top of gc.go). A pass is
// bounded by ten cleanup intervals; what is left waits for the next one.
func (d *Service) Cleanup(ctx context.Context) (CleanupReport, error) {
	d.gc.running.Lock()
	defer d.gc.running.Unlock()
	ctx, cancel := context.WithTimeout(ctx, 10*d.cfg.CleanupInterval+d.cfg.Timeout)
	defer cancel()
	var rep CleanupReport
	var errs []error
	d.gc.mu.Lock()
	notes := d.gc.pending
	d.gc.pending = nil
	d.gc.mu.Unlock()
	if len(notes) > 0 {
		if err := d.writeNotes(ctx, notes); err != nil {
			errs = append(errs, fmt.Errorf("note deadlines: %w", err))
			d.gc.mu.Lock() // keep them for the next pass
			if d.gc.pending == nil {
				d.gc.pending = notes
			} else {
				for k, at := range notes {
					d.gc.pending[k] = at
				}
			}
			d.gc.mu.Unlock()
		} else {
			rep.Noted = len(notes)
			d.gc.notes.Add(uint64(len(notes)))
		}
	}
	if err := d.sweep(ctx, &rep); err != nil {
		errs = append(errs, err)
	}
	pr, err := d.be.Prune(ctx)
	rep.Pruned = pr
	d.gc.prunedIDs.Add(uint64(pr.IDs))
	d.gc.pTS.Add(uint64(pr.Tombstones))
	if err != nil {
		errs = append(errs, fmt.Errorf("prune: %w", err))
	}
	if st, err := d.be.Stats(ctx); err != nil {
		errs = append(errs, fmt.Errorf("measure the store: %w", err))
	} else {
		rep.Store = st
		d.gc.store.Store(&st)
	}
	if u, ok := d.eng.Store().(store.Usager); ok {
		if nodes, err := u.Usage(ctx); err != nil {
			errs = append(errs, fmt.Errorf("measure the cache: %w", err))
		} else {
			rep.Cache = nodes
			d.gc.cache.Store(&nodes)
		}
	}
	d.gc.passes.Add(1)
	d.gc.expired.Add(uint64(rep.Expired))
	d.gc.moved.Add(uint64(rep.Moved))
	d.gc.errs.Add(uint64(rep.Errors))
	err = errors.Join(errs...)
	if err != nil {
		d.gc.passErrs.Add(1)
		return rep, fmt.Errorf("clean-up: %w", err)
	}
	d.gc.lastPass.Store(d.cfg.Clock.Now().UnixNano())
	return rep, nil
}

// writeNotes writes the deadlines of the counters this process noted
// written in a namespace with a TTL: the deadline the cache holds, which
// is exact, for the counters it holds (replacing an estimate another
// process wrote), and the estimate notes gives for the others (a delta
// not flushed yet), which never replaces a record. A counter the cache
// holds without a deadline was persisted, and its record removed then.
func (d *Service) writeNotes(ctx context.Context, notes map[string]time.Time) error {
	keys := make([]string, 0, len(notes))
	for k := range notes {
		keys = append(keys, k)
	}
	ds, err := d.cacheDeadlines(ctx, keys)
	if err != nil {
		return err
	}
	exact, est := map[string]time.Time{}, map[string]time.Time{}
	for i, k := range keys {
		switch {
		case ds[i].Exists && !ds[i].At.IsZero():
			exact[k] = ds[i].At
		case !ds[i].Exists:
			est[k] = notes[k]
		}
	}
	if exact, err = d.recordExact(ctx, exact); err != nil {
		return err
	}
	for k, at := range exact {
		d.gc.noted.Store(k, at.UnixNano())
	}
	return d.be.SetDeadlines(ctx, est, true)
}

// recordExact records the deadlines dls, read from the cache, over the
// records of their counters, except over a record that has passed: the
// counter it names ended then, and the next sweep clears what it left
// before it moves the record to the counter that lives on. It returns the
// deadlines recorded.
func (d *Service) recordExact(ctx context.Context, dls map[string]time.Time) (map[string]time.Time, error) {
	if len(dls) == 0 {
		return dls, nil
	}
	keys := make([]string, 0, len(dls))
	for k := range dls {
		keys = append(keys, k)
	}
	recs, err := d.loadDeadlines(ctx, keys)
	if err != nil {
		return nil, err
	}
	now := d.cfg.Clock.Now()
	for k, rec := range recs {
		if !now.Before(rec) {
			delete(dls, k)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
	defer cancel()
	if err := d.be.SetDeadlines(ctx, dls, false); err != nil {
		return nil, err
	}
	return dls, nil
}

// sweep settles the deadline records that have passed, batch by batch,
// each counter once per pass.
func (d *Service) sweep(ctx context.Context, rep *CleanupReport) error {
	now := d.cfg.Clock.Now()
	seen := map[string]bool{}
	stuck := 0 // counters that failed this pass: their records stay due
	for {
		limit := cleanupBatch + stuck
		due, err := d.be.DueDeadlines(ctx, now, limit)
		if err != nil {
			return fmt.Errorf("passed deadlines: %w", err)
		}
		var keys []string
		for k := range due {
			if !seen[k] {
				seen[k] = true
				keys = append(keys, k)
			}
		}
		if len(keys) == 0 {
			return nil
		}
		errs0 := rep.Errors
		var mu sync.Mutex
		moved := map[string]time.Time{}
		work := make(chan string)
		var wg sync.WaitGroup
		for range min(cleanupWorkers, len(keys)) {
			wg.Go(func() {
				for k := range work {
					at, later, err := d.settle(ctx, k, due[k], now)
					mu.Lock()
					switch {
					case err != nil:
						rep.Errors++
					case later:
						moved[k] = at
					default:
						rep.Expired++
					}
					mu.Unlock()
				}
			})
		}
		for _, k := range keys {
			work <- k
		}
		close(work)
		wg.Wait()
		if len(moved) > 0 {
			if err := d.be.SetDeadlines(ctx, moved, false); err != nil {
				return fmt.Errorf("move deadlines: %w", err)
			}
			rep.Moved += len(moved)
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		stuck += rep.Errors - errs0
		if len(due) < limit {
			return nil
		}
	}
}

// settle looks at one counter whose recorded deadline rec passed and
// clears in the store what it held as of when it ended: rec, or, when a
// counter of a namespace with a TTL started again since, its first write
// (its deadline less the TTL), if earlier. It returns the deadline to
// record instead with later = true when a counter lives on under the key
// (started again, or extended); then only what is older than that counter
// is cleared.
func (d *Service) settle(ctx context.Context, key string, rec, now time.Time) (at time.Time, later bool, err error) {
	cctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	at, exists, err := d.eng.Deadline(cctx, key)
	cancel()
	if err != nil {
		return time.Time{}, false, err
	}
	if exists && !at.IsZero() && !at.After(now) {
		// Past its deadline but not gone yet (a buffered delta, a key
		// Redis has not expired yet): the next pass looks again.
		return now.Add(d.cfg.CleanupInterval), true, nil
	}
	if exists && at.IsZero() && d.ns.Lookup(key).TTL > 0 {
		// Persisted: in a namespace with a TTL every counter starts
		// with a deadline, so this is the counter the record was for.
		return time.Time{}, true, nil
	}
	end := rec
	if ttl := d.ns.Lookup(key).TTL; exists && !at.IsZero() && ttl > 0 && at.Add(-ttl).Before(end) {
		end = at.Add(-ttl)
	}
	clear := d.be.ClearCounter
	if exists {
		// A counter lives on under the key: its store side stays. Its
		// values are saved now, newer than end (a value it shares with
		// the old counter's last checkpoint was never saved again), and
		// a sharded one keeps its metadata.
		sharded, err := d.liveSide(ctx, key)
		if err != nil {
			return time.Time{}, false, err
		}
		if sharded {
			clear = d.be.ClearEnded
		}
	}
	cctx, cancel = context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
	defer cancel()
	if err := clear(cctx, key, end); err != nil {
		return time.Time{}, false, err
	}
	if exists && at.IsZero() {
		// Lives on without a deadline: no record is left for it.
		if err := d.be.SetDeadlines(cctx, map[string]time.Time{key: {}}, false); err != nil {
			return time.Time{}, false, err
		}
	}
	if !exists {
		d.ck.cleared(key)
		d.gc.noted.Delete(key)
	}
	return at, exists && !at.IsZero(), nil
}

// liveSide saves the store side of counter key, which lives in the cache
// past a deadline record of an older counter, before the pass clears what
// the older one left: the checkpoints of a fast-mode counter, read now. It
// reports whether the counter has a metadata record (sharded), which the
// clear must then keep.
func (d *Service) liveSide(ctx context.Context, key string) (sharded bool, err error) {
	if mm := d.eng.Meta(); mm != nil {
		mctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
		mt, err := mm.Meta(mctx, key)
		cancel()
		if err != nil {
			return false, err
		}
		sharded = mt.Epoch > 0
	}
	if d.ns.Lookup(key).Mode == ns.ModeDurable {
		return sharded, nil // its log events after the end stay
	}
	return sharded, d.ck.saveNow(ctx, key)
}

// cacheDeadlines reads from the cache whether each counter of keys exists
// and its deadline (engine.Deadlines), ckCounters at a time. A cache that
// keeps no deadlines knows of none.
func (d *Service) cacheDeadlines(ctx context.Context, keys []string) ([]store.Deadline, error) {
	out := make([]store.Deadline, 0, len(keys))
	for start := 0; start < len(keys); start += ckCounters {
		cctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
		ds, err := d.eng.Deadlines(cctx, keys[start:min(start+ckCounters, len(keys))])
		cancel()
		if errors.Is(err, engine.ErrNoExpiry) {
			return make([]store.Deadline, len(keys)), nil
		}
		if err != nil {
			return nil, err
		}
		out = append(out, ds...)
	}
	return out, nil
}

// pastNote reports whether this process noted a deadline of key (an
// estimate or an exact one) that at has reached: a reading of 0 then is
// of an expired counter, and saving it would only leave a row behind.
func (d *Service) pastNote(key string, at time.Time) bool {
	v, ok := d.gc.noted.Load(key)
	return ok && at.UnixNano() >= v.(int64)
}

// GCStats are the running totals of clears and of the clean-up pass, and
// the store's size as its last pass measured it.
type GCStats struct {
	// Clears counts clears (and expiries at once) recorded in the store;
	// ClearErrors the ones that failed.
	Clears, ClearErrors uint64
	// Passes counts clean-up passes, PassErrors the ones that failed
	// (in part); LastPass is when the last good one ended.
	Passes, PassErrors uint64
	LastPass           time.Time
	// Expired counts counters cleared because their deadline passed,
	// Moved deadline records moved (the counter lived on), Errors
	// counters left for a later pass.
	Expired, Moved, Errors uint64
	// Noted counts deadline estimates written; Pending is how many wait
	// for the next pass.
	Noted, Pending uint64
	// PrunedIDs and PrunedTombstones count what the prune removed.
	PrunedIDs, PrunedTombstones uint64
	// StoreRows (by table) and StoreBytes are the store's size measured
	// by the last pass (nil and 0 before it).
	StoreRows  map[string]int64
	StoreBytes int64
	// Cache is what each cache node held at the last pass (nil before
	// it, or when the cache cannot tell).
	Cache []store.NodeUsage
}

func (d *Service) gcStats() GCStats {
	g := &d.gc
	s := GCStats{
		Clears: g.clears.Load(), ClearErrors: g.clearErrs.Load(),
		Passes: g.passes.Load(), PassErrors: g.passErrs.Load(),
		Expired: g.expired.Load(), Moved: g.moved.Load(), Errors: g.errs.Load(),
		Noted: g.notes.Load(), PrunedIDs: g.prunedIDs.Load(), PrunedTombstones: g.pTS.Load(),
	}
	if t := g.lastPass.Load(); t != 0 {
		s.LastPass = time.Unix(0, t)
	}
	g.mu.Lock()
	s.Pending = uint64(len(g.pending))
	g.mu.Unlock()
	if st := g.store.Load(); st != nil {
		s.StoreRows, s.StoreBytes = st.Rows, st.Bytes
	}
	if c := g.cache.Load(); c != nil {
		s.Cache = *c
	}
	return s
}
