package hotcount

import (
	"errors"

	"github.com/hotcount/hotcount/durable"

	"github.com/hotcount/hotcount/buffer"
	"github.com/hotcount/hotcount/internal/durability"
	"github.com/hotcount/hotcount/internal/engine"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// MaxDelta is the largest magnitude of one increment's delta, the bound
// of a sub-counter (store.MaxValue, 2^53-1: what a Lua number and a JSON
// number hold exactly). A larger one fails with ErrOverflow and changes
// nothing; faces check it before they change anything else.
const MaxDelta = store.MaxValue

// Named errors. Every error the Client returns for bad input or a failed
// backend wraps one of these, with its cause kept; test with errors.Is.
var (
	// ErrInvalidKey: the key breaks the key rules (see ValidateKey).
	ErrInvalidKey = keyspace.ErrInvalidKey
	// ErrZeroDelta: an increment of 0 was asked for.
	ErrZeroDelta = errors.New("hotcount: delta must not be zero")
	// ErrInvalidN: a number of sub-counters outside 1..keyspace.MaxN.
	ErrInvalidN = errors.New("hotcount: invalid number of sub-counters")
	// ErrOverflow: the delta or its sub-counter would pass ±store.MaxValue,
	// or a durable total or a sum would leave int64; nothing was changed.
	ErrOverflow = store.ErrOverflow
	// ErrUnavailable: the backend could not be reached in time.
	ErrUnavailable = store.ErrUnavailable
	// ErrClosed: the Client was closed.
	ErrClosed = engine.ErrClosed
	// ErrStoreClosed: the cache or durable store was closed under a call
	// (the Client is closing). Faces treat it like ErrClosed.
	ErrStoreClosed = store.ErrClosed
	// ErrConfig: the Config is invalid, or asks for something it does not
	// provide; the message says which field.
	ErrConfig = errors.New("hotcount: invalid config")
	// ErrBackpressure: buffered deltas are held because the cache is not
	// taking them, and the bound (Config.Buffer.MaxPendingKeys) is
	// reached; nothing was added. Retry later.
	ErrBackpressure = buffer.ErrBackpressure
	// ErrNotDurable: IncrID or GetExact was asked for a key that is not in
	// durable mode.
	ErrNotDurable = durability.ErrNotDurable
	// ErrNoMetadata: the store keeps no counter metadata, so N cannot
	// change.
	ErrNoMetadata = engine.ErrNoMetadata
	// ErrNoExpiry: the store keeps no deadlines (a Store given in the
	// Config without them).
	ErrNoExpiry = engine.ErrNoExpiry
	// ErrIDConflict: an idempotency id was re-sent on the same counter
	// with another delta; nothing was counted.
	ErrIDConflict = durable.ErrIDConflict
	// ErrConflict: another resize of the same counter is under way; retry
	// when it is done.
	ErrConflict = engine.ErrConflict
	// ErrExists: Create was asked for a counter that exists already with
	// another number of sub-counters; nothing changed (Resize changes it).
	ErrExists = engine.ErrExists
	// ErrForeignStore: Rebuild or a restore found that the durable store
	// does not belong to the cache cluster; nothing was restored.
	ErrForeignStore = durability.ErrForeignStore
	// ErrModeChanged: New found counters in the durable store written in
	// the other durability mode than the one the Config now gives them
	// (a namespace's mode changed, or a namespace removed or its prefix
	// changed); it comes wrapped in ErrConfig, naming the setting and the
	// counters. See docs/concepts.md, changing a mode.
	ErrModeChanged = durability.ErrModeChanged
)
