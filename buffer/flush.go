package buffer

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"

	"github.com/hotcount/hotcount/clock"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// op is one key's delta cut for a flush. key, delta and since never change;
// the other fields belong to the flushMu holder. label and seq are fixed
// by the first send and reused by every retry.
type op struct {
	key   string
	delta int64
	since int64 // UnixNano when the oldest part of delta was added
	// cold: the key was cold when cut, so the op goes as a plain INCRBY
	// (no token) unless its sub-counter takes a deadline. Set by the
	// flusher before the first send.
	cold bool

	sent     bool
	label    string
	seq      uint64    // the writer's sequence number (hot ops)
	attempts int       // failed sends so far
	nextTry  time.Time // earliest timed retry
}

// run is the flusher goroutine: a flush per tick or kick, until stop.
func (b *Buffer) run(ctx context.Context, t clock.Ticker) {
	defer close(b.done)
	defer t.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-t.C():
		case <-b.kick:
		}
		b.flushMu.Lock()
		b.cut(false)
		b.send(ctx, false)
		b.flushMu.Unlock()
	}
}

// Flush cuts every accumulated delta and sends every pending op now,
// ignoring backoff, once. It returns an error wrapping ErrUnflushed if any
// op is still unacknowledged afterwards (it stays pending and is retried).
func (b *Buffer) Flush(ctx context.Context) error {
	b.flushMu.Lock()
	defer b.flushMu.Unlock()
	b.cut(false)
	if cause := b.send(ctx, true); cause != nil {
		return b.unflushed(cause)
	}
	return nil
}

// Close stops the flusher (letting a flush under way finish), takes every
// accumulated delta and retries the
// pending ops, with a short backoff (50 ms up to 1 s), until all are
// acknowledged or ctx ends. In
// that case it returns an error wrapping ErrUnflushed that says how much is
// still held; calling Close again resumes the retries. Add returns
// ErrClosed once Close has begun. Close is idempotent.
func (b *Buffer) Close(ctx context.Context) error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		close(b.stop)
		b.cut(true) // from here on every Add fails with ErrClosed
	})
	select {
	case <-b.done:
	case <-ctx.Done():
		// The flush under way is cut short only now: a cold op it had
		// sent may then be dropped, as after any lost reply.
		b.cancelLoop()
		return b.unflushed(ctx.Err())
	}
	for failures := 0; ; failures++ {
		b.flushMu.Lock()
		cause := b.send(ctx, true)
		b.flushMu.Unlock()
		if cause == nil {
			return nil
		}
		if ctx.Err() != nil {
			return b.unflushed(cause)
		}
		select {
		case <-ctx.Done():
			return b.unflushed(cause)
		case <-b.cfg.Clock.After(closeBackoff(failures + 1)):
		}
	}
}

// closeBackoff is the wait of Close after its n-th failed retry: it drains,
// so it retries sooner than the flusher (50 ms doubling, at most 1 s).
func closeBackoff(n int) time.Duration {
	d := 50 * time.Millisecond
	for i := 1; i < n && d < time.Second; i++ {
		d *= 2
	}
	return min(d, time.Second)
}

// unflushed describes what is still held.
func (b *Buffer) unflushed(cause error) error {
	s := b.Stats()
	return fmt.Errorf("%w: %d keys, delta %+d (sum of magnitudes %d) not yet written: %w",
		ErrUnflushed, s.PendingKeys, s.Unflushed, s.UnflushedAbs, cause)
}

// backoff is the wait after the n-th consecutive failure (n ≥ 1).
func (b *Buffer) backoff(n int) time.Duration {
	d := b.cfg.Interval
	for i := 1; i < n && d < b.cfg.MaxBackoff; i++ {
		d *= 2
	}
	return min(d, b.cfg.MaxBackoff)
}

