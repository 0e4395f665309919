package engine

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// Counter lifecycles: deadlines and existence.
//
// A cold counter is one cache key, and its deadline is that key's
// (PEXPIREAT): it expires exactly as a Redis key does. A sharded counter
// keeps its deadline in its metadata record; readers take it as gone from
// the deadline on, and the cache removes its sub-counters
// store.DeadlineGrace after it (the cold one at the deadline) and the
// record twice as late, so that no reader ever sums part of it. A
// counter's first record takes the deadline of its cold sub-counter, or,
// in a namespace with a TTL, TTL from its first write; every increment
// gives the sub-counter it creates the counter's deadline (PEXPIREAT …
// NX, pipelined with the INCRBY: no extra round trip). An increment of a
// sharded counter past its deadline first removes what is left of it, as
// Clear does, and starts a new counter.

// ErrNoExpiry: the store cannot keep deadlines.
var ErrNoExpiry = errors.New("hotcount: the store keeps no deadlines")

// expirer is what the engine needs of a store for deadlines.
type expirer interface {
	// IncrByExpire adds delta to key and gives it the deadline at (when
	// not zero) unless it has one, in one round trip.
	IncrByExpire(ctx context.Context, key string, delta int64, at time.Time) (int64, error)
	// ExpireAt sets (zero: removes) the deadline of keys and reports
	// which changed.
	ExpireAt(ctx context.Context, keys []string, at time.Time) ([]bool, error)
	// Deadlines reports whether keys exist and their deadlines.
	Deadlines(ctx context.Context, keys []string) ([]store.Deadline, error)
}

// firstDeadline is the deadline a counter's first record takes.
func (e *Engine) firstDeadline(ctx context.Context, key string) (time.Time, error) {
	if e.exp == nil {
		return time.Time{}, nil
	}
	d, err := e.exp.Deadlines(ctx, []string{keyspace.SubKey(key, keyspace.ColdLabel)})
	if err != nil {
		return time.Time{}, err
	}
	if d[0].Exists {
		return d[0].At, nil
	}
	if ttl := e.ns.Lookup(key).TTL; ttl > 0 {
		return e.cfg.Clock.Now().Add(ttl), nil
	}
	return time.Time{}, nil
}

// expireAtFor returns the deadline an increment gives the sub-counter
// label of key if it has none: the counter's (plus the grace for a label
// other than the cold one), or, for a counter without a record in a
// namespace with a TTL, TTL from now. expired reports that the counter's
// deadline has passed.
func (e *Engine) expireAtFor(key, label string) (at time.Time, expired bool) {
	if e.meta == nil {
		return time.Time{}, false
	}
	var d int64
	if t := e.meta.CachedDeadline(key); !t.IsZero() {
		d = t.UnixMilli()
	}
	return e.expireAtWith(key, label, d, e.cfg.Clock.Now())
}

// expireAtWith is expireAtFor with the counter's cached deadline d (Unix
// ms, 0 none) and the time now.
func (e *Engine) expireAtWith(key, label string, d int64, now time.Time) (at time.Time, expired bool) {
	if d != 0 {
		t := time.UnixMilli(d)
		if !now.Before(t) {
			return time.Time{}, true
		}
		if label != keyspace.ColdLabel {
			t = t.Add(store.DeadlineGrace)
		}
		return t, false
	}
	if label != keyspace.ColdLabel {
		return time.Time{}, false
	}
	if ttl := e.ns.Lookup(key).TTL; ttl > 0 {
		return now.Add(ttl), false
	}
	return time.Time{}, false
}

// slotIncrementer is a store that takes a key's slot from the caller,
// which keeps the slots of a counter's sub-keys, instead of hashing the
// key again.
type slotIncrementer interface {
	// IncrBySlot is IncrBy of key, whose slot is slot.
	IncrBySlot(ctx context.Context, key string, slot uint16, delta int64) (int64, error)
}

