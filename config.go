package hotcount

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/hotcount/hotcount/buffer"
	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/hotkeys"
	"github.com/hotcount/hotcount/internal/autoscale"
	"github.com/hotcount/hotcount/internal/durability"
	"github.com/hotcount/hotcount/internal/ns"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/meta"
	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/mem"
)

// Defaults used when a Config field is left at its zero value.
const (
	// DefaultN is the number of sub-counters per counter.
	DefaultN = 8
	// DefaultReadCacheTTL is how long a summed read is cached.
	DefaultReadCacheTTL = time.Second
	// DefaultHotRate is the cache writes per second (per process) past
	// which a cold counter grows to N sub-counters.
	DefaultHotRate = 1000
	// DefaultFlushInterval is how often buffered deltas are flushed.
	DefaultFlushInterval = buffer.DefaultInterval
	// DefaultEmbeddedNodes is the node count of the embedded store.
	DefaultEmbeddedNodes = mem.DefaultNodes
	// DefaultTimeout bounds each round trip to the backend.
	DefaultTimeout = 2 * time.Second
	// DefaultMetaTTL is how long a counter's label sets are cached.
	DefaultMetaTTL = meta.DefaultTTL
	// DefaultCheckpointInterval is how often fast-mode totals are saved.
	DefaultCheckpointInterval = durability.DefaultCheckpointInterval
	// DefaultHealInterval is how often the cache view of durable-mode
	// counters is compared with the log and repaired.
	DefaultHealInterval = durability.DefaultHealInterval
	// DefaultCleanupInterval is how often the clean-up pass runs.
	DefaultCleanupInterval = durability.DefaultCleanupInterval
	// DefaultRollupAge is how old a durable-mode event must be before it
	// is folded into its counter's total.
	DefaultRollupAge = durability.DefaultRollupAge
	// DefaultRebalanceCheck is how often the slot map is looked at for
	// automatic re-placement.
	DefaultRebalanceCheck = autoscale.DefaultRebalanceCheck
	// DefaultAutoNBudget is the cache writes per second one sub-counter
	// (one node) may take under automatic N (AutoNConfig.Budget).
	DefaultAutoNBudget = hotkeys.DefaultBudget
)

// Config configures a Client. The zero value is valid: an embedded store
// of DefaultEmbeddedNodes simulated nodes, DefaultN sub-counters per
// counter, fast mode, unbuffered, and a DefaultReadCacheTTL summed-read
// cache. New copies and validates it and never modifies it.
type Config struct {
	// Redis is where the sub-counters live; no addresses means the
	// embedded store.
	Redis RedisConfig
	// Embedded configures the embedded store.
	Embedded EmbeddedConfig
	// Store, when set, is used instead of Redis or the embedded store.
	// The Client does not close a Store it was given.
	Store store.Store `config:"code"`
	// Defaults are the settings of keys that no namespace matches (its
	// Prefix must be empty). Zero fields mean DefaultN, ModeFast,
	// unbuffered, cold start, DefaultFlushInterval, DefaultReadCacheTTL and
	// DefaultHotRate.
	Defaults Namespace
	// Namespaces override Defaults for keys that start with a prefix; the
	// longest matching prefix wins. Their zero fields inherit Defaults,
	// except Buffered, which each namespace states for itself.
	Namespaces []Namespace
	// Reads configures the summed-read cache.
	Reads ReadConfig
	// Meta configures the counter metadata (label sets).
	Meta MetaConfig
	// Buffer bounds the buffered deltas.
	Buffer BufferConfig
	// Durability configures the durable store.
	Durability DurabilityConfig
	// AutoN turns on automatic N for hot counters.
	AutoN AutoNConfig
	// Rebalance turns on automatic re-placement after slot migrations.
	Rebalance RebalanceConfig
	// Region names this Client's region when a counter is written in
	// several regions, each with its own cache (see docs/regions.md);
	// empty means no regions. It needs Redis.
	Region string
	// Peers are the other regions; each region's contribution to a
	// counter is shipped to every peer and read from them.
	Peers []PeerConfig
	// ShipInterval is how often the counters that changed are shipped to
	// the peers; 0 means DefaultShipInterval.
	ShipInterval time.Duration
	// RegionRetention is how long the region records of a counter cleared
	// or expired in this region are kept before they are collected; 0
	// means DefaultRegionRetention. A peer's record that arrives later
	// than that after the end (a partition longer than it) counts again.
	RegionRetention time.Duration
	// Timeout bounds each round trip to the backend; 0 means
	// DefaultTimeout.
	Timeout time.Duration
	// Clock is the time source of every timestamp, ticker and timer; nil
	// means the system clock. Tests inject a clock.Fake.
	Clock clock.Clock `config:"code"`
	// Rand returns uniformly random 64-bit values, safe for concurrent
	// use; nil means math/rand/v2.
	Rand func() uint64 `config:"code"`
	// Observe, when set, is told how long each background operation took:
	// "flush" (a buffered flush round), "commit" (a durable group commit),
	// "checkpoint" (a checkpoint round), "rollup". It feeds latency
	// histograms and must be cheap.
	Observe func(op string, d time.Duration) `config:"code"`
}

