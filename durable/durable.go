// Package durable is hotcount's durable layer: checkpoints for counters in
// `fast` mode, an idempotent, group-committed event log for counters in
// `durable` mode, counter metadata, and the clean-up of all three.
//
// # Checkpoints (fast mode)
//
// The cache holds the counter; a checkpoint records the total of one
// sub-counter at a point in time (Checkpoint). SaveCheckpoints is an upsert
// guarded by (Epoch, At): a stored checkpoint is replaced only by one that
// is not older, so saving the same checkpoint twice, or a late save from a
// slow process, changes nothing. A checkpoint of a cleared counter read at
// or before the clear is ignored (see Clearing).
//
// # Event log (durable mode)
//
// Every increment is an Event with an idempotency ID. AppendEvents writes a
// batch in one transaction and commits before it returns, with a Result per
// event: counted, duplicate, or failed on its own.
//
// IDs are scoped to their counter: the ids table is keyed by (counter key,
// ID) and holds the event's delta and the time it was first seen. The same
// ID on two keys is two increments. An ID already recorded for its key with
// the same delta is a duplicate: acknowledged, not counted again. With
// another delta it is ErrIDConflict, a permanent error: a client reused an
// ID for a different increment. The ids table is separate from the events,
// so a duplicate stays a duplicate after a rollup has compacted the
// original event, and after the counter was cleared.
//
// The retention window of IDs (DedupWindow in each backend's Config,
// default DefaultDedupWindow) is how long an ID is remembered after it was
// first seen. Prune forgets older IDs; a retry sent after that counts
// again, as a new increment. Clients must not retry an increment later
// than the window after its first attempt.
//
// Stores written before IDs were scoped hold IDs without a key. After the
// upgrade such an ID still makes an event with the same ID on any key a
// duplicate, until it leaves the window, so that no retry across the
// upgrade counts twice.
//
// A backend stores the new events of one key in one batch as one row (their
// sum, latest At and count), so a hot key costs one log row per commit, not
// one per increment; its IDs are still recorded one by one.
//
// # Integrity: one key cannot harm another
//
// A counter's total (rollup total + log tail) never leaves int64. An event
// that would take it out fails alone with ErrOverflow (it wraps
// store.ErrOverflow); every other event of the batch, of the same key or of
// others, is unaffected. Backends check cheaply against a stored upper
// bound of the magnitude, raised by every batch: per key in SQLite, one for
// the whole store in PostgreSQL (one row per batch, whatever its keys).
// Only when that bound comes near the limit (2^62), or a batch brings a
// very large delta (more than 2^40 in all), does the batch pay for an
// exact check of its keys.
//
// Errors are classified. Permanent errors (ErrOverflow, ErrIDConflict,
// ErrInvalidEvent, ErrInvalidCheckpoint, ErrSchemaVersion, ErrBackend) never
// match store.ErrUnavailable; only transient trouble (a lost connection, a
// timeout, a lock or serialization conflict, a full disk) does, and a retry
// of the same call (with the same IDs) is then safe.
//
// # Rollup and pruning
//
// Rollup folds rows older than a cut-off into per-key totals and deletes
// them, so that Exact (rollup total + sum of the events not yet rolled up)
// reads the same before and after. A row is folded when its latest event
// is older than the cut-off, so no event newer than the cut-off is ever
// folded. It progresses per key: a key whose total would overflow is
// skipped and reported in RollupReport.Failed, every other key is folded.
// Prune, which Rollup runs first in its own transaction, forgets IDs older
// than the dedup window and tombstones older than their retention; it does
// not depend on the fold succeeding, so the ids and events tables stay
// bounded.
//
// # Clearing
//
// ClearCounter removes, in one transaction, everything stored about one
// counter: its rollup total and log events, the checkpoints of its
// sub-counters (sub-keys "{key#label}", as keyspace.SubKey builds them,
// matched exactly with keyspace.ParseSubKey, so clearing "a" leaves "a#b"
// alone) and its metadata. It records a tombstone (key → at): a later
// SaveCheckpoints of a sub-counter of that key read at or before at is
// ignored, so a slow process cannot bring a cleared counter back. Log events
// and checkpoints after at (of the counter that started again after a
// deadline, when the clean-up runs late) are kept, and so is the magnitude
// bound of the kept events. The tombstone's retention counts from at when
// at is in the past, since a checkpoint read at or before at is saved
// within the retention after it. Its IDs are kept: a retry of an increment acknowledged before
// the clear is still a duplicate. Tombstones are pruned after
// TombstoneRetention.
//
// # Deadlines
//
// SetDeadlines records when counters expire (table deadlines); a counter
// whose deadline passed is cleared by the clean-up pass of its user
// (internal/durability), which DueDeadlines feeds. ClearCounter removes the
// record. LoadDeadlines gives a restore or a rebuild the deadline of the
// counters whose values it writes back. When another counter started
// under the key after the deadline and lives on, the pass uses ClearEnded:
// what the old one left goes as with ClearCounter, but the metadata and
// the deadline record, the living counter's, stay.
//
// # Group commit
//
// A transaction per increment costs one fsync each; Committer lets many
// goroutines share one. Append hands an event to the committer and blocks
// until the batch that holds it has committed, and returns that event's own
// result. Up to MaxInFlight batches commit at once (PostgreSQL: up to 4,
// whose commits share WAL flushes, but no more than GOMAXPROCS, at least 2;
// SQLite: 1) while the next one fills. A batch is cut when it reaches
// MaxBatch events or MaxDelay after its first event arrived, whichever is
// first, and (unless FixedDelay), when a commit slot is free, as soon as it
// holds its share of the callers: the most events outstanding lately
// divided by MaxInFlight, but at least MinShare (128) or all of them when
// fewer. With synchronous callers the throughput is at most callers ÷
// commit latency, so under a closed loop of N callers this keeps about
// min(MaxInFlight, max(1, N/MinShare)) batches in flight: one batch is
// written while another waits for its fsync, a light load is not split
// into batches whose fixed cost outweighs their overlap, and a lone caller
// is committed at once instead of after MaxDelay. Close drains: every
// accepted event is committed.
//
// Backends: durable/postgres (PostgreSQL via pgx) and durable/sqlite (a
// SQLite file, the embedded default). durable/durabletest holds the
// conformance suite both run.
package durable

