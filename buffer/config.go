package buffer

import (
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/hotcount/hotcount/clock"

	"github.com/hotcount/hotcount/store"
)

// Defaults for the zero values of Config.
const (
	// DefaultInterval is how often deltas are flushed.
	DefaultInterval = 500 * time.Millisecond
	// DefaultMaxKeys is how many keys may gain a delta between two flushes
	// before a flush starts early.
	DefaultMaxKeys = 10_000
	// DefaultMaxPendingKeys is the default bound on entries held (see
	// Config.MaxPendingKeys): 20 × DefaultMaxKeys.
	DefaultMaxPendingKeys = 200_000
	// DefaultBatchSize is the most ops sent in one IncrMulti call.
	DefaultBatchSize = 1_000
	// DefaultBatchTimeout bounds each IncrMulti call.
	DefaultBatchTimeout = 2 * time.Second
	// DefaultMaxBackoff caps the wait between retries of a failed op.
	DefaultMaxBackoff = 30 * time.Second
	// DefaultHotAt is the Adds per flush interval from which a key is hot
	// (see Config.HotAt).
	DefaultHotAt = 8
)

// ErrConfig is wrapped by every configuration error from New.
var ErrConfig = errors.New("hotcount: invalid buffer config")

// Config configures a Buffer. The zero value of every field except Labels
// means its documented default. New copies the struct; later changes by the
// caller have no effect.
type Config struct {
	// Interval between timed flushes. Default DefaultInterval.
	Interval time.Duration
	// MaxKeys starts a flush early once this many keys were newly
	// buffered since the last flush. A key stays buffered (at no cost to
	// Add) until it has had no delta for a whole interval, so each flush
	// holds roughly MaxKeys keys plus those active in the last interval.
	// Default DefaultMaxKeys.
	MaxKeys int
	// MaxPendingKeys bounds memory: the number of entries held, counting
	// one per key that has an accumulating cell and one per op cut for a
	// flush but not yet acknowledged by the sink. When the bound is
	// reached, Add of a key that has no cell returns ErrBackpressure (Adds
	// to keys that already have a cell still succeed, as they take no
	// memory). Nothing is ever dropped. Default DefaultMaxPendingKeys.
	MaxPendingKeys int
	// BatchSize is the most ops per IncrMulti call. Default
	// DefaultBatchSize.
	BatchSize int
	// BatchTimeout bounds each IncrMulti call. Default DefaultBatchTimeout.
	BatchTimeout time.Duration
	// TokenTTL is how long the sink remembers a writer's flush sequence
	// on a sub-counter after its last flush there. Exactly-once holds
	// while an op's retries happen within TokenTTL of its first send.
	// Default store.DefaultTokenTTL.
	TokenTTL time.Duration
	// HotAt is how many Adds in one flush interval make a key hot. A hot
	// key's flush is exactly-once (a writer sequence checked in its
	// sub-counter's slot); a
	// cold key's is one plain INCRBY: no script, no extra key, and, when
	// its reply is lost, dropped rather than retried (Stats.ColdDropped).
	// A hot key turns cold after an interval whose delta is below half of
	// HotAt (rounded up) in magnitude; a key with lanes is hot. 1 makes
	// every key hot (every flush exactly-once). Default DefaultHotAt.
	HotAt int
	// MaxBackoff caps the wait before an op that failed is retried; the
	// wait starts at Interval and doubles per failure. Default
	// DefaultMaxBackoff.
	MaxBackoff time.Duration
	// OnFlushed, when set, is told how long each flush round that sent
	// ops took and how many it sent (for a latency histogram). It must be
	// cheap.
	OnFlushed func(d time.Duration, ops int)
	// ExpireAt, when set, returns the deadline the sub-counter label of a
	// counter key takes when a flush creates it (zero: none).
	ExpireAt func(key, label string) time.Time
	// Labels returns the active write labels of a counter key; each flush
	// of a key sends its whole delta to one label chosen at random from
	// this list. Required. It is called from the flushing goroutine only.
	Labels func(key string) []string
	// ColdLabel, when set, is the label every cold key's flush goes to,
	// without calling Labels: one that every reader sums whatever the
	// counter's label sets (keyspace.ColdLabel with counter metadata), so
	// that a cold key's flush costs no look-up of its labels. Empty: cold
	// keys' flushes pick from Labels as hot keys' do.
	ColdLabel string
	// Clock provides time; nil means the system clock.
	Clock clock.Clock
	// Rand returns random 64-bit values for label choice and flush tokens.
	// nil means a ChaCha8 generator seeded from crypto/rand. It is called
	// from the flushing goroutine only, never concurrently.
	Rand func() uint64
	// OnError, when set, is told about every failed flush call and every
	// op the sink rejected. It is called from the flushing goroutine (or
	// from Flush or Close), must not block for long and must not call
	// Flush or Close.
	OnError func(error)
}

// withDefaults returns a validated copy of c with defaults filled in.
func (c Config) withDefaults() (Config, error) {
	if c.Labels == nil {
		return c, fmt.Errorf("%w: Labels is required", ErrConfig)
	}
	checks := []struct {
		name string
		bad  bool
	}{
		{"Interval", c.Interval < 0},
		{"MaxKeys", c.MaxKeys < 0},
		{"MaxPendingKeys", c.MaxPendingKeys < 0},
		{"BatchSize", c.BatchSize < 0},
		{"BatchTimeout", c.BatchTimeout < 0},
		{"TokenTTL", c.TokenTTL < 0},
		{"MaxBackoff", c.MaxBackoff < 0},
		{"HotAt", c.HotAt < 0},
	}
	for _, ch := range checks {
		if ch.bad {
			return c, fmt.Errorf("%w: %s is negative", ErrConfig, ch.name)
		}
	}
	if c.Interval == 0 {
		c.Interval = DefaultInterval
	}
	if c.MaxKeys == 0 {
		c.MaxKeys = DefaultMaxKeys
	}
	if c.MaxPendingKeys == 0 {
		c.MaxPendingKeys = DefaultMaxPendingKeys
	}
	if c.BatchSize == 0 {
		c.BatchSize = DefaultBatchSize
	}
	if c.BatchTimeout == 0 {
		c.BatchTimeout = DefaultBatchTimeout
	}
	if c.TokenTTL == 0 {
		c.TokenTTL = store.DefaultTokenTTL
	}
	if c.HotAt == 0 {
		c.HotAt = DefaultHotAt
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = DefaultMaxBackoff
	}
	if c.MaxBackoff < c.Interval {
		c.MaxBackoff = c.Interval
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	if c.Rand == nil {
		var seed [32]byte
		_, _ = crand.Read(seed[:]) // never fails (crypto/rand panics instead)
		c.Rand = rand.NewChaCha8(seed).Uint64
	}
	return c, nil
}
