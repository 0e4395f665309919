package engine

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/buffer"
	"github.com/hotcount/hotcount/internal/ns"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// startBuffers starts one buffer per distinct flush interval of the
// namespaces that use one.
func (e *Engine) startBuffers() error {
	e.bufs = map[time.Duration]*buffer.Buffer{}
	for _, iv := range e.ns.FlushIntervals() {
		b, err := buffer.New(observedSink{e.st, e}, buffer.Config{
			Interval:       iv,
			MaxKeys:        e.cfg.MaxBufferedKeys,
			MaxPendingKeys: e.cfg.MaxPendingKeys,
			HotAt:          e.cfg.HotAt,
			ColdLabel:      e.coldFlushLabel(),
			BatchTimeout:   e.cfg.Timeout,
			Labels:         e.WriteLabels,
			ExpireAt:       func(key, label string) time.Time { at, _ := e.expireAtFor(key, label); return at },
			Clock:          e.cfg.Clock,
			Rand:           e.cfg.Rand,
			OnError:        e.cfg.OnFlushError,
			OnFlushed:      e.onFlushed(),
		})
		if err != nil {
			_ = e.CloseBuffers(context.Background())
			return fmt.Errorf("engine: %w", err)
		}
		e.bufs[iv] = b
		e.order = append(e.order, b)
	}
	if d := e.ns.Defaults(); e.ns.Single() && d.Buffered && d.Mode == ns.ModeFast {
		e.only = e.bufs[d.FlushInterval]
	}
	return nil
}

// onFlushed reports flush rounds to Config.Observe.
func (e *Engine) onFlushed() func(time.Duration, int) {
	if e.cfg.Observe == nil {
		return nil
	}
	return func(d time.Duration, _ int) { e.cfg.Observe("flush", d) }
}

// OnlyBuffer returns the buffer every key goes through when all keys are
// buffered alike in fast mode (the Client's hot path), or nil.
func (e *Engine) OnlyBuffer() *buffer.Buffer { return e.only }

// Buffered reports whether there is any buffer.
func (e *Engine) Buffered() bool { return len(e.order) > 0 }

// Incr sends delta to one sub-counter of key chosen at random: one INCRBY.
// When the counter's labels are not cached, the increment goes to its cold
// label (which every reader sums), so a write never waits for a metadata
// round trip; with it goes, in the same round trip to the same node, the
// check of the counter's record mark (keyspace.MarkKey): the labels are
// looked up in the background only when the mark says the counter has a
// record, and a counter without one is cached as cold.
func (e *Engine) Incr(ctx context.Context, key string, delta int64) error {
	if delta > store.MaxValue || delta < -store.MaxValue {
		// Refused whatever the sub-counter picked holds, so that the
		// answer does not depend on the pick.
		return fmt.Errorf("incr %q: %w: |delta| %d passes the sub-counter bound %d", strings.Clone(key), store.ErrOverflow, delta, int64(store.MaxValue))
	}
	now := e.cfg.Clock.Now()
	w, dl, cached := e.cachedWriteSet(key, now)
	checkMark := false
	switch {
	case cached:
	case e.meta == nil:
		w = writeSet{labels: e.naive[e.ns.Lookup(key).N]}
	case e.marks != nil && e.coldStart(key):
		// Not cached, cold start: the increment goes to the cold label
		// with the check of the mark.
		w, checkMark = writeSet{labels: coldOnly}, true
	default:
		// Not cached (a counter's first writes here): the look-up may
		// keep the key.
		k := strings.Clone(key)
		l, err := e.writeLabelsNow(ctx, k)
		if err != nil {
			return fmt.Errorf("incr %q: %w", k, err)
		}
		w = writeSet{labels: l}
	}
	r := e.cfg.Rand()
	i := pick(r, len(w.labels))
	label, sub := w.labels[i], w.sub(key, i)
	var at time.Time
	var expired bool
	if cached {
		at, expired = e.expireAtWith(key, label, dl, now)
	} else {
		at, expired = e.expireAtFor(key, label)
	}
	if expired {
		// Past its deadline: what is left goes, and a new counter starts.
		k := strings.Clone(key)
		if err := e.expireNow(ctx, k); err != nil {
			return fmt.Errorf("incr %q: %w", k, err)
		}
		label, sub = keyspace.ColdLabel, keyspace.SubKey(k, keyspace.ColdLabel)
		at, _ = e.expireAtFor(k, label)
		w = writeSet{}
	}
	slot := -1
	if w.slots != nil {
		slot = int(w.slots[i])
	}
	var v int64
	var err error
	if checkMark && !expired {
		var marked bool
		v, marked, err = e.marks.IncrByMarked(ctx, sub, keyspace.MarkKey(key), delta, at)
		switch {
		case err != nil:
		case marked:
			e.refresh(key)
		default:
			e.meta.NoRecord(strings.Clone(key), now)
		}
	} else {
		v, err = e.incrBy(ctx, sub, slot, delta, at)
	}
	if err != nil {
		return fmt.Errorf("incr %q: %w", strings.Clone(key), err)
	}
	if v > store.MaxValue || v < -store.MaxValue {
		// Past the sub-counter bound: take the increment back. One round
		// trip in the common case; a reader may see the excess for the
		// moment between the two.
		if _, err := e.st.IncrBy(ctx, sub, -delta); err != nil {
			return fmt.Errorf("incr %q: %w: taking back %+d from %s failed: %w", strings.Clone(key), store.ErrUnavailable, delta, sub, err)
		}
		return fmt.Errorf("incr %q: %w: %s would pass the sub-counter bound ±%d", strings.Clone(key), store.ErrOverflow, sub, int64(store.MaxValue))
	}
	t, subSlot := e.topology(), uint16(0)
	if t != nil {
		subSlot = w.slot(sub, i)
	}
	e.obs.incremented(key, t, subSlot, len(w.labels) > 1, w.writes, r)
	e.cache.add(key, delta)
	return nil
}

