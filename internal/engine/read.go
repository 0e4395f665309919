package engine

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hotcount/hotcount/internal/regions"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// Reading is the value of one counter.
type Reading struct {
	// Key is the counter key.
	Key string `json:"key"`
	// Value is the sum of the sub-counters, plus this process's unflushed
	// deltas.
	Value int64 `json:"value"`
	// Stale is how old the sum is: zero for a fresh read, up to the
	// namespace's read-cache TTL for a cached one.
	Stale time.Duration `json:"-"`
	// N is the number of sub-counters that were summed (the read set).
	N int `json:"n"`
	// Regions, for a Client in a region, is each region's share of Value
	// (the local one included) and how old it is; nil otherwise.
	Regions map[string]regions.Share `json:"-"`
	// NUnknown is set when N could not be learnt: an exact read answered
	// from the durable store while the cache did not answer. N is 0 then.
	NUnknown bool `json:"-"`
}

// SubRead is what Read found for one counter: its read set's sub-keys and
// their values, in label order.
type SubRead struct {
	Key    string
	Labels []string
	Subs   []string
	Values []int64
}

// Sum returns the sum of the values.
func (r SubRead) Sum() (int64, error) { return SumInt64(r.Values) }

// Read reads the sub-counters of every key, and the plain keys extra,
// and creates no state. Counters whose read label sets are cached cost
// their sub-keys in one Get (one pipelined round per node, together with
// extra). A batch of several counters first looks the missing label sets
// up (one batched round per node), then reads every value in one round. A
// single counter whose labels are not cached has its cold sub-counter read
// while its metadata is looked up beside it, so a cold counter costs one
// round trip; only a counter that turns out to have more labels costs a
// second. at is the time just before the values are read.
//
// The record mark (keyspace.MarkKey) of every counter whose record a
// look-up of this read found is read with the values (it lives in the slot
// of the cold sub-counter, which every read set holds, so it adds no
// round); a record found without its mark gets it back (healMarks).
func (e *Engine) Read(ctx context.Context, keys, extra []string) (reads []SubRead, extraVals []int64, at time.Time, err error) {
	sets, missing := e.cachedSets(keys)
	var marked []string // counters whose record a look-up found
	if len(keys) > 1 && len(missing) > 0 {
		// A batch: one round per node for the label sets, then one for
		// every value.
		mk := make([]string, len(missing))
		for j, i := range missing {
			mk[j] = keys[i]
		}
		full, found, err := e.meta.ReadSets(ctx, mk)
		if err != nil {
			return nil, nil, time.Time{}, fmt.Errorf("read: %w", err)
		}
		for j, i := range missing {
			sets[i] = full[j]
			if found[j] && e.marks != nil {
				marked = append(marked, keys[i])
			}
		}
		missing = nil
	}
	reads = make([]SubRead, len(keys))
	all := append(make([]string, 0, len(extra)+8*len(keys)), extra...)
	for i, k := range keys {
		labels := sets[i]
		if labels == nil {
			labels = coldOnly // the rest, if any, in a second round
		}
		r := SubRead{Key: k, Labels: labels, Subs: make([]string, len(labels))}
		for j, l := range labels {
			r.Subs[j] = keyspace.SubKey(k, l)
		}
		all = append(all, r.Subs...)
		reads[i] = r
	}
	for _, k := range marked {
		all = append(all, keyspace.MarkKey(k))
	}
	var full [][]string
	var metaErr error
	var wg sync.WaitGroup
	if len(missing) > 0 {
		mk := make([]string, len(missing))
		for j, i := range missing {
			mk[j] = keys[i]
		}
		wg.Go(func() { full, _, metaErr = e.meta.ReadSets(ctx, mk) })
	}
	at = e.cfg.Clock.Now()
	vals, err := e.get(ctx, all)
	wg.Wait()
	if err != nil {
		return nil, nil, at, fmt.Errorf("read: %w", err)
	}
	if metaErr != nil {
		return nil, nil, at, fmt.Errorf("read: %w", metaErr)
	}
	markVals := vals[len(vals)-len(marked):]
	vals = vals[:len(vals)-len(marked)]
	extraVals, vals = vals[:len(extra)], vals[len(extra):]
	for i := range reads {
		n := len(reads[i].Subs)
		reads[i].Values, vals = vals[:n:n], vals[n:]
	}
	// Second round: the other labels of counters found to have more, with
	// their marks.
	var more []string
	var owners []int
	var marked2 []string
	for j, i := range missing {
		rest := slices.DeleteFunc(slices.Clone(full[j]), func(l string) bool { return l == keyspace.ColdLabel })
		if len(rest) == 0 {
			continue
		}
		if e.marks != nil {
			marked2 = append(marked2, keys[i])
		}
		r := &reads[i]
		r.Labels = append(slices.Clone(r.Labels), rest...)
		for _, l := range rest {
			sub := keyspace.SubKey(r.Key, l)
			r.Subs = append(r.Subs, sub)
			more = append(more, sub)
			owners = append(owners, i)
		}
	}
	if len(more) > 0 {
		for _, k := range marked2 {
			more = append(more, keyspace.MarkKey(k))
		}
		mv, err := e.get(ctx, more)
		if err != nil {
			return nil, nil, at, fmt.Errorf("read: %w", err)
		}
		for x, v := range mv[:len(owners)] {
			reads[owners[x]].Values = append(reads[owners[x]].Values, v)
		}
		marked = append(marked, marked2...)
		markVals = append(markVals, mv[len(owners):]...)
	}
	e.healMarks(ctx, marked, markVals)
	return reads, extraVals, at, nil
}