// cut moves every accumulated delta of a key without a pending op into a
// new op, and retires cells that are at zero: nothing was added since the
// previous cut (or the adds cancelled out).
// With kill (Close), it takes every cell's delta, marks every cell dead
// and empties the tables, so later Adds fail with ErrClosed. Cuts are
// serialised by opsMu; the caller of a plain cut holds flushMu, while Close
// kills without it, so a flush still running cannot delay the kill.
func (b *Buffer) cut(kill bool) {
	now := b.cfg.Clock.Now().UnixNano()
	b.opsMu.Lock()
	defer b.opsMu.Unlock()
	b.newKeys.Store(0)
	for i := range b.shards {
		sh := &b.shards[i]
		sh.mu.Lock()
		t := sh.tab.Load()
		retired := 0
		for j := range t.slots {
			c := t.slots[j].Load()
			if c == nil {
				continue
			}
			if kill {
				spread := c.lanes.Load() != nil
				if x := c.v.Swap(deadMark) + b.dropLanes(c); x != 0 {
					b.addOp(c.key, x, c.since.Load(), !b.hot(c, spread, x))
				}
				continue
			}
			if len(b.ops[c.key]) > 0 {
				continue // its op must be acknowledged first
			}
			ls := c.lanes.Load()
			if ls == nil && c.v.Load() == 0 && !c.hot.Load() && c.adds.Load() >= int64(b.cfg.HotAt) {
				// Counted by Direct: written by the caller, nothing to
				// cut, and now hot.
				c.hot.Store(true)
				c.adds.Store(0)
				c.since.Store(now)
				continue
			}
			if ls == nil && c.v.CompareAndSwap(0, deadMark) {
				retired++ // no delta since the previous cut
				continue
			}
			if ls == nil && b.spreads(c.v.Load()) {
				// Lanes first, then the swap: an add that does not
				// fit them then finds v emptied by the swap.
				ls = newLanes(runtime.GOMAXPROCS(0))
				c.lanes.Store(ls)
				b.spread.Add(1)
			}
			since := c.since.Load()
			x := c.v.Swap(0)
			if ls != nil {
				x += ls.swap(0)
			}
			hot := b.hot(c, ls != nil, x)
			if x != 0 {
				b.addOp(c.key, x, since, !hot)
			} else {
				// A quiet cell gives its lanes back; at the next quiet
				// cut it retires.
				b.unspread(c)
			}
			c.since.Store(now)
		}
		switch {
		case kill:
			b.cells.Add(-int64(t.n))
			sh.tab.Store(newTable(minTableSize))
		case retired > 0:
			b.cells.Add(-int64(retired))
			sh.rebuild(func(c *cell) bool { return c.v.Load() >= deadZone })
		}
		sh.mu.Unlock()
	}
}

// spreads reports whether a cell that gained v since the last cut should
// get lanes: it is hot, the process runs on more than one core, and fewer
// than maxSpread cells have lanes.
func (b *Buffer) spreads(v int64) bool {
	return (v >= spreadAt || v <= -spreadAt) && runtime.GOMAXPROCS(0) > 1 && b.spread.Load() < maxSpread
}

// hot decides, with hysteresis, whether c's key is hot, given the delta x
// cut from it: a cell with lanes is; a cold key turns hot at
// Config.HotAt Adds since the last cut; a hot key stays hot while the
// magnitude of its cut delta is at least half of HotAt. Adds are counted
// only while a key is cold, so that a hot key's Add costs one atomic add,
// not two; for increments of 1 the magnitude is the count. The caller
// holds opsMu and c's shard lock.
func (b *Buffer) hot(c *cell, spread bool, x int64) bool {
	was := c.hot.Load()
	var hot bool
	switch {
	case spread:
		hot = true
	case was:
		hot = x >= int64(b.coolAt()) || x <= -int64(b.coolAt())
	default:
		hot = c.adds.Load() >= int64(b.cfg.HotAt)
	}
	if hot != was {
		c.hot.Store(hot)
	}
	c.adds.Store(0)
	return hot
}

// coolAt is the Adds per interval below which a hot key turns cold: half
// of HotAt, rounded up.
func (b *Buffer) coolAt() int { return (b.cfg.HotAt + 1) / 2 }

// addOp records a new op; caller holds opsMu.
func (b *Buffer) addOp(key string, delta, since int64, cold bool) {
	b.ops[key] = append(b.ops[key], &op{key: key, delta: delta, since: since, cold: cold})
	b.nops.Add(1)
}

// send sends pending ops (all of them if force, else those whose backoff
// has passed) in batches, and returns the first error if any op remains
// unacknowledged. Only the first op of a key is sent; an op queued behind
// it (Close cuts a key that has one in flight) goes in a further round
// once it is acknowledged, so a key's ops reach its sub-counters in
// sequence order. Caller holds flushMu.
func (b *Buffer) send(ctx context.Context, force bool) error {
	var firstErr error
	for {
		queued, done, left, err := b.sendRound(ctx, force)
		if firstErr == nil {
			firstErr = err
		}
		if left == 0 {
			return nil
		}
		if queued == 0 || done == 0 || ctx.Err() != nil {
			if firstErr == nil {
				firstErr = errors.New("retry not yet due")
			}
			return firstErr
		}
	}
}