// incrBy sends one increment, with the deadline its sub-counter takes;
// slot is sub's slot, or -1 when not at hand.
func (e *Engine) incrBy(ctx context.Context, sub string, slot int, delta int64, at time.Time) (int64, error) {
	if at.IsZero() || e.exp == nil {
		if slot >= 0 && e.slotIncr != nil {
			return e.slotIncr.IncrBySlot(ctx, sub, uint16(slot), delta)
		}
		return e.st.IncrBy(ctx, sub, delta)
	}
	return e.exp.IncrByExpire(ctx, sub, delta, at)
}

// expireNow removes what is left of a counter past its deadline: its
// record and sub-counters.
func (e *Engine) expireNow(ctx context.Context, key string) error {
	sets, err := e.readSets(ctx, []string{key})
	if err != nil {
		return err
	}
	if _, err := e.meta.Drop(ctx, key); err != nil {
		return err
	}
	subs := make([]string, len(sets[0]))
	for i, l := range sets[0] {
		subs[i] = keyspace.SubKey(key, l)
	}
	// Even when the caller gives up now, as Clear does: once the record
	// is gone nothing names the sub-counters.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.cfg.Timeout)
	defer cancel()
	if err := e.st.Del(ctx, subs); err != nil {
		return err
	}
	e.cache.drop(key)
	e.expired.Add(1)
	return nil
}

// Counts is what this process knows of the counters it used lately.
type Counts struct {
	// Sharded and Cold count the counters whose labels are cached:
	// sharded (with metadata) and cold (one sub-counter).
	Sharded, Cold int
	// Expired counts counters this process removed at or past their
	// deadline (a cold counter's key the cache expires by itself is not
	// seen here).
	Expired int64
}

// Counts returns what this process knows of the counters it used lately.
func (e *Engine) Counts() Counts {
	c := Counts{Expired: e.expired.Load()}
	if e.meta != nil {
		c.Sharded, c.Cold = e.meta.CacheCounts()
	}
	return c
}

// Expire gives key the deadline at: the counter and every part of it go
// then. A deadline not after now removes the counter at once. It reports
// whether the counter existed.
func (e *Engine) Expire(ctx context.Context, key string, at time.Time) (bool, error) {
	if e.exp == nil || e.meta == nil {
		return false, ErrNoExpiry
	}
	if err := e.Flush(ctx); err != nil { // this process's deltas first
		return false, fmt.Errorf("expire %q: %w", key, err)
	}
	exists, err := e.Exists(ctx, []string{key})
	if err != nil || exists == 0 {
		return false, err
	}
	defer e.cache.drop(key)
	if !at.After(e.cfg.Clock.Now()) {
		if err := e.expireNow(ctx, key); err != nil {
			return true, fmt.Errorf("expire %q: %w", key, err)
		}
		return true, nil
	}
	return true, e.setDeadline(ctx, key, at)
}

// Persist removes key's deadline. It reports whether it had one.
func (e *Engine) Persist(ctx context.Context, key string) (bool, error) {
	if e.exp == nil || e.meta == nil {
		return false, ErrNoExpiry
	}
	if err := e.Flush(ctx); err != nil {
		return false, fmt.Errorf("persist %q: %w", key, err)
	}
	d, exists, err := e.Deadline(ctx, key)
	if err != nil || !exists || d.IsZero() {
		return false, err
	}
	return true, e.setDeadline(ctx, key, time.Time{})
}

// setDeadline records at (zero: none) in key's record, if it has one, and
// on every sub-counter.
func (e *Engine) setDeadline(ctx context.Context, key string, at time.Time) error {
	sharded, err := e.meta.SetDeadline(ctx, key, at)
	if err != nil {
		return fmt.Errorf("expire %q: %w", key, err)
	}
	cold := []string{keyspace.SubKey(key, keyspace.ColdLabel)}
	if _, err := e.exp.ExpireAt(ctx, cold, at); err != nil {
		return fmt.Errorf("expire %q: %w", key, err)
	}
	if !sharded {
		return nil
	}
	sets, err := e.readSets(ctx, []string{key})
	if err != nil {
		return fmt.Errorf("expire %q: %w", key, err)
	}
	var others []string
	for _, l := range sets[0] {
		if l != keyspace.ColdLabel {
			others = append(others, keyspace.SubKey(key, l))
		}
	}
	late := at
	if !at.IsZero() {
		late = at.Add(store.DeadlineGrace)
	}
	if _, err := e.exp.ExpireAt(ctx, others, late); err != nil {
		return fmt.Errorf("expire %q: %w", key, err)
	}
	return nil
}