// writeSet is a counter's write labels with, when cached, their sub-keys
// and slots.
type writeSet struct {
	labels []string
	subs   []string
	slots  []uint16
	writes *atomic.Uint32 // increments written with a cached set (nil: not cached)
}

func (w writeSet) sub(key string, i int) string {
	if w.subs != nil {
		return w.subs[i]
	}
	return keyspace.SubKey(key, w.labels[i])
}

func (w writeSet) slot(sub string, i int) uint16 {
	if w.slots != nil {
		return w.slots[i]
	}
	return keyspace.Slot(sub)
}

// cachedWriteSet returns key's cached write set and deadline (Unix ms,
// 0 none) as of now, refreshing it in the background once it is stale;
// ok is false when the cache does not hold it for writers.
func (e *Engine) cachedWriteSet(key string, now time.Time) (w writeSet, deadline int64, ok bool) {
	if e.meta == nil {
		return writeSet{}, 0, false
	}
	c, ok := e.meta.CachedWrite(key, now)
	if !ok {
		return writeSet{}, 0, false
	}
	if c.Stale {
		e.refresh(key)
	}
	return writeSet{c.Labels, c.Subs, c.Slots, c.Writes}, c.Deadline, true
}

// writeLabelsNow returns key's write labels without waiting on a cold
// counter: the cached ones (refreshed in the background before they
// lapse), or, when none are cached, the cold label while a background
// look-up fetches them. A counter of a namespace without cold start looks
// its labels up at once instead (its first write pins them).
func (e *Engine) writeLabelsNow(ctx context.Context, key string) ([]string, error) {
	if e.meta == nil {
		return e.naive[e.ns.Lookup(key).N], nil
	}
	w, _, _, stale, ok := e.meta.Cached(key)
	switch {
	case ok && stale:
		e.refresh(key)
		return w, nil
	case ok:
		return w, nil
	case e.ns.Lookup(key).NoColdStart || e.cfg.NaiveLabels:
		w, _, err := e.meta.Labels(ctx, key)
		return w, err
	}
	e.refresh(key)
	return coldOnly, nil
}

// refresh looks key's labels up again in the background, once at a time.
func (e *Engine) refresh(key string) {
	if e.closing.Load() {
		return
	}
	if _, busy := e.refreshing.Load(key); busy {
		return
	}
	e.startRefresh(strings.Clone(key)) // kept past the call
}

// startRefresh is refresh's background look-up of key, which it keeps.
func (e *Engine) startRefresh(key string) {
	if _, busy := e.refreshing.LoadOrStore(key, struct{}{}); busy {
		return
	}
	e.bg.Add(1)
	go func() {
		defer e.bg.Done()
		defer e.refreshing.Delete(key)
		ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
		defer cancel()
		_ = e.meta.Refresh(ctx, key)
	}()
}

// coldStart reports whether a counter of key without a record is cold
// (one sub-counter, keyspace.ColdLabel, and no record until it grows).
func (e *Engine) coldStart(key string) bool {
	return !e.cfg.NaiveLabels && !e.ns.Lookup(key).NoColdStart
}

