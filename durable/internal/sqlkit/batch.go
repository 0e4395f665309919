// Package sqlkit is what the SQL backends of package durable (postgres,
// sqlite) share beyond their dialects: the planning of an AppendEvents call
// (validation, repeats within the call, duplicates and id conflicts, the
// per-key overflow check), the magnitude bounds that keep that check cheap,
// checkpoint and key helpers, error classification and the migration
// runner.
//
// # Appending a batch
//
// NewBatch validates every event and groups repeats of one (Key, ID): only
// the first occurrence is looked up and written; a repeat with the same
// delta is a duplicate of it, with another delta an ErrIDConflict. The
// backend then reports which IDs it already holds (Stored, StoredLegacy),
// checks every key (see Bound), Settles the keys that need an exact check,
// writes Pending's IDs and Rows' rows, and returns Finish's results.
//
// # Magnitude bounds
//
// A counter's total must stay in int64, but summing a hot key's log tail on
// every batch would cost as much as the batch. So every key has a bound:
// bounds rows (key, stripe, mag) whose mags add up to at least the sum of
// |delta| over the key's log rows, so |rollup total| + Σ mag ≥ |total|.
// Each batch adds the |delta| it brings to one stripe (concurrent batches
// of one process use distinct stripes, so they do not wait for each other's
// row lock). A key whose bound, including this batch, stays at or below
// FastBound, with at most FastDelta brought by this batch, needs no more:
// even 2^18 transactions (more than PostgreSQL can run at once) in flight
// on it, each unseen by the others, add at most 2^58, and 2^62 + 2^58 is far
// from 2^63. Any other key is settled exactly: its batch locks every stripe
// of the key (so no other batch of the key is in flight), sums its log,
// lets each event through only while the running total stays in int64,
// and resets the bound to the exact sum of |delta| of its rows. (The
// PostgreSQL backend keeps one such bound for the whole store instead; see
// its package documentation.)
package sqlkit

import (
	"cmp"
	"fmt"
	"math"
	"math/big"
	"slices"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/store"
)

// Batch is the plan of one AppendEvents call.
type Batch struct {
	// Events are the events of the call.
	Events []durable.Event
	// Now is the time of the call, Unix nanoseconds: the At of events
	// without one, and the first-seen time of their IDs.
	Now int64

	res   []durable.Result
	first []int  // per event: index of the first event with its (Key, ID); -1 if invalid
	open  []bool // per first occurrence: outcome still to decide
	order []int  // first occurrences, sorted by (Key, ID)
	byKey map[string][]int
	fail  []int // first occurrences that failed in Settle
}

// NewBatch plans events appended at now (Unix nanoseconds).
func NewBatch(events []durable.Event, now int64) *Batch {
	b := &Batch{
		Events: events,
		Now:    now,
		res:    make([]durable.Result, len(events)),
		first:  make([]int, len(events)),
		open:   make([]bool, len(events)),
		order:  make([]int, 0, len(events)),
	}
	for i, e := range events {
		switch {
		case !durable.ValidKey(e.Key):
			b.res[i].Err = fmt.Errorf("%w: event %d: bad key %q", durable.ErrInvalidEvent, i, e.Key)
			b.first[i] = -1
		case !durable.ValidKey(e.ID):
			b.res[i].Err = fmt.Errorf("%w: event %d: bad id %q", durable.ErrInvalidEvent, i, e.ID)
			b.first[i] = -1
		default:
			b.order = append(b.order, i)
		}
	}
	// Sorted by (Key, ID, index), the repeats of an event follow it.
	slices.SortFunc(b.order, func(x, y int) int { return cmp.Or(b.compare(x, events[y].Key, events[y].ID), x-y) })
	out := b.order[:0]
	for _, i := range b.order {
		if n := len(out); n > 0 && b.compare(out[n-1], events[i].Key, events[i].ID) == 0 {
			b.first[i] = out[n-1]
			continue
		}
		b.first[i] = i
		b.open[i] = true
		out = append(out, i)
	}
	b.order = out
	return b
}

// compare orders event i against (key, id).
func (b *Batch) compare(i int, key, id string) int {
	e := &b.Events[i]
	return cmp.Or(cmp.Compare(e.Key, key), cmp.Compare(e.ID, id))
}

// Pending returns the first occurrences whose outcome is not decided yet,
// sorted by (Key, ID): the IDs to look up, and, once every key is
// checked, the events to write.
func (b *Batch) Pending() []int {
	out := make([]int, 0, len(b.order))
	for _, i := range b.order {
		if b.open[i] {
			out = append(out, i)
		}
	}
	return out
}

// Find returns the first occurrence of (key, id), if it is pending.
func (b *Batch) Find(key, id string) (int, bool) {
	j, ok := slices.BinarySearchFunc(b.order, 0, func(i, _ int) int { return b.compare(i, key, id) })
	if !ok {
		return -1, false
	}
	return b.order[j], b.open[b.order[j]]
}

// Stored records that the ID of the first occurrence i is already stored
// for its key with delta: the event is a duplicate, or an ErrIDConflict
// when delta differs.
func (b *Batch) Stored(i int, delta int64) {
	if !b.open[i] {
		return
	}
	b.open[i] = false
	e := b.Events[i]
	if delta != e.Delta {
		b.res[i].Err = fmt.Errorf("%w: key %q id %q was recorded with delta %d, sent with %d",
			durable.ErrIDConflict, e.Key, e.ID, delta, e.Delta)
		return
	}
	b.res[i].Dup = true
}