// RedisConfig says where Redis is and how to log in.
type RedisConfig struct {
	// Addrs are seed addresses ("host:port"); standalone Redis and Redis
	// Cluster are detected.
	Addrs []string
	// Username and Password authenticate (ACL user, or only a password).
	Username, Password string
	// TLS, when set, is used for every connection.
	TLS *tls.Config `config:"code"`
	// FlushDelay, when positive, lets each connection wait up to this long
	// after a write to gather more commands into the next one: fewer
	// system calls per command on the cache under many concurrent callers,
	// at up to this much latency per command. Zero (the default) writes at
	// once. `hotcount proxy` sets it to proxy.CounterFlushDelay.
	FlushDelay time.Duration `config:"code"`
	// IncrBatchWindow, when positive, sends the plain INCRBYs of cold keys
	// that Client.IncrValue writes for concurrent callers as one batch,
	// written to every node at the same moment on connections of their
	// own, so that their replies, and the callers' next increments, meet
	// again: fewer, fuller reads for every node. A batch goes as soon as
	// every caller seen at once is back and nothing is in flight, and an
	// increment waits at most about this long; a lone caller is never
	// held. Zero (the default) sends each on its own. `hotcount proxy`
	// sets it to proxy.CounterBatchWindow.
	IncrBatchWindow time.Duration `config:"code"`
}

// EmbeddedConfig configures the embedded store.
type EmbeddedConfig struct {
	// Nodes is the number of simulated nodes; 0 means
	// DefaultEmbeddedNodes.
	Nodes int
	// AOF is the path of the embedded store's append-only file: replayed
	// when the Client starts, and every change appended and fsynced before
	// it is acknowledged, so that a killed process loses nothing it
	// acknowledged (see store/mem). Empty means none: the embedded store
	// lives in the process's memory only. `hotcount serve` keeps it in its
	// data folder (cache.aof), so the file has no setting of its own.
	AOF string `config:"code"`
	// AOFSync is when the file is fsynced: "everysec" ("" means it: a
	// machine crash loses at most about the last second, a killed process
	// nothing) or "always" (before every acknowledgement).
	AOFSync string
}

// ReadConfig configures the summed-read cache.
type ReadConfig struct {
	// NoCache turns the cache off: every Get reads the sub-counters.
	NoCache bool
}

// MetaConfig configures counter metadata.
type MetaConfig struct {
	// TTL is how long a counter's label sets are cached; a resize is seen
	// by every Client within it. 0 means DefaultMetaTTL. Every Client of
	// one cache must use the same TTL (or a shorter one).
	TTL time.Duration
	// NaiveLabels gives counters without metadata the labels "0".."N-1"
	// instead of labels placed on distinct primaries (for comparison, and
	// for counters written before placement).
	NaiveLabels bool
}

// BufferConfig bounds the buffered deltas (see package buffer).
type BufferConfig struct {
	// MaxKeys flushes early when this many keys hold a delta; 0 means
	// buffer.DefaultMaxKeys.
	MaxKeys int
	// MaxPendingKeys bounds the keys held while the cache is unreachable;
	// past it Incr of a new key returns ErrBackpressure. 0 means
	// buffer.DefaultMaxPendingKeys.
	MaxPendingKeys int
	// HotAt is how many increments of a key in one flush interval make
	// it hot. A hot key's flush is exactly-once (an idempotent script);
	// a cold key's is one plain INCRBY, which costs the cache what an
	// unbuffered INCR does but, when its reply is lost, is dropped and
	// counted rather than retried (see docs/buffering.md). 1 makes every
	// key hot. 0 means buffer.DefaultHotAt.
	HotAt int
}