// sendRound is one round of send: it sends the due first op of each key
// and reports how many ops waited behind another op of their key, how
// many were acknowledged, how many are left, and the first error.
func (b *Buffer) sendRound(ctx context.Context, force bool) (queued, acked, left int, firstErr error) {
	now := b.cfg.Clock.Now()
	var due []*op
	pending := 0
	b.opsMu.RLock()
	for _, list := range b.ops {
		pending += len(list)
		queued += len(list) - 1
		if o := list[0]; force || !o.nextTry.After(now) {
			due = append(due, o)
		}
	}
	b.opsMu.RUnlock()
	if pending == 0 {
		return 0, 0, 0, nil
	}
	fail := func(o *op, err error) {
		if firstErr == nil {
			firstErr = err
		}
		o.attempts++
		o.nextTry = now.Add(b.backoff(o.attempts))
	}
	ready := due[:0]
	for _, o := range due {
		if !o.sent && !b.assign(o) {
			err := fmt.Errorf("%w: %q", ErrNoLabels, o.key)
			b.report(err)
			fail(o, err)
			continue
		}
		ready = append(ready, o)
	}
	if len(ready) > 0 {
		b.stats.flushes.Add(1)
	}
	var done []*op
	for start := 0; start < len(ready); start += b.cfg.BatchSize {
		chunk := ready[start:min(start+b.cfg.BatchSize, len(ready))]
		done = b.sendChunk(ctx, chunk, done, fail)
	}
	if b.cfg.OnFlushed != nil && len(ready) > 0 {
		b.cfg.OnFlushed(b.cfg.Clock.Now().Sub(now), len(ready))
	}
	if len(done) > 0 {
		b.opsMu.Lock()
		for _, o := range done {
			b.removeOp(o)
		}
		left = len(b.ops)
		for _, list := range b.ops {
			left += len(list) - 1
		}
		b.opsMu.Unlock()
	} else {
		left = pending
	}
	if len(done) < len(ready) || len(ready) < len(due) {
		b.stats.flushErrors.Add(1)
	}
	return queued, len(done), left, firstErr
}

// assign fixes o's label and, for a hot key, its sequence number before
// its first send.
func (b *Buffer) assign(o *op) bool {
	if o.cold && b.cfg.ColdLabel != "" {
		o.label = b.cfg.ColdLabel // no look-up of the key's labels
	} else {
		labels := b.cfg.Labels(o.key)
		if len(labels) == 0 {
			return false
		}
		o.label = labels[b.cfg.Rand()%uint64(len(labels))]
	}
	o.sent = true
	if o.cold && b.cfg.ExpireAt != nil && !b.cfg.ExpireAt(o.key, o.label).IsZero() {
		// A plain INCRBY cannot give the sub-counter its deadline in
		// the same step: the op goes with a token, as a hot key's.
		o.cold = false
	}
	if o.cold {
		return true
	}
	o.seq = b.nextSeq()
	return true
}

// nextSeq returns the writer's next sequence number; caller holds flushMu
// (or runs before the flusher starts).
func (b *Buffer) nextSeq() uint64 {
	b.seq++
	return b.seq
}