// marker is a store that checks a counter's record mark with an
// increment of its cold sub-counter, in one round trip to one node.
type marker interface {
	// IncrByMarked reports whether the mark exists, then adds delta to
	// sub (giving it the deadline at, when not zero, unless it has one).
	// An empty mark is not checked (marked is false).
	IncrByMarked(ctx context.Context, sub, mark string, delta int64, at time.Time) (int64, bool, error)
}

// coldOnly is the write set of a counter whose labels are not known yet.
var coldOnly = []string{keyspace.ColdLabel}

// Add adds delta to key's local delta in the buffer of its namespace n
// (which must use one).
func (e *Engine) Add(n *ns.Namespace, key string, delta int64) error {
	b := e.bufs[n.FlushInterval]
	if b == nil {
		return fmt.Errorf("incr %q: %w: namespace has no buffer", strings.Clone(key), store.ErrUnavailable)
	}
	if err := b.Add(key, delta); err != nil {
		return AddError(strings.Clone(key), err)
	}
	return nil
}

// ErrClosed is returned by Add after CloseBuffers.
var ErrClosed = errors.New("hotcount: client closed")

// AddError maps a buffer's Add error to the Client's errors.
func AddError(key string, err error) error {
	if errors.Is(err, buffer.ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("incr %q: %w", key, err)
}

// Pending returns this process's unflushed delta of key.
func (e *Engine) Pending(key string) int64 {
	var p int64
	for _, b := range e.order {
		p += b.Pending(key)
	}
	return p
}

// Flush sends every buffered delta now and waits for the acknowledgements.
func (e *Engine) Flush(ctx context.Context) error {
	var errs []error
	for _, b := range e.order {
		errs = append(errs, b.Flush(ctx))
	}
	return errors.Join(errs...)
}

// CloseBuffers drains and closes every buffer, and waits for background
// label look-ups.
func (e *Engine) CloseBuffers(ctx context.Context) error {
	var errs []error
	for _, b := range e.order {
		errs = append(errs, b.Close(ctx))
	}
	e.closing.Store(true)
	e.bg.Wait()
	return errors.Join(errs...)
}

// BufferStats sums the stats of every buffer.
func (e *Engine) BufferStats() buffer.Stats {
	var s buffer.Stats
	for _, b := range e.order {
		s = s.Merge(b.Stats())
	}
	return s
}

// Clear deletes every sub-counter of key and its metadata record, after
// sending this process's buffered deltas (so they do not land after the
// clear).
func (e *Engine) Clear(ctx context.Context, key string) error {
	sets, err := e.readSets(ctx, []string{key})
	if err != nil {
		return fmt.Errorf("clear %q: %w", key, err)
	}
	if err := e.Flush(ctx); err != nil {
		return fmt.Errorf("clear %q: %w", key, err)
	}
	sub := make([]string, len(sets[0]))
	for i, l := range sets[0] {
		sub[i] = keyspace.SubKey(key, l)
	}
	if e.meta != nil {
		// A cleared counter is gone: its record goes too, and its next
		// write starts it again (cold, or pinned anew).
		if _, err := e.meta.Drop(ctx, key); err != nil {
			return fmt.Errorf("clear %q: %w", key, err)
		}
	}
	// The sub-counters go even when the caller gives up now: once the
	// record is gone nothing names them, and a Clear tried again deletes
	// the cold one alone.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.Timeout)
	defer cancel()
	if err := e.st.Del(ctx, sub); err != nil {
		return fmt.Errorf("clear %q: %w", key, err)
	}
	e.cache.drop(key)
	return nil
}

// IncrDirect writes an increment of a cold key of the buffered fast
// namespace n at once, as one INCRBY on its cold sub-counter, and returns
// the value INCRBY answered. exact reports that the counter is known to be
// cold (its label sets are the cold label alone, as its cached metadata
// says or a look-up made beside the INCRBY found, and nothing of it is
// buffered here), so that the value is the counter's. ok is false, and
// nothing is written, when the key is hot in the buffer (package buffer's
// Direct), holds a buffered delta, is known to be sharded, or takes a
// deadline: the caller then buffers it. An uncached counter's INCRBY goes
// with the check of its record mark (keyspace.MarkKey), in one round trip
// to one node: without a mark the counter has no record, so it is cold
// with no deadline and the value is exact, with no look-up; with one, its
// labels are looked up after the INCRBY, as a store without marks does
// beside it.
func (e *Engine) IncrDirect(ctx context.Context, n *ns.Namespace, key string, delta int64) (v int64, exact, ok bool, err error) {
	b := e.bufs[n.FlushInterval]
	if b == nil || e.meta == nil || n.Mode != ns.ModeFast || n.NoColdStart || n.TTL != 0 || e.cfg.NaiveLabels {
		return 0, false, false, nil
	}
	if delta > store.MaxValue || delta < -store.MaxValue {
		return 0, false, false, nil // Add refuses it
	}
	read, missing := e.meta.CachedReadSets([]string{key})
	cached := len(missing) == 0
	if cached && !coldSet(read[0]) {
		return 0, false, false, nil
	}
	if w, _, _, _, wok := e.meta.Cached(key); wok && !coldSet(w) {
		return 0, false, false, nil
	}
	if !e.meta.CachedDeadline(key).IsZero() || !b.Direct(key) {
		return 0, false, false, nil
	}
	k := strings.Clone(key)
	sub := keyspace.SubKey(k, keyspace.ColdLabel)
	if !cached && e.marks != nil {
		return e.incrMarked(ctx, k, sub, delta)
	}
	var lookup chan error
	if !cached && !e.closing.Load() {
		lookup = make(chan error, 1)
		e.bg.Add(1)
		go func() {
			defer e.bg.Done()
			lctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
			defer cancel()
			lookup <- e.meta.Refresh(lctx, k)
		}()
	}
	if cached && e.marks != nil {
		// Known cold: the INCRBY alone, sent with the marked ones.
		v, _, err = e.marks.IncrByMarked(ctx, sub, "", delta, time.Time{})
	} else {
		v, err = e.st.IncrBy(ctx, sub, delta)
	}
	if lookup != nil {
		select {
		case lerr := <-lookup:
			if lerr == nil {
				read, missing = e.meta.CachedReadSets([]string{k})
				cached = len(missing) == 0
			}
		case <-ctx.Done():
		}
	}
	if err != nil {
		return 0, false, true, fmt.Errorf("incr %q: %w", k, err)
	}
	if err := e.directDone(ctx, k, sub, v, delta); err != nil {
		return 0, false, true, err
	}
	return v, cached && coldSet(read[0]), true, nil
}

// incrMarked is IncrDirect's write of an uncached counter k with the
// check of its record mark.
func (e *Engine) incrMarked(ctx context.Context, k, sub string, delta int64) (v int64, exact, ok bool, err error) {
	at := e.cfg.Clock.Now() // before the mark is read
	v, marked, err := e.marks.IncrByMarked(ctx, sub, keyspace.MarkKey(k), delta, time.Time{})
	if err != nil {
		return 0, false, true, fmt.Errorf("incr %q: %w", k, err)
	}
	if !marked {
		// No mark, no record: cold, with no deadline, as a look-up
		// would have found it when the mark was read.
		e.meta.NoRecord(k, at)
		exact = true
	} else if !e.closing.Load() {
		lctx, cancel := context.WithTimeout(ctx, e.cfg.Timeout)
		lerr := e.meta.Refresh(lctx, k)
		cancel()
		if lerr == nil {
			read, missing := e.meta.CachedReadSets([]string{k})
			exact = len(missing) == 0 && coldSet(read[0])
		}
	}
	if err := e.directDone(ctx, k, sub, v, delta); err != nil {
		return 0, false, true, err
	}
	return v, exact, true, nil
}

// directDone ends IncrDirect's write of delta to k's cold sub-counter sub,
// which answered v: an increment past the sub-counter bound is taken
// back, and the write is observed.
func (e *Engine) directDone(ctx context.Context, k, sub string, v, delta int64) error {
	if v > store.MaxValue || v < -store.MaxValue {
		if _, err := e.st.IncrBy(ctx, sub, -delta); err != nil {
			return fmt.Errorf("incr %q: %w: taking back %+d from %s failed: %w", k, store.ErrUnavailable, delta, sub, err)
		}
		return fmt.Errorf("incr %q: %w: %s would pass the sub-counter bound ±%d", k, store.ErrOverflow, sub, int64(store.MaxValue))
	}
	t, slot := e.topology(), uint16(0)
	if t != nil {
		slot = keyspace.Slot(sub)
	}
	e.obs.incremented(k, t, slot, false, nil, 0)
	e.cache.add(k, delta)
	return nil
}

// coldSet reports whether labels is the cold label alone.
func coldSet(labels []string) bool {
	return len(labels) == 1 && labels[0] == keyspace.ColdLabel
}

// coldFlushLabel is the label of cold keys' flushes: keyspace.ColdLabel,
// which every reader sums (meta adds it to every read set), so a cold
// key's flush needs no look-up of its labels; none with naive labels or
// without metadata, whose read sets are the label sets as they are.
func (e *Engine) coldFlushLabel() string {
	if e.meta == nil || e.cfg.NaiveLabels {
		return ""
	}
	return keyspace.ColdLabel
}
