package hotcount

import (
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hotcount/hotcount/buffer"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// Defaults used when a Config field is left at its zero value.
const (
	// DefaultN is the number of sub-counters per counter.
	DefaultN = 8
	// DefaultReadCacheTTL is how long a summed read is cached.
	DefaultReadCacheTTL = time.Second
	// DefaultEmbeddedNodes is the node count of the embedded store.
	DefaultEmbeddedNodes = 3
	// MaxN is the largest number of sub-counters a counter may have.
	MaxN = 1024
)

// Config configures a Client. The zero value is valid: an embedded store of
// DefaultEmbeddedNodes simulated nodes, DefaultN sub-counters per counter and
// a DefaultReadCacheTTL summed-read cache.
type Config struct {
	// Redis lists seed addresses ("host:port"). Empty means the embedded
	// store. Standalone Redis and Redis Cluster are detected.
	Redis []string
	// RedisUsername and RedisPassword authenticate to Redis when set.
	RedisUsername, RedisPassword string
	// Store, when set, is used as the backend instead of Redis or the
	// embedded store. The Client does not close a Store it was given.
	Store store.Store
	// EmbeddedNodes is the number of simulated nodes of the embedded store;
	// 0 means DefaultEmbeddedNodes.
	EmbeddedNodes int
	// N is the number of sub-counters of a counter that no namespace
	// matches; 0 means DefaultN.
	N int
	// Namespaces override settings for keys that start with a prefix; the
	// longest matching prefix wins.
	Namespaces []Namespace
	// ReadCacheTTL is how long a summed read is served from memory; 0
	// means DefaultReadCacheTTL. See NoReadCache to turn the cache off.
	ReadCacheTTL time.Duration
	// NoReadCache turns the summed-read cache off: every Get reads the
	// sub-counters.
	NoReadCache bool
	// MetaTTL is how long a counter's label sets are cached; a resize is
	// seen by every Client within it. 0 means 2 s. Every Client of one
	// cache must use the same MetaTTL (or a shorter one).
	MetaTTL time.Duration
	// NaiveLabels gives counters without metadata the labels "0".."N-1"
	// instead of labels placed on distinct primaries (for comparison, and
	// for counters written before placement).
	NaiveLabels bool
	// AutoN grows the N of a key whose estimated cluster-wide cache write
	// rate per sub-counter passes AutoNBudget (to rate × 1.5 / budget), and
	// folds it back after the key stays below half the budget for 30 s.
	// It needs a store that keeps metadata.
	AutoN bool
	// AutoNBudget is the writes per second one sub-counter (one node) may
	// take; 0 means 10,000.
	AutoNBudget float64
	// AutoNMaxN caps automatic growth; 0 means 64.
	AutoNMaxN int
	// AutoNHysteresis is how long a key must stay cool before its N is
	// folded back; 0 means 30 s.
	AutoNHysteresis time.Duration
	// AutoRebalance re-checks the placement of the counters this process
	// uses whenever the slot map changes (a slot migration), and moves
	// sub-counters that now share a primary back onto distinct ones
	// (Rebalance). It needs a store that keeps metadata.
	AutoRebalance bool
	// RebalanceCheck is how often the slot map is looked at for
	// AutoRebalance; 0 means 2 s.
	RebalanceCheck time.Duration
	// Buffered turns on buffered deltas for keys that no namespace
	// matches: Incr adds to a process-local delta, and a flusher sends one
	// idempotent increment per key every FlushInterval, when MaxBufferedKeys
	// keys have a delta, and on Close. See package buffer.
	Buffered bool
	// FlushInterval is how often buffered deltas are flushed; 0 means
	// 500 ms. It bounds what a killed process can lose.
	FlushInterval time.Duration
	// MaxBufferedKeys flushes early when this many keys hold a delta; 0
	// means 10,000.
	MaxBufferedKeys int
	// MaxPendingKeys bounds the keys held while the cache is unreachable;
	// past it Incr of a new key returns ErrBackpressure. 0 means 200,000.
	MaxPendingKeys int
	// Mode is the durability mode of keys that no namespace matches; ""
	// means ModeFast.
	Mode Mode
	// Durable is the durable store (checkpoints, event log, metadata).
	// nil means none: fast-mode counters live in the cache alone and
	// durable mode cannot be used. The Client does not close it.
	Durable durable.Backend
	// CheckpointInterval is how often fast-mode totals are checkpointed to
	// Durable; 0 means 5 s. It bounds what a cache loss can lose.
	CheckpointInterval time.Duration
	// RollupAge is how old a durable-mode event must be before the rollup
	// folds it into its key's total; 0 means DefaultRollupAge.
	RollupAge time.Duration
	// OnRestore, when set, is called after fast-mode counters were
	// restored from their checkpoints because a cache node lost its data.
	OnRestore func(Restore)
	// NoStartupRepair skips the check New makes when there is a durable
	// store: restore fast-mode counters of cache nodes that lost their data
	// (an empty embedded store after a restart, a Redis primary restarted
	// empty) and rebuild durable-mode counters. Tools that repair
	// explicitly (Rebuild) set it.
	NoStartupRepair bool
	// Timeout bounds each round trip to the backend; 0 means 2 s.
	Timeout time.Duration
	// Now is the clock; nil means time.Now. Tests inject a fake.
	Now func() time.Time
	// Rand returns uniformly random 64-bit values; nil means math/rand/v2.
	// It must be safe for concurrent use.
	Rand func() uint64
}

// Namespace holds the settings of the counters whose keys start with
// Prefix.
type Namespace struct {
	// Prefix selects keys; it must be non-empty and unique in a Config.
	Prefix string
	// N is the number of sub-counters; 0 means the Config's N.
	N int
	// Buffered turns buffered deltas on for this namespace. A namespace
	// does not inherit Config.Buffered: it says for itself. Durable-mode
	// counters are always buffered after their commit.
	Buffered bool
	// Mode is the durability mode; "" means the Config's Mode.
	Mode Mode
	// ReadCacheTTL is how long this namespace's summed reads are cached;
	// 0 means the Config's ReadCacheTTL (and NoReadCache applies to all).
	ReadCacheTTL time.Duration
}

// Mode is a durability mode, chosen per namespace.
type Mode string

// The durability modes.
const (
	// ModeFast: the cache holds the counter; totals are checkpointed to the
	// durable store every CheckpointInterval and restored after a cache
	// loss. A killed process loses up to one flush interval of buffered
	// deltas; a cache loss loses up to one checkpoint interval.
	ModeFast Mode = "fast"
	// ModeDurable: every increment is committed, with an idempotency id,
	// to the durable event log before Incr returns; the cache is a view
	// rebuilt from the log. Nothing acknowledged is lost.
	ModeDurable Mode = "durable"
)

func (m Mode) valid() bool { return m == "" || m == ModeFast || m == ModeDurable }

// Named errors. Every error the Client returns for bad input or a failed
// backend wraps one of these; test with errors.Is.
var (
	// ErrInvalidKey: the key breaks the key rules (see keyspace.Validate).
	ErrInvalidKey = keyspace.ErrInvalidKey
	// ErrZeroDelta: an increment of 0 was asked for.
	ErrZeroDelta = errors.New("hotcount: delta must not be zero")
	// ErrOverflow: the increment, or a sum, would leave the int64 range;
	// nothing was changed.
	ErrOverflow = store.ErrOverflow
	// ErrUnavailable: the backend could not be reached in time.
	ErrUnavailable = store.ErrUnavailable
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("hotcount: client closed")
	// ErrConfig: the Config is invalid; the message says which field.
	ErrConfig = errors.New("hotcount: invalid config")
	// ErrBackpressure: buffered deltas are held because the cache is not
	// taking them, and the bound (MaxPendingKeys) is reached; nothing was
	// added. Retry later.
	ErrBackpressure = buffer.ErrBackpressure
)

// settings is a validated copy of Config with defaults applied.
type settings struct {
	Config
	namespaces []Namespace // sorted by prefix length, longest first
}

func (c Config) validate() (settings, error) {
	s := settings{Config: c}
	bad := func(format string, args ...any) (settings, error) {
		return settings{}, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	if s.N == 0 {
		s.N = DefaultN
	}
	if s.N < 1 || s.N > MaxN {
		return bad("N must be 1..%d, got %d", MaxN, c.N)
	}
	if s.EmbeddedNodes == 0 {
		s.EmbeddedNodes = DefaultEmbeddedNodes
	}
	if s.EmbeddedNodes < 1 || s.EmbeddedNodes > 1024 {
		return bad("EmbeddedNodes must be 1..1024, got %d", c.EmbeddedNodes)
	}
	if s.ReadCacheTTL == 0 {
		s.ReadCacheTTL = DefaultReadCacheTTL
	}
	if s.ReadCacheTTL < 0 {
		return bad("ReadCacheTTL must not be negative (use NoReadCache), got %v", c.ReadCacheTTL)
	}
	if s.AutoNBudget < 0 || s.AutoNMaxN < 0 || s.AutoNMaxN > MaxN || s.AutoNHysteresis < 0 {
		return bad("AutoNBudget and AutoNHysteresis must not be negative and AutoNMaxN must be 0..%d", MaxN)
	}
	if s.RebalanceCheck < 0 {
		return bad("RebalanceCheck must not be negative, got %v", c.RebalanceCheck)
	}
	if s.RebalanceCheck == 0 {
		s.RebalanceCheck = 2 * time.Second
	}
	if s.MetaTTL < 0 {
		return bad("MetaTTL must not be negative, got %v", c.MetaTTL)
	}
	if s.FlushInterval < 0 || s.MaxBufferedKeys < 0 || s.MaxPendingKeys < 0 {
		return bad("FlushInterval, MaxBufferedKeys and MaxPendingKeys must not be negative")
	}
	if s.Timeout == 0 {
		s.Timeout = 2 * time.Second
	}
	if !s.Mode.valid() {
		return bad("Mode must be %q or %q, got %q", ModeFast, ModeDurable, c.Mode)
	}
	if s.Mode == "" {
		s.Mode = ModeFast
	}
	if s.CheckpointInterval == 0 {
		s.CheckpointInterval = 5 * time.Second
	}
	if s.CheckpointInterval < 0 {
		return bad("CheckpointInterval must not be negative, got %v", c.CheckpointInterval)
	}
	if s.Timeout < 0 {
		return bad("Timeout must not be negative, got %v", c.Timeout)
	}
	for _, a := range s.Redis {
		if strings.TrimSpace(a) == "" || !strings.Contains(a, ":") {
			return bad("Redis address %q is not host:port", a)
		}
	}
	s.Redis = append([]string(nil), c.Redis...)
	seen := map[string]bool{}
	s.namespaces = make([]Namespace, 0, len(c.Namespaces))
	for _, ns := range c.Namespaces {
		switch {
		case ns.Prefix == "":
			return bad("a namespace has an empty Prefix")
		case seen[ns.Prefix]:
			return bad("namespace prefix %q appears twice", ns.Prefix)
		case ns.N < 0 || ns.N > MaxN:
			return bad("namespace %q: N must be 0..%d, got %d", ns.Prefix, MaxN, ns.N)
		}
		if !ns.Mode.valid() {
			return bad("namespace %q: Mode must be %q or %q, got %q", ns.Prefix, ModeFast, ModeDurable, ns.Mode)
		}
		seen[ns.Prefix] = true
		if ns.N == 0 {
			ns.N = s.N
		}
		if ns.Mode == "" {
			ns.Mode = s.Mode
		}
		if ns.ReadCacheTTL < 0 {
			return bad("namespace %q: ReadCacheTTL must not be negative, got %v", ns.Prefix, ns.ReadCacheTTL)
		}
		if ns.ReadCacheTTL == 0 {
			ns.ReadCacheTTL = s.ReadCacheTTL
		}
		s.namespaces = append(s.namespaces, ns)
	}
	sort.SliceStable(s.namespaces, func(i, j int) bool {
		return len(s.namespaces[i].Prefix) > len(s.namespaces[j].Prefix)
	})
	s.Namespaces = nil
	return s, nil
}

// namespace returns the settings that apply to key.
func (s *settings) namespace(key string) Namespace {
	for _, ns := range s.namespaces {
		if strings.HasPrefix(key, ns.Prefix) {
			return ns
		}
	}
	return Namespace{N: s.N, Buffered: s.Buffered, Mode: s.Mode, ReadCacheTTL: s.ReadCacheTTL}
}

// anyDurable reports whether some keys are in durable mode.
func (s *settings) anyDurable() bool {
	if s.Mode == ModeDurable {
		return true
	}
	for _, ns := range s.namespaces {
		if ns.Mode == ModeDurable {
			return true
		}
	}
	return false
}

// anyBuffered reports whether some keys are buffered (durable-mode keys
// always are).
func (s *settings) anyBuffered() bool {
	if s.Buffered || s.anyDurable() {
		return true
	}
	for _, ns := range s.namespaces {
		if ns.Buffered {
			return true
		}
	}
	return false
}

// buffered reports whether increments of ns go through the buffer.
func (ns Namespace) buffered() bool { return ns.Buffered || ns.Mode == ModeDurable }