import (
	"context"
	"errors"
	"strings"
	"time"
	"unicode/utf8"
)

// Defaults of the backends' Config fields.
const (
	// DefaultDedupWindow is how long an event ID is remembered after it
	// was first seen, when a backend's DedupWindow is zero.
	DefaultDedupWindow = 24 * time.Hour
	// DefaultTombstoneRetention is how long the tombstone of a cleared
	// counter is kept when a backend's TombstoneRetention is zero. It
	// must exceed the longest time a checkpoint can take from being read
	// to being saved.
	DefaultTombstoneRetention = time.Hour
)

// Named errors. Transient backend trouble wraps store.ErrUnavailable; a
// closed backend or committer returns store.ErrClosed; every other error
// here is permanent.
var (
	// ErrInvalidEvent: an event has an empty or malformed Key or ID.
	ErrInvalidEvent = errors.New("hotcount: invalid durable event")
	// ErrIDConflict: an event's ID was already recorded for its key with
	// another delta. The event is not counted.
	ErrIDConflict = errors.New("hotcount: idempotency id reused with another delta")
	// ErrInvalidCheckpoint: a checkpoint has an empty or malformed Key, or
	// an Epoch above math.MaxInt64.
	ErrInvalidCheckpoint = errors.New("hotcount: invalid checkpoint")
	// ErrInvalidConfig: a configuration value is out of range.
	ErrInvalidConfig = errors.New("hotcount: invalid durable config")
	// ErrNotFound: LoadMeta found no metadata under the key.
	ErrNotFound = errors.New("hotcount: durable record not found")
	// ErrSchemaVersion: the database schema is newer than this build knows.
	ErrSchemaVersion = errors.New("hotcount: durable schema is newer than this build")
	// ErrBackend: the database refused an operation for a reason a retry
	// will not cure (a missing table, a constraint, a corrupt file).
	ErrBackend = errors.New("hotcount: durable store error")
)

// Checkpoint is the total of one counter at a point in time, for `fast`
// mode.
type Checkpoint struct {
	// Key is the key checkpointed: a sub-key "{counter#label}", or a
	// counter key.
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
	// ID is the idempotency id, scoped to Key; required. An ID seen before
	// on the same key within the dedup window is not counted again.
	ID string
	// At is when the increment happened; zero means the time of the append.
	// Rollup folds events by At.
	At time.Time
}