// Deadline returns key's deadline (zero: none) and whether the counter
// exists.
func (e *Engine) Deadline(ctx context.Context, key string) (time.Time, bool, error) {
	if e.exp == nil || e.meta == nil {
		return time.Time{}, false, ErrNoExpiry
	}
	mt, err := e.meta.Meta(ctx, key)
	if err != nil {
		return time.Time{}, false, err
	}
	if mt.Epoch > 0 {
		if mt.Deadline == 0 {
			return time.Time{}, true, nil
		}
		d := time.UnixMilli(mt.Deadline)
		return d, e.cfg.Clock.Now().Before(d), nil
	}
	ds, err := e.exp.Deadlines(ctx, []string{keyspace.SubKey(key, keyspace.ColdLabel)})
	if err != nil {
		return time.Time{}, false, err
	}
	return ds[0].At, ds[0].Exists || e.Pending(key) != 0, nil
}

// Deadlines returns what the cache knows of the life of each counter of
// keys: whether it exists there and its deadline (zero: none), as
// Deadline does for one, in one metadata look-up and one pipelined read
// of the cold sub-counters. Buffered deltas are not looked at: this is
// what the cache holds, for the copies the durable store keeps.
func (e *Engine) Deadlines(ctx context.Context, keys []string) ([]store.Deadline, error) {
	if e.exp == nil || e.meta == nil {
		return nil, ErrNoExpiry
	}
	_, found, err := e.meta.ReadSets(ctx, keys)
	if err != nil {
		return nil, err
	}
	now := e.cfg.Clock.Now()
	out := make([]store.Deadline, len(keys))
	var cold []string
	var at []int
	for i, k := range keys {
		if found[i] {
			d := e.meta.CachedDeadline(k)
			out[i] = store.Deadline{Exists: d.IsZero() || now.Before(d), At: d}
			continue
		}
		cold = append(cold, keyspace.SubKey(k, keyspace.ColdLabel))
		at = append(at, i)
	}
	if len(cold) > 0 {
		ds, err := e.exp.Deadlines(ctx, cold)
		if err != nil {
			return nil, err
		}
		for j, d := range ds {
			out[at[j]] = d
		}
	}
	return out, nil
}

// Exists returns how many of keys are counters that exist: a sharded
// counter before its deadline, a cold counter whose key exists, a counter
// with a delta buffered in this process. A key named twice counts twice,
// as Redis EXISTS does.
func (e *Engine) Exists(ctx context.Context, keys []string) (int64, error) {
	if e.exp == nil || e.meta == nil {
		return 0, ErrNoExpiry
	}
	_, found, err := e.meta.ReadSets(ctx, keys)
	if err != nil {
		return 0, err
	}
	now := e.cfg.Clock.Now()
	var n int64
	var cold []string
	for i, k := range keys {
		if e.Pending(k) != 0 { // buffered here, not flushed yet
			n++
			continue
		}
		if found[i] {
			if d := e.meta.CachedDeadline(k); d.IsZero() || now.Before(d) {
				n++
			}
			continue
		}
		cold = append(cold, keyspace.SubKey(k, keyspace.ColdLabel))
	}
	if len(cold) > 0 {
		ds, err := e.exp.Deadlines(ctx, cold)
		if err != nil {
			return 0, err
		}
		for _, d := range ds {
			if d.Exists {
				n++
			}
		}
	}
	return n, nil
}