// sendChunk makes one IncrMulti call with its own timeout, appends the ops
// it settled to done and calls fail for the others.
func (b *Buffer) sendChunk(ctx context.Context, chunk, done []*op, fail func(*op, error)) []*op {
	ops := make([]store.IncrOp, len(chunk))
	for i, o := range chunk {
		if o.attempts > 0 {
			b.stats.retries.Add(1)
		}
		if o.cold {
			ops[i] = store.IncrOp{Key: keyspace.SubKey(o.key, o.label), Delta: o.delta}
			continue
		}
		ops[i] = store.IncrOp{
			Key:    keyspace.SubKey(o.key, o.label),
			Delta:  o.delta,
			SeqKey: keyspace.SeqKey(o.key, o.label),
			Writer: b.writer,
			Seq:    o.seq,
			TTL:    b.cfg.TokenTTL,
		}
		if b.cfg.ExpireAt != nil {
			ops[i].ExpireAt = b.cfg.ExpireAt(o.key, o.label)
		}
	}
	cctx, cancel := context.WithTimeout(ctx, b.cfg.BatchTimeout)
	res, err := b.sink.IncrMulti(cctx, ops)
	cancel()
	if err == nil && len(res) != len(ops) {
		err = fmt.Errorf("%w: sink returned %d results for %d ops", store.ErrUnavailable, len(res), len(ops))
	}
	if err != nil {
		err = fmt.Errorf("hotcount: flush of %d ops: %w", len(ops), err)
		b.report(err)
		for _, o := range chunk {
			fail(o, err)
		}
		return done
	}
	var transient error
	var undo []*op
	for i, r := range res {
		o := chunk[i]
		switch {
		case o.cold && r.Err == nil && (r.Value > store.MaxValue || r.Value < -store.MaxValue):
			// A plain INCRBY took the sub-counter past its bound: the
			// delta is taken back (with a token) and dropped, as a
			// refused one is.
			b.stats.permanent.Add(1)
			b.stats.dropped.Add(1)
			b.stats.droppedDelta.Add(o.delta)
			b.report(fmt.Errorf("hotcount: %s would pass the sub-counter bound with delta %+d, taken back and dropped: %w", ops[i].Key, o.delta, store.ErrOverflow))
			undo = append(undo, o)
			done = append(done, o)
		case o.cold && r.Err == nil:
			b.stats.applied.Add(1)
			b.stats.coldWrites.Add(1)
			done = append(done, o)
		case o.cold && errors.Is(r.Err, store.ErrNoReply):
			// Sent, and no reply: it may have been applied, and a plain
			// INCRBY sent again could count it twice. Dropped and
			// counted: the key loses at most this flush.
			b.stats.coldWrites.Add(1)
			b.stats.coldDropped.Add(1)
			b.stats.coldDroppedDelta.Add(o.delta)
			b.report(fmt.Errorf("hotcount: cold flush of %s, delta %+d, got no reply; not retried (it may have been applied): %w", ops[i].Key, o.delta, r.Err))
			done = append(done, o)
		case r.Err == nil && r.Applied:
			b.stats.applied.Add(1)
			done = append(done, o)
		case r.Err == nil:
			b.stats.skipped.Add(1) // the sequence was applied: an earlier attempt applied it
			done = append(done, o)
		case errors.Is(r.Err, store.ErrOverflow):
			// The sub-counter would pass its bound: no retry can ever
			// land this delta. It is dropped, counted and reported, so
			// that the key's later deltas and Close do not wait on it.
			b.stats.permanent.Add(1)
			b.stats.dropped.Add(1)
			b.stats.droppedDelta.Add(o.delta)
			b.report(fmt.Errorf("hotcount: %s refused delta %+d, dropped: %w", ops[i].Key, o.delta, r.Err))
			done = append(done, o)
		case errors.Is(r.Err, store.ErrNotInteger):
			b.stats.permanent.Add(1)
			perr := fmt.Errorf("hotcount: %s rejected delta %+d, kept for retry: %w", ops[i].Key, o.delta, r.Err)
			b.report(perr)
			fail(o, perr)
		default:
			if transient == nil {
				transient = fmt.Errorf("hotcount: flush of %s: %w", ops[i].Key, r.Err)
			}
			fail(o, transient)
		}
	}
	if transient != nil {
		b.report(transient)
	}
	if len(undo) > 0 {
		b.opsMu.Lock()
		for _, o := range undo {
			// The take-back goes to the same sub-counter, sequenced.
			u := &op{key: o.key, delta: -o.delta, since: o.since, sent: true, label: o.label, seq: b.nextSeq()}
			b.ops[o.key] = append(b.ops[o.key], u)
			b.nops.Add(1)
		}
		b.opsMu.Unlock()
	}
	return done
}

// removeOp forgets an acknowledged op; caller holds opsMu.
func (b *Buffer) removeOp(o *op) {
	list := b.ops[o.key]
	for i, x := range list {
		if x == o {
			list = append(list[:i], list[i+1:]...)
			break
		}
	}
	if len(list) == 0 {
		delete(b.ops, o.key)
	} else {
		b.ops[o.key] = list
	}
	b.nops.Add(-1)
}

// report passes err to Config.OnError.
func (b *Buffer) report(err error) {
	if b.cfg.OnError != nil {
		b.cfg.OnError(err)
	}
}