// Result is the outcome of one event of AppendEvents.
type Result struct {
	// Dup reports that the event's ID was already recorded for its key with
	// the same delta (or without one, before IDs were scoped), or came
	// earlier in the same call: it was acknowledged and not counted again.
	Dup bool
	// Err is why the event was not counted, when it failed on its own:
	// ErrInvalidEvent, ErrIDConflict or ErrOverflow (store.ErrOverflow).
	// Such errors are permanent.
	Err error
}

// KeyError is a failure of one key in an operation over many.
type KeyError struct {
	// Key is the counter key.
	Key string
	// Err is why it failed.
	Err error
}

// Error implements error.
func (e KeyError) Error() string { return e.Key + ": " + e.Err.Error() }

// Unwrap returns Err.
func (e KeyError) Unwrap() error { return e.Err }

// RollupReport is the outcome of Rollup.
type RollupReport struct {
	// Folded is the number of events folded into totals, over Keys keys.
	Folded, Keys int
	// Failed lists the keys whose old events could not be folded (their
	// total would overflow: Err wraps store.ErrOverflow); they are left as
	// they were, and every other key was folded.
	Failed []KeyError
	// Pruned is what the prune run before the fold removed.
	Pruned PruneReport
}

// PruneReport is the outcome of Prune.
type PruneReport struct {
	// IDs is the number of idempotency ids forgotten (older than the dedup
	// window).
	IDs int
	// Tombstones is the number of tombstones removed (older than their
	// retention).
	Tombstones int
}

// Stats are the sizes of a store.
type Stats struct {
	// Rows is the row count of each table, by table name.
	Rows map[string]int64
	// Bytes is the space the store holds on disk (tables, indexes and, for
	// SQLite, the write-ahead log).
	Bytes int64
}

// Checkpoints stores fast-mode checkpoints.
type Checkpoints interface {
	// SaveCheckpoints upserts cps in one transaction; a stored checkpoint
	// is replaced only by a Newer one, so saving the same checkpoint twice
	// changes nothing. A checkpoint whose counter was cleared at or after
	// its At is ignored.
	SaveCheckpoints(ctx context.Context, cps []Checkpoint) error
	// LoadCheckpoints returns the stored checkpoints of keys; keys without
	// one are absent from the map.
	LoadCheckpoints(ctx context.Context, keys []string) (map[string]Checkpoint, error)
	// ListCheckpoints returns every checkpoint whose key starts with
	// prefix, sorted by key. It holds the whole list: for a prefix that
	// may name many checkpoints, page with ListCheckpointsAfter.
	ListCheckpoints(ctx context.Context, prefix string) ([]Checkpoint, error)
	// ListCheckpointsAfter returns up to limit checkpoints whose key
	// starts with prefix and comes after the key after in byte order,
	// sorted by key: one page, read from the key index. Fewer than limit
	// means the last page; the next page starts after the last key of
	// this one.
	ListCheckpointsAfter(ctx context.Context, prefix, after string, limit int) ([]Checkpoint, error)
}

// Log is the durable event log.
type Log interface {
	// AppendEvents writes events in one transaction and commits before it
	// returns, with one Result per event (see Result). A nil error means
	// every Result is final; on error nothing was written.
	AppendEvents(ctx context.Context, events []Event) ([]Result, error)
	// Rollup prunes (see Prune), then folds events with At before the
	// cut-off into per-key totals and deletes them, key by key. Events of
	// one key appended in one call may be stored together and are then
	// folded together, once the newest of them is before the cut-off. The
	// error reports trouble with the prune or the fold as a whole; keys
	// that failed alone are in the report.
	Rollup(ctx context.Context, before time.Time) (RollupReport, error)
	// Exact returns the rollup total of key plus the sum of its events not
	// yet rolled up, read from one snapshot. A total outside int64 (only a
	// store written by an older build can hold one) is ErrOverflow.
	Exact(ctx context.Context, key string) (int64, error)
	// ExactMulti returns Exact for every key (0 for a key with no state),
	// from one snapshot. When a key's total is outside int64 the error
	// wraps ErrOverflow and names it, and the map holds every other key.
	ExactMulti(ctx context.Context, keys []string) (map[string]int64, error)
	// Keys lists, sorted, the keys starting with prefix that have a rollup
	// total or events. It holds the whole list: for a prefix that may
	// name many keys, page with KeysAfter.
	Keys(ctx context.Context, prefix string) ([]string, error)
	// KeysAfter is one page of Keys: up to limit keys starting with
	// prefix that come after the key after in byte order, sorted, read
	// from the key indexes. Fewer than limit means the last page; the
	// next page starts after the last key of this one.
	KeysAfter(ctx context.Context, prefix, after string, limit int) ([]string, error)
}