// healMarks gives back their marks to the records of keys whose mark read
// 0 (none) in vals: best effort, the next look-up heals again.
func (e *Engine) healMarks(ctx context.Context, keys []string, vals []int64) {
	var heal []string
	for i, k := range keys {
		if vals[i] == 0 {
			heal = append(heal, k)
		}
	}
	if len(heal) > 0 {
		_ = e.meta.HealMarks(ctx, heal)
	}
}

// cachedSets returns the read sets known without a round trip (nil for
// the others, whose indexes are in missing).
func (e *Engine) cachedSets(keys []string) (sets [][]string, missing []int) {
	if e.meta == nil {
		sets = make([][]string, len(keys))
		for i, k := range keys {
			sets[i] = e.naive[e.ns.Lookup(k).N]
		}
		return sets, nil
	}
	return e.meta.CachedReadSets(keys)
}

// get reads keys with one Get under the engine's timeout.
func (e *Engine) get(ctx context.Context, keys []string) ([]int64, error) {
	if len(keys) == 0 {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
	defer cancel()
	return e.st.Get(ctx, keys)
}

// Get returns the sum of key's sub-counters, from the summed-read cache
// when it is fresh enough, plus this process's unflushed delta.
//
// A buffered delta leaves the pending amount once its flush landed; a read
// that overlapped that moment may have missed it in the cache, so when a
// flush landed during the read it is read again (a few times at most):
// this process reads its own writes.
func (e *Engine) Get(ctx context.Context, key string) (Reading, error) {
	seq := e.flushSeq.Load()
	if r, ok := e.cached(key); ok {
		return e.settled(ctx, key, seq, e.withPending(r))
	}
	v, err, _ := e.flight.Do(key, func() (any, error) {
		if r, ok := e.cached(key); ok {
			return r, nil
		}
		m, err := e.fetch(ctx, []string{key})
		if err != nil {
			return Reading{}, err
		}
		return m[key], nil
	})
	if err != nil {
		return Reading{}, err
	}
	return e.settled(ctx, key, seq, e.withPending(v.(Reading)))
}

// settled returns r, read since flushSeq held seq, or, when a flush landed
// meanwhile, a fresh reading taken while none did (up to three tries).
func (e *Engine) settled(ctx context.Context, key string, seq uint64, r Reading) (Reading, error) {
	for try := 0; try < 3 && e.flushSeq.Load() != seq; try++ {
		seq = e.flushSeq.Load()
		m, err := e.fetch(ctx, []string{key})
		if err != nil {
			return Reading{}, err
		}
		r = e.withPending(m[key])
	}
	return r, nil
}

// GetFresh reads key's sub-counters now, bypassing the summed-read cache
// and single-flight (and refreshing the cache), plus this process's
// unflushed delta.
func (e *Engine) GetFresh(ctx context.Context, key string) (Reading, error) {
	seq := e.flushSeq.Load()
	m, err := e.fetch(ctx, []string{key})
	if err != nil {
		return Reading{}, err
	}
	return e.settled(ctx, key, seq, e.withPending(m[key]))
}

// GetMulti returns the sums of many counters. Those not in the cache are
// read together: one round per node for the label sets and one for the
// values.
//
// As Get, it reads again (a few times at most) when a flush landed during
// the read.
func (e *Engine) GetMulti(ctx context.Context, keys []string) (map[string]Reading, error) {
	for try := 0; ; try++ {
		seq := e.flushSeq.Load()
		out, err := e.getMulti(ctx, keys)
		if err != nil || try == 2 || e.flushSeq.Load() == seq {
			return out, err
		}
	}
}

func (e *Engine) getMulti(ctx context.Context, keys []string) (map[string]Reading, error) {
	out := make(map[string]Reading, len(keys))
	var missing []string
	for _, k := range keys {
		if _, dup := out[k]; dup {
			continue
		}
		if r, ok := e.cached(k); ok {
			out[k] = r
			continue
		}
		out[k] = Reading{}
		missing = append(missing, k)
	}
	if len(missing) > 0 {
		got, err := e.fetch(ctx, missing)
		if err != nil {
			return nil, err
		}
		for k, r := range got {
			out[k] = r
		}
	}
	for k, r := range out {
		out[k] = e.withPending(r)
	}
	return out, nil
}

// withPending adds this process's unflushed delta of a buffered key to a
// reading (read-your-writes within a process), and raises its Stale to
// what SetBehind's function says. A delta is counted twice
// only for the instant between the cache applying a flush and the flusher
// seeing its reply.
func (e *Engine) withPending(r Reading) Reading {
	if f := e.behind.Load(); f != nil {
		r.Stale = max(r.Stale, (*f)(r.Key))
	}
	if len(e.order) == 0 {
		return r
	}
	if p := e.Pending(r.Key); p != 0 {
		if v, err := SumInt64([]int64{r.Value, p}); err == nil {
			r.Value = v
		}
	}
	return r
}

// SetBehind gives the engine a function that says how long a counter's
// view has been known to be behind its durable log (0: not known to be);
// every reading reports at least that in Stale.
func (e *Engine) SetBehind(f func(key string) time.Duration) { e.behind.Store(&f) }

func (e *Engine) cached(key string) (Reading, bool) {
	if e.cfg.NoReadCache {
		return Reading{}, false
	}
	v, n, at, ok := e.cache.get(key)
	if !ok {
		return Reading{}, false
	}
	now := e.cfg.Clock.Now()
	age := now.Sub(at)
	if age >= e.ns.Lookup(key).ReadCacheTTL || age < 0 {
		return Reading{}, false
	}
	if e.meta != nil {
		if d := e.meta.CachedDeadline(key); !d.IsZero() && !now.Before(d) {
			return Reading{}, false
		}
	}
	return Reading{Key: key, Value: v, Stale: age, N: n}, true
}

// fetch reads and sums keys and refreshes the cache. This process's
// increments applied while the read is in flight are added to the sums
// (see readCache), so a caller that shares the read (single-flight) or
// finds its sum cached reads every increment it made before it asked.
func (e *Engine) fetch(ctx context.Context, keys []string) (map[string]Reading, error) {
	seq := e.flushSeq.Load()
	marks := e.cache.begin(keys)
	settled := false
	defer func() {
		if !settled {
			e.cache.abandon(marks)
		}
	}()
	reads, _, at, err := e.Read(ctx, keys, nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Reading, len(keys))
	done := e.cfg.Clock.Now() // a read that ends after a deadline may miss parts
	sums := make([]int64, len(reads))
	for i, r := range reads {
		sum, err := r.Sum()
		if err != nil {
			return nil, fmt.Errorf("read %q: %w", r.Key, err)
		}
		if e.meta != nil {
			if d := e.meta.CachedDeadline(r.Key); !d.IsZero() && !done.Before(d) {
				sum = 0 // past its deadline: gone, whatever is left of it
			}
		}
		sums[i] = sum
	}
	settled = true
	var overflow error
	for i, r := range reads {
		m := marks[r.Key]
		if m == nil {
			continue // a duplicate key, settled already
		}
		delete(marks, r.Key)
		sum, ok := e.cache.settle(r.Key, m, sums[i], len(r.Subs), at, !e.cfg.NoReadCache, &e.flushSeq, seq)
		if !ok && overflow == nil {
			overflow = fmt.Errorf("read %q: %w", r.Key, store.ErrOverflow)
		}
		out[r.Key] = Reading{Key: r.Key, Value: sum, N: len(r.Subs)}
	}
	e.cache.abandon(marks) // keys Read did not return, if any
	if overflow != nil {
		return nil, overflow
	}
	return out, nil
}