// StoredLegacy records that id is stored without a key (written before
// IDs were scoped): every pending event with that ID is a duplicate.
func (b *Batch) StoredLegacy(id string) {
	for _, i := range b.order {
		if b.open[i] && b.Events[i].ID == id {
			b.open[i] = false
			b.res[i].Dup = true
		}
	}
}

// Key is one key of a batch and the sum of |Delta| of its pending events,
// saturated at math.MaxInt64.
type Key struct {
	Key string
	Abs int64
}

// Keys returns the keys of the pending events, sorted.
func (b *Batch) Keys() []Key {
	out := make([]Key, 0, b.keyCount())
	for _, i := range b.order { // sorted by key
		e := b.Events[i]
		if !b.open[i] {
			continue
		}
		if n := len(out); n == 0 || out[n-1].Key != e.Key {
			out = append(out, Key{Key: e.Key})
		}
		k := &out[len(out)-1]
		k.Abs = AddSat(k.Abs, Abs(e.Delta))
	}
	return out
}

// keyCount returns the number of keys of the pending events.
func (b *Batch) keyCount() int {
	n, last := 0, -1
	for _, i := range b.order { // sorted by key
		if b.open[i] && (last < 0 || b.Events[last].Key != b.Events[i].Key) {
			n, last = n+1, i
		}
	}
	return n
}

// Settle decides the pending events of key exactly, given its total before
// the batch (rollup total + log tail, which may lie outside int64 in a
// store written by an older build): in the order of the call, an event is
// applied while the running total stays in int64 and fails with
// ErrOverflow otherwise.
func (b *Batch) Settle(key string, total *big.Int) {
	if b.byKey == nil {
		b.byKey = make(map[string][]int)
		for i, e := range b.Events {
			if b.first[i] == i {
				b.byKey[e.Key] = append(b.byKey[e.Key], i)
			}
		}
	}
	v := new(big.Int).Set(total)
	next := new(big.Int)
	for _, i := range b.byKey[key] {
		if !b.open[i] {
			continue
		}
		next.Add(v, big.NewInt(b.Events[i].Delta))
		if !next.IsInt64() {
			b.open[i] = false
			b.res[i].Err = Overflow(key)
			b.fail = append(b.fail, i)
			continue
		}
		v.Set(next)
	}
}

// Failed returns the first occurrences that failed in Settle; a backend
// that wrote their IDs before settling removes them.
func (b *Batch) Failed() []int { return b.fail }

// Row is the stored form of the new events of one key in one batch: their
// sum, their latest At (Unix nanoseconds) and their count.
type Row struct {
	Key   string // counter key
	Delta int64  // sum of the events' deltas
	At    int64  // latest At, Unix nanoseconds
	N     int64  // number of events
}

// Rows sums the pending events into one Row per key, sorted by key; an
// event with zero At counts as at Now. A key whose sum would overflow
// int64 gets a further row.
func (b *Batch) Rows() []Row {
	rows := make([]Row, 0, b.keyCount())
	for _, i := range b.order {
		if !b.open[i] {
			continue
		}
		e := b.Events[i]
		at := b.Now
		if !e.At.IsZero() {
			at = e.At.UnixNano()
		}
		if n := len(rows); n > 0 && rows[n-1].Key == e.Key {
			r := &rows[n-1]
			if s, ok := Add(r.Delta, e.Delta); ok {
				r.Delta, r.At, r.N = s, max(r.At, at), r.N+1
				continue
			}
		}
		rows = append(rows, Row{Key: e.Key, Delta: e.Delta, At: at, N: 1})
	}
	return rows
}

// Finish decides what is left: pending events were written (counted); a
// repeat of an event in the same call is a duplicate of it, shares its
// failure, or is an ErrIDConflict when its delta differs.
func (b *Batch) Finish() []durable.Result {
	for i := range b.Events {
		j := b.first[i]
		switch {
		case j < 0:
		case j == i:
			b.open[i] = false
		case b.Events[i].Delta != b.Events[j].Delta:
			e := b.Events[i]
			b.res[i].Err = fmt.Errorf("%w: key %q id %q was sent with delta %d and %d in one batch",
				durable.ErrIDConflict, e.Key, e.ID, b.Events[j].Delta, e.Delta)
		case b.res[j].Err != nil:
			b.res[i].Err = b.res[j].Err
		default:
			b.res[i].Dup = true
		}
	}
	return b.res
}

// Overflow is the error of an event that would take key's total out of
// int64.
func Overflow(key string) error {
	return fmt.Errorf("%w: durable counter %q", store.ErrOverflow, key)
}

// Add returns a+b and whether it did not overflow.
func Add(a, b int64) (int64, bool) {
	s := a + b
	if (b > 0 && s < a) || (b < 0 && s > a) {
		return 0, false
	}
	return s, true
}

// Abs returns |d|, saturated at math.MaxInt64 (for math.MinInt64).
func Abs(d int64) int64 {
	switch {
	case d == math.MinInt64:
		return math.MaxInt64
	case d < 0:
		return -d
	}
	return d
}

// AddSat returns a+b for non-negative a and b, saturated at
// math.MaxInt64.
func AddSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}