// Meta stores counter metadata (label sets) as opaque bytes.
type Meta interface {
	// SaveMeta stores data under key, replacing what was there.
	SaveMeta(ctx context.Context, key string, data []byte) error
	// LoadMeta returns the data under key, or ErrNotFound.
	LoadMeta(ctx context.Context, key string) ([]byte, error)
	// LoadMetas returns the data under keys in one query; keys without
	// metadata are absent from the map.
	LoadMetas(ctx context.Context, keys []string) (map[string][]byte, error)
	// DeleteMeta removes the metadata under key; a missing one is no
	// error.
	DeleteMeta(ctx context.Context, key string) error
}

// Lifecycle removes what is no longer needed and measures what is held.
type Lifecycle interface {
	// ClearCounter removes, atomically, the rollup total, the log events
	// and sub-counter checkpoints at or before at, the metadata and the
	// deadline record of counter key, and records a tombstone key → at
	// (the latest at wins), kept for the tombstone retention after at (or
	// after now, when at is later). IDs are kept.
	ClearCounter(ctx context.Context, key string, at time.Time) error
	// ClearEnded is ClearCounter of a counter that ended at at while
	// another counter started under its key since and lives on: the
	// same rows go, but the metadata and the deadline record, which are
	// the living counter's, are kept.
	ClearEnded(ctx context.Context, key string, at time.Time) error
	// Tombstones returns the tombstones of keys; keys never cleared, or
	// whose tombstone was pruned, are absent.
	Tombstones(ctx context.Context, keys []string) (map[string]time.Time, error)
	// Prune forgets IDs older than the dedup window and removes tombstones
	// older than their retention, each in its own statement.
	Prune(ctx context.Context) (PruneReport, error)
	// SetDeadlines records, for every counter key of deadlines, that it
	// is gone from its time on (a zero time removes the record), in one
	// transaction. With onlyNew, existing records are kept: an estimate
	// never replaces a deadline that was set exactly.
	SetDeadlines(ctx context.Context, deadlines map[string]time.Time, onlyNew bool) error
	// DueDeadlines returns up to limit deadline records at or before now,
	// oldest first.
	DueDeadlines(ctx context.Context, now time.Time, limit int) (map[string]time.Time, error)
	// LoadDeadlines returns the deadline records of keys; keys without
	// one are absent. A restore gives the counters it brings back these
	// deadlines.
	LoadDeadlines(ctx context.Context, keys []string) (map[string]time.Time, error)
	// Stats counts the rows of every table and the bytes the store holds.
	// It reads every table: call it at the pace of a metrics scrape, not
	// per request.
	Stats(ctx context.Context) (Stats, error)
}

// Backend is a durable store: checkpoints, event log, metadata and their
// clean-up.
type Backend interface {
	Checkpoints
	Log
	Meta
	Lifecycle
	// StoreID returns the identity of the store: a random id created once,
	// with the schema. Tools that repair a cache from a store use it to
	// refuse a store that is not theirs.
	StoreID() string
	// Close releases the backend; it is idempotent.
	Close() error
}

// Appender is what a Committer writes batches to (a Log).
type Appender interface {
	// AppendEvents is Log.AppendEvents. It must not keep events after it
	// returns: the Committer reuses the slice for a later batch.
	AppendEvents(ctx context.Context, events []Event) ([]Result, error)
}

// ValidKey reports whether key can be stored: not empty, valid UTF-8, no
// NUL byte (PostgreSQL text cannot hold one).
func ValidKey(key string) bool {
	return key != "" && utf8.ValidString(key) && !strings.ContainsRune(key, 0)
}
