// Package durable is hotcount's durable layer: checkpoints for counters in
// `fast` mode, and an idempotent, group-committed event log for counters in
// `durable` mode.
//
// # Checkpoints (fast mode)
//
// The cache holds the counter; a checkpoint records its total at a point in
// time (Checkpoint). SaveCheckpoints is an upsert guarded by (Epoch, At): a
// stored checkpoint is replaced only by one that is not older, so saving the
// same checkpoint twice, or a late save from a slow process, changes nothing.
//
// # Event log (durable mode)
//
// Every increment is an Event with an idempotency ID. AppendEvents writes a
// batch in one transaction and commits before it returns. Each ID is recorded
// in an ids table with the time it was first seen; an ID already present is a
// duplicate, reported as such and not counted again. The ids table is
// separate from the events, so a duplicate stays a duplicate after a rollup
// has compacted the original event. IDs older than the dedup window (default
// DefaultDedupWindow) may be pruned; a duplicate that arrives within the
// window never counts twice.
//
// A backend stores the new events of one key in one batch as one row (their
// sum, latest At and count), so a hot key costs one log row per commit, not
// one per increment; its IDs are still recorded one by one.
//
// Rollup folds rows older than a cut-off into per-key totals and deletes
// them, in one transaction, so that Exact (rollup total + sum of the events
// not yet rolled up) reads the same before and after. A row is folded when
// its latest event is older than the cut-off, so no event newer than the
// cut-off is ever folded. Rollup also prunes expired IDs.
//
// # Group commit
//
// A transaction per increment costs one fsync each; Committer lets many
// goroutines share one. Append hands an event to the committer's owning
// goroutine and blocks until the batch that holds it has committed. A batch
// is cut when it reaches MaxBatch events or MaxDelay after its first event
// arrived, whichever is first, and (unless FixedDelay) as soon as it is as
// large as the previous batch: once the callers of the last commit are back
// there is little to gain by waiting, so a closed loop of callers runs at
// commit speed instead of commit speed plus MaxDelay. While one batch
// commits the next one fills, so under load batches grow with the number of
// waiting callers. Close drains: every accepted event is committed.
//
// Backends: durable/postgres (PostgreSQL via pgx) and durable/sqlite (a
// SQLite file, the embedded default). durable/durabletest holds the
// conformance suite both run.
package durable

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/hotcount/hotcount/store"
)

// DefaultDedupWindow is how long an event ID is remembered when a backend's
// configured window is zero.
const DefaultDedupWindow = 24 * time.Hour

// Named errors. Backend trouble wraps store.ErrUnavailable; a closed backend
// or committer returns store.ErrClosed.
var (
	// ErrInvalidEvent: an event has an empty or malformed Key or ID.
	ErrInvalidEvent = errors.New("hotcount: invalid durable event")
	// ErrInvalidCheckpoint: a checkpoint has an empty or malformed Key, or
	// an Epoch above math.MaxInt64.
	ErrInvalidCheckpoint = errors.New("hotcount: invalid checkpoint")
	// ErrInvalidConfig: a configuration value is out of range.
	ErrInvalidConfig = errors.New("hotcount: invalid durable config")
	// ErrNotFound: LoadMeta found no metadata under the key.
	ErrNotFound = errors.New("hotcount: durable record not found")
	// ErrSchemaVersion: the database schema is newer than this build knows.
	ErrSchemaVersion = errors.New("hotcount: durable schema is newer than this build")
)

// Checkpoint is the total of one counter at a point in time, for `fast`
// mode.
type Checkpoint struct {
	// Key is the counter key.
	Key string
	// Total is the counter's value at At.
	Total int64
	// Epoch is the cache incarnation or a sequence number; a checkpoint
	// with a higher Epoch always wins. It must not exceed math.MaxInt64.
	Epoch uint64
	// At is when the total was read.
	At time.Time
}

// Newer reports whether c should replace old: (Epoch, At) of c is not less
// than that of old.
func (c Checkpoint) Newer(old Checkpoint) bool {
	if c.Epoch != old.Epoch {
		return c.Epoch > old.Epoch
	}
	return !c.At.Before(old.At)
}