// DurabilityConfig configures the durable store.
type DurabilityConfig struct {
	// Store is the durable store (checkpoints, event log, metadata):
	// durable/sqlite or durable/postgres. nil means none: fast-mode
	// counters live in the cache alone and durable mode cannot be used.
	// The Client does not close it.
	Store durable.Backend `config:"code"`
	// CheckpointInterval is how often fast-mode totals are checkpointed;
	// 0 means DefaultCheckpointInterval. It bounds what a cache loss can
	// lose.
	CheckpointInterval time.Duration
	// RollupAge is how old a durable-mode event must be before the
	// rollup folds it into its counter's total; 0 means DefaultRollupAge.
	RollupAge time.Duration
	// CleanupInterval is how often the clean-up pass runs: it removes
	// the store's rows of counters whose deadline passed and prunes IDs
	// and tombstones past their retention. 0 means DefaultCleanupInterval.
	CleanupInterval time.Duration
	// OnRestore, when set, is called after fast-mode counters were
	// restored from their checkpoints because a cache node lost its data.
	// Each sub-counter is added back once, by whichever process gets to
	// it first, and only that process's Restore counts it, so the Amounts
	// that the processes report for one loss add up to what the node
	// held (less what a restore applied without getting the reply).
	// Durable-mode counters are not in a Restore (it may report 0 keys):
	// the healer repairs their view (Stats.Durability.Repairs and
	// RepairedAmount).
	OnRestore func(Restore) `config:"code"`
	// HealInterval is how often the cache view of durable-mode counters
	// is compared with the durable log and repaired; 0 means
	// DefaultHealInterval, negative turns healing off. A view error that
	// holds still is repaired within two intervals (see docs/concepts.md,
	// the self-healing view).
	HealInterval time.Duration
	// NoStartupRepair skips the checks New makes: that no counter the
	// durable store holds would change durability mode (ErrModeChanged;
	// see docs/concepts.md, changing a mode), and the repair that
	// restores fast-mode counters of cache nodes that lost their data (an
	// empty embedded store after a restart, a Redis primary restarted
	// empty) and rebuilds durable-mode counters. Tools that repair
	// explicitly set it. A start that skips the checks under other
	// durability modes than the store recorded at the last start that
	// checked removes that record, so the next check lists the store.
	NoStartupRepair bool
}

// AutoNConfig configures automatic N: a counter whose estimated
// cluster-wide cache write rate per sub-counter passes Budget grows to
// rate × 1.5 / Budget sub-counters, and folds back after it stays below
// half the budget for Hysteresis. It needs a store that keeps metadata.
type AutoNConfig struct {
	// Enabled turns it on.
	Enabled bool
	// Budget is the writes per second one sub-counter (one node) may
	// take; 0 means DefaultAutoNBudget.
	Budget float64
	// MaxN caps automatic growth; 0 means hotkeys.DefaultMaxN.
	MaxN int
	// Hysteresis is how long a counter must stay cool before it is
	// folded back; 0 means hotkeys.DefaultHysteresis.
	Hysteresis time.Duration
}

// RebalanceConfig configures automatic re-placement: whenever the slot
// map changes, the counters this process uses are checked, and
// sub-counters that now share a primary are moved back onto distinct
// ones. It needs a store that keeps metadata.
type RebalanceConfig struct {
	// Auto turns it on.
	Auto bool
	// Check is how often the slot map is looked at; 0 means
	// DefaultRebalanceCheck.
	Check time.Duration
}

// settings is a validated copy of a Config with every default applied.
type settings struct {
	Config
	table *ns.Table
}

// Validate reports whether c is a valid Config. The error wraps ErrConfig
// and names the field.
func (c Config) Validate() error {
	_, err := c.resolve()
	return err
}