// Event is one increment of the durable event log.
type Event struct {
	// Key is the counter key.
	Key string
	// Delta is added to the counter.
	Delta int64
	// ID is the idempotency id; required. An ID seen before within the
	// dedup window is not counted again.
	ID string
	// At is when the increment happened; zero means the time of the append.
	// Rollup folds events by At.
	At time.Time
}

// Checkpoints stores fast-mode checkpoints.
type Checkpoints interface {
	// SaveCheckpoints upserts cps in one transaction; a stored checkpoint
	// is replaced only by a Newer one, so saving the same checkpoint twice
	// changes nothing.
	SaveCheckpoints(ctx context.Context, cps []Checkpoint) error
	// LoadCheckpoints returns the stored checkpoints of keys; keys without
	// one are absent from the map.
	LoadCheckpoints(ctx context.Context, keys []string) (map[string]Checkpoint, error)
	// ListCheckpoints returns every checkpoint whose key starts with
	// prefix, sorted by key (for restore after cache loss).
	ListCheckpoints(ctx context.Context, prefix string) ([]Checkpoint, error)
}

// Log is the durable event log.
type Log interface {
	// AppendEvents writes events in one transaction and commits before it
	// returns. dup[i] is true when events[i].ID was already seen within the
	// dedup window, or earlier in the same call; such an event is not
	// counted again. On error nothing was written.
	AppendEvents(ctx context.Context, events []Event) (dup []bool, err error)
	// Rollup folds events with At before the cut-off into per-key totals
	// and deletes them, atomically, and prunes IDs older than the dedup
	// window. It returns the number of events folded. Events of one key
	// appended in one call may be stored together and are then folded
	// together, once the newest of them is before the cut-off.
	Rollup(ctx context.Context, before time.Time) (folded int, err error)
	// Exact returns the rollup total of key plus the sum of its events not
	// yet rolled up, read from one snapshot.
	Exact(ctx context.Context, key string) (int64, error)
	// ExactMulti returns Exact for every key (0 for a key with no state).
	ExactMulti(ctx context.Context, keys []string) (map[string]int64, error)
	// Keys lists, sorted, the keys starting with prefix that have a rollup
	// total or events.
	Keys(ctx context.Context, prefix string) ([]string, error)
}

// Meta stores counter metadata (label sets) as opaque bytes.
type Meta interface {
	// SaveMeta stores data under key, replacing what was there.
	SaveMeta(ctx context.Context, key string, data []byte) error
	// LoadMeta returns the data under key, or ErrNotFound.
	LoadMeta(ctx context.Context, key string) ([]byte, error)
}

// Backend is a durable store: checkpoints, event log and metadata.
type Backend interface {
	Checkpoints
	Log
	Meta
	// Close releases the backend; it is idempotent.
	Close() error
}

// Appender is what a Committer writes batches to (a Log).
type Appender interface {
	// AppendEvents is Log.AppendEvents.
	AppendEvents(ctx context.Context, events []Event) (dup []bool, err error)
}

// ValidKey reports whether key can be stored: not empty, valid UTF-8, no
// NUL byte (PostgreSQL text cannot hold one).
func ValidKey(key string) bool {
	return key != "" && utf8.ValidString(key) && !strings.ContainsRune(key, 0)
}

// CheckEvents validates events for AppendEvents.
func CheckEvents(events []Event) error {
	for i, e := range events {
		if !ValidKey(e.Key) {
			return fmt.Errorf("%w: event %d: bad key %q", ErrInvalidEvent, i, e.Key)
		}
		if !ValidKey(e.ID) {
			return fmt.Errorf("%w: event %d: bad id %q", ErrInvalidEvent, i, e.ID)
		}
	}
	return nil
}

// CheckCheckpoints validates checkpoints for SaveCheckpoints.
func CheckCheckpoints(cps []Checkpoint) error {
	for i, c := range cps {
		if !ValidKey(c.Key) {
			return fmt.Errorf("%w: checkpoint %d: bad key %q", ErrInvalidCheckpoint, i, c.Key)
		}
		if c.Epoch > math.MaxInt64 {
			return fmt.Errorf("%w: checkpoint %d: epoch %d above MaxInt64", ErrInvalidCheckpoint, i, c.Epoch)
		}
	}
	return nil
}

// FirstSeen marks, for each event, whether an earlier event of the same
// slice has the same ID (dup[i] true), and returns the indexes of the first
// occurrences in order. Backends use it so that a batch that repeats an ID
// counts it once.
func FirstSeen(events []Event) (first []int, dup []bool) {
	dup = make([]bool, len(events))
	first = make([]int, 0, len(events))
	seen := make(map[string]struct{}, len(events))
	for i, e := range events {
		if _, ok := seen[e.ID]; ok {
			dup[i] = true
			continue
		}
		seen[e.ID] = struct{}{}
		first = append(first, i)
	}
	return first, dup
}

// LatestCheckpoints keeps, per key, the Newest of cps (the last one wins a
// tie), so that a batch upsert never touches a row twice.
func LatestCheckpoints(cps []Checkpoint) []Checkpoint {
	idx := make(map[string]int, len(cps))
	out := make([]Checkpoint, 0, len(cps))
	for _, c := range cps {
		if i, ok := idx[c.Key]; ok {
			if c.Newer(out[i]) {
				out[i] = c
			}
			continue
		}
		idx[c.Key] = len(out)
		out = append(out, c)
	}
	return out
}

// Row is the stored form of the new events of one key in one batch: their
// sum, their latest At (Unix nanoseconds) and their count.
type Row struct {
	Key   string // counter key
	Delta int64  // sum of the events' deltas
	At    int64  // latest At, Unix nanoseconds
	N     int64  // number of events
}

// Aggregate sums the events not marked dup into one Row per key, in order
// of first appearance; an event with zero At counts as at now. A key whose
// sum would overflow int64 gets a further row.
func Aggregate(events []Event, dup []bool, now int64) []Row {
	idx := make(map[string]int, 4)
	var rows []Row
	for i, e := range events {
		if dup[i] {
			continue
		}
		at := now
		if !e.At.IsZero() {
			at = e.At.UnixNano()
		}
		j, ok := idx[e.Key]
		if ok {
			r := &rows[j]
			if s := r.Delta + e.Delta; (e.Delta > 0 && s < r.Delta) || (e.Delta < 0 && s > r.Delta) {
				ok = false // overflow: start a new row for this key
			} else {
				r.Delta, r.At, r.N = s, max(r.At, at), r.N+1
			}
		}
		if !ok {
			idx[e.Key] = len(rows)
			rows = append(rows, Row{Key: e.Key, Delta: e.Delta, At: at, N: 1})
		}
	}
	return rows
}

// Unavailable wraps a backend error so that it matches store.ErrUnavailable
// (and still matches err, e.g. context.DeadlineExceeded).
func Unavailable(op string, err error) error {
	if err == nil {
		return nil
	}
	return fmt.Errorf("%w: durable %s: %w", store.ErrUnavailable, op, err)
}

// Nanos converts t to Unix nanoseconds, the stored form of every time; the
// zero time becomes math.MinInt64.
func Nanos(t time.Time) int64 {
	if t.IsZero() {
		return math.MinInt64
	}
	return t.UnixNano()
}

// FromNanos converts stored Unix nanoseconds back to a time.Time (Nanos'
// inverse).
func FromNanos(ns int64) time.Time {
	if ns == math.MinInt64 {
		return time.Time{}
	}
	return time.Unix(0, ns)
}

// Window returns d, or DefaultDedupWindow when d is zero; a negative d is
// ErrInvalidConfig.
func Window(d time.Duration) (time.Duration, error) {
	switch {
	case d < 0:
		return 0, fmt.Errorf("%w: negative dedup window %v", ErrInvalidConfig, d)
	case d == 0:
		return DefaultDedupWindow, nil
	}
	return d, nil
}