// resolve validates c and applies the defaults: the one validation of a
// Config.
func (c Config) resolve() (settings, error) {
	s := settings{Config: c}
	bad := func(format string, args ...any) (settings, error) {
		return settings{}, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	for _, f := range []struct {
		name string
		v    time.Duration
	}{{"Timeout", c.Timeout}, {"Meta.TTL", c.Meta.TTL}, {"Durability.CheckpointInterval", c.Durability.CheckpointInterval},
		{"Durability.RollupAge", c.Durability.RollupAge}, {"Durability.CleanupInterval", c.Durability.CleanupInterval}, {"AutoN.Hysteresis", c.AutoN.Hysteresis}, {"Rebalance.Check", c.Rebalance.Check}, {"Redis.FlushDelay", c.Redis.FlushDelay}, {"Redis.IncrBatchWindow", c.Redis.IncrBatchWindow}} {
		if f.v < 0 {
			return bad("%s must not be negative, got %v", f.name, f.v)
		}
	}
	switch {
	case c.Embedded.Nodes < 0 || c.Embedded.Nodes > 1024:
		return bad("Embedded.Nodes must be 0..1024, got %d", c.Embedded.Nodes)
	case c.Embedded.AOFSync != "" && c.Embedded.AOFSync != mem.SyncEverySec && c.Embedded.AOFSync != mem.SyncAlways:
		return bad("Embedded.AOFSync must be %q or %q, got %q", mem.SyncEverySec, mem.SyncAlways, c.Embedded.AOFSync)
	case c.Buffer.MaxKeys < 0 || c.Buffer.MaxPendingKeys < 0 || c.Buffer.HotAt < 0:
		return bad("Buffer.MaxKeys, Buffer.MaxPendingKeys and Buffer.HotAt must not be negative")
	case c.AutoN.Budget < 0 || c.AutoN.MaxN < 0 || c.AutoN.MaxN > keyspace.MaxN:
		return bad("AutoN.Budget must not be negative and AutoN.MaxN must be 0..%d", keyspace.MaxN)
	case c.Defaults.Prefix != "":
		return bad("Defaults.Prefix must be empty, got %q", c.Defaults.Prefix)
	}
	for _, a := range c.Redis.Addrs {
		if strings.TrimSpace(a) == "" || !strings.Contains(a, ":") {
			return bad("Redis address %q is not host:port", a)
		}
	}
	if err := c.validateRegions(); err != nil {
		return settings{}, err
	}
	s.Peers = append([]PeerConfig(nil), c.Peers...)
	s.Redis.Addrs = append([]string(nil), c.Redis.Addrs...)
	s.Embedded.Nodes = or(c.Embedded.Nodes, DefaultEmbeddedNodes)
	s.Timeout = or(c.Timeout, DefaultTimeout)
	s.Meta.TTL = or(c.Meta.TTL, DefaultMetaTTL)
	s.Durability.CheckpointInterval = or(c.Durability.CheckpointInterval, DefaultCheckpointInterval)
	s.Durability.RollupAge = or(c.Durability.RollupAge, DefaultRollupAge)
	s.Rebalance.Check = or(c.Rebalance.Check, DefaultRebalanceCheck)
	s.Clock = clock.OrReal(c.Clock)
	def := c.Defaults
	def.N = or(def.N, DefaultN)
	def.Mode = or(def.Mode, ModeFast)
	def.FlushInterval = or(def.FlushInterval, DefaultFlushInterval)
	def.ReadCacheTTL = or(def.ReadCacheTTL, DefaultReadCacheTTL)
	def.HotRate = or(def.HotRate, DefaultHotRate)
	var err error
	if s.table, err = ns.New(def, c.Namespaces); err != nil {
		return bad("%w", err)
	}
	s.Defaults, s.Namespaces = def, nil
	durableMode := s.table.Any(func(n *Namespace) bool { return n.Mode == ModeDurable })
	if durableMode && c.Durability.Store == nil {
		return bad("durable mode needs a durable store (Durability.Store)")
	}
	policy := hotkeys.Policy{Budget: c.AutoN.Budget, MaxN: c.AutoN.MaxN, Hysteresis: c.AutoN.Hysteresis}
	if err := policy.Validate(); err != nil {
		return bad("AutoN: %w", err)
	}
	return s, nil
}

// or returns v, or def when v is the zero value.
func or[T comparable](v, def T) T {
	var zero T
	if v == zero {
		return def
	}
	return v
}
