// Package engine is the data path of a Client: it finds a counter's label
// sets, sends increments to the sub-counters (one INCRBY, or through a
// buffer of deltas), and reads sums.
//
// # Labels
//
// A counter's labels come from its metadata (package meta: the write set
// that increments go to, the read set that reads sum), cached for the
// metadata TTL. A store without metadata support gives every counter the
// naive labels "0".."N-1". A writer's lookup pins a counter's placed
// default labels (the first write creates its metadata); a reader's does
// not, so reads never create state. While the cache is unreachable a
// failed lookup makes the next ones fail at once for one Timeout, so that a
// flush of many keys does not wait that long for each.
//
// # Writes
//
// An unbuffered increment picks one label of the write set uniformly at
// random (Lemire's multiply-shift) and sends one INCRBY to its sub-key. A
// buffered one is added to a process-local delta (package buffer); there is
// one buffer per distinct flush interval, so every namespace is flushed at
// its own interval. Each buffer flush sends one idempotent increment per
// key to one label of the write set.
//
// # Reads
//
// Read is the one pipeline behind every sum: the read label sets of all the
// keys (cached, or one batched metadata round per node), their sub-keys,
// and one Get of all of them (one pipelined round per node, never a
// cross-slot MGET). Get and GetMulti sum each key's values and cache the
// sum for the namespace's read-cache TTL, with single-flight per key, so a
// thousand concurrent page views cost one round per node; a process adds
// its own increments to a cached sum and its own unflushed deltas to every
// reading (read-your-writes).
//
// # Measuring
//
// The engine measures, in one Space-Saving sketch each (package hotkeys),
// the increments arriving per key (every mode: unbuffered increments as
// they come, buffered and durable ones per flush) and the cache writes per
// key, and counts the cache writes per node. Hot-key reports, automatic N,
// node rates and metrics all read these.
package engine

import (
	"context"
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/hotcount/hotcount/buffer"
	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/internal/ns"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/meta"
	"github.com/hotcount/hotcount/store"
)

// ErrNoMetadata: the store keeps no counter metadata, so N cannot change.
var ErrNoMetadata = errors.New("hotcount: the store keeps no counter metadata")

// ErrExists: Create was asked for a counter that exists already with
// another number of sub-counters.
var ErrExists = errors.New("hotcount: the counter exists already with another number of sub-counters")

// ErrConflict: another resize of the same counter is under way (in this
// process, or its metadata kept changing under a compare-and-set); retry
// when it is done.
var ErrConflict = errors.New("hotcount: the counter is being resized")

// Config configures an Engine. Every field is required unless it says
// otherwise; the Client fills it from its validated Config.
type Config struct {
	// Store holds the sub-counters.
	Store store.Store
	// Namespaces gives each key its settings.
	Namespaces *ns.Table
	// MetaTTL is how long label sets are cached (0: meta.DefaultTTL).
	MetaTTL time.Duration
	// NaiveLabels gives counters without metadata the labels "0".."N-1".
	NaiveLabels bool
	// Durable mirrors metadata in the durable store; nil means none.
	Durable meta.Durable
	// NoReadCache turns the summed-read cache off.
	NoReadCache bool
	// MaxBufferedKeys and MaxPendingKeys configure every buffer (0: the
	// buffer package's defaults).
	MaxBufferedKeys, MaxPendingKeys int
	// HotAt is the buffers' hot-key threshold (0: buffer.DefaultHotAt).
	HotAt int
	// Timeout bounds each round trip.
	Timeout time.Duration
	// Clock is the time source.
	Clock clock.Clock
	// Rand returns uniformly random 64-bit values, safe for concurrent
	// use.
	Rand func() uint64
	// OnFlushError, when set, is told about failed flushes.
	OnFlushError func(error)
	// Observe, when set, is told how long each flush round took ("flush").
	Observe func(op string, d time.Duration)
}

// Engine is the data path. It is safe for concurrent use.
type Engine struct {
	cfg  Config
	st   store.Store
	ns   *ns.Table
	meta *meta.Manager // nil when the store keeps no metadata
	// flushSeq counts the buffered flushes the cache applied; a read that
	// saw it change may miss a delta that left the pending amount.
	flushSeq atomic.Uint64
	// behind says how long a durable view is known to be behind (SetBehind).
	behind atomic.Pointer[func(string) time.Duration]
	exp    expirer // nil when the store keeps no deadlines
	// slotIncr is the store when it takes slots from the caller, or nil.
	slotIncr slotIncrementer
	// marks is the store when it checks record marks with an increment
	// and keeps metadata, or nil.
	marks marker
	naive map[int][]string // label sets by N without metadata

	labelsDownUntil atomic.Int64 // unix ns: until then WriteLabels fails fast

	bufs  map[time.Duration]*buffer.Buffer // by flush interval
	order []*buffer.Buffer                 // bufs, shortest interval first
	only  *buffer.Buffer                   // set when every key uses this one buffer

	flight     singleflight.Group
	cache      readCache
	resizing   sync.Map // counter key → struct{}: a resize in this process
	refreshing sync.Map // counter key → struct{}: a background label look-up
	bg         sync.WaitGroup
	expired    atomic.Int64 // counters removed at or past their deadline
	closing    atomic.Bool
	obs        *observer
}

// New returns an Engine for cfg and starts its buffers.
func New(cfg Config) (*Engine, error) {
	if cfg.Store == nil || cfg.Namespaces == nil || cfg.Clock == nil || cfg.Rand == nil || cfg.Timeout <= 0 {
		return nil, errors.New("engine: Store, Namespaces, Clock, Rand and Timeout are required")
	}
	e := &Engine{cfg: cfg, st: cfg.Store, ns: cfg.Namespaces, naive: map[int][]string{}}
	e.cache.init()
	e.naive[cfg.Namespaces.Defaults().N] = keyspace.NaiveLabels(cfg.Namespaces.Defaults().N)
	for _, n := range cfg.Namespaces.Namespaces() {
		e.naive[n.N] = keyspace.NaiveLabels(n.N)
	}
	var err error
	if e.obs, err = newObserver(cfg.Clock); err != nil {
		return nil, err
	}
	e.exp, _ = cfg.Store.(expirer)
	e.slotIncr, _ = cfg.Store.(slotIncrementer)
	if mb, ok := cfg.Store.(meta.Backend); ok {
		e.meta, err = meta.NewManager(mb, meta.Config{
			TTL:      cfg.MetaTTL,
			Margin:   metaMargin(cfg.MetaTTL),
			Clock:    cfg.Clock,
			DefaultN: func(key string) int { return e.ns.Lookup(key).N },
			Naive:    cfg.NaiveLabels,
			Cold:     func(key string) bool { return !e.ns.Lookup(key).NoColdStart },
			Deadline: e.firstDeadline,
			Durable:  cfg.Durable,
			Rand:     cfg.Rand,
		})
		if err != nil {
			return nil, fmt.Errorf("engine: %w", err)
		}
		e.marks, _ = cfg.Store.(marker)
	}
	if err := e.startBuffers(); err != nil {
		return nil, err
	}
	return e, nil
}

// metaMargin is how long, beyond the metadata TTL, a fold waits for the
// increments already on their way to a label it stops writing: half the
// TTL, and at least 500 ms, so that a writer paused between choosing a
// label and sending its increment (GC, scheduling) is not a straggler.
func metaMargin(ttl time.Duration) time.Duration {
	if ttl == 0 {
		ttl = meta.DefaultTTL
	}
	return max(ttl/2, 500*time.Millisecond)
}

// Store returns the store of the sub-counters.
func (e *Engine) Store() store.Store { return e.st }

// Meta returns the metadata manager, or nil when the store keeps none.
func (e *Engine) Meta() *meta.Manager { return e.meta }

// Namespaces returns the settings table.
func (e *Engine) Namespaces() *ns.Table { return e.ns }

// Labels returns the labels of key's sub-counters for a writer: write is
// the active set, read every label that may hold a value. A placed default
// is pinned (the counter's metadata is created). The slices are shared.
func (e *Engine) Labels(ctx context.Context, key string) (write, read []string, err error) {
	if e.meta == nil {
		l := e.naive[e.ns.Lookup(key).N]
		return l, l, nil
	}
	return e.meta.Labels(ctx, key)
}

// WriteLabels is the buffers' label source: the active labels, or none
// (the buffer then keeps the delta and retries) when they cannot be read.
func (e *Engine) WriteLabels(key string) []string {
	if e.meta == nil {
		return e.naive[e.ns.Lookup(key).N]
	}
	if until := e.labelsDownUntil.Load(); until != 0 && e.cfg.Clock.Now().UnixNano() < until {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.Timeout)
	defer cancel()
	w, _, err := e.meta.Labels(ctx, key)
	if err == nil {
		if _, expired := e.expireAtFor(key, keyspace.ColdLabel); expired {
			// A delta flushed after its counter's deadline starts the
			// new counter: what is left of the old one goes first.
			if err = e.expireNow(ctx, key); err == nil {
				return coldOnly
			}
		}
	}
	if err != nil {
		e.labelsDownUntil.Store(e.cfg.Clock.Now().Add(e.cfg.Timeout).UnixNano())
		return nil
	}
	return w
}

// readSets returns the read label sets of keys without creating state.
func (e *Engine) readSets(ctx context.Context, keys []string) ([][]string, error) {
	if e.meta == nil {
		out := make([][]string, len(keys))
		for i, k := range keys {
			out[i] = e.naive[e.ns.Lookup(k).N]
		}
		return out, nil
	}
	sets, _, err := e.meta.ReadSets(ctx, keys)
	return sets, err
}

// Resize changes key's number of sub-counters and pins it there (see
// meta.Manager.Pin).
func (e *Engine) Resize(ctx context.Context, key string, n int) error {
	if e.meta == nil {
		return ErrNoMetadata
	}
	if _, busy := e.resizing.LoadOrStore(key, struct{}{}); busy {
		return fmt.Errorf("resize %q: %w: another resize of it is under way in this process", key, ErrConflict)
	}
	defer e.resizing.Delete(key)
	err := e.meta.Pin(ctx, key, n)
	e.cache.drop(key)
	switch {
	case errors.Is(err, meta.ErrConflict):
		return fmt.Errorf("resize %q: %w: %w", key, ErrConflict, err)
	case err != nil:
		return fmt.Errorf("resize %q: %w", key, err)
	}
	return nil
}

// Create gives a counter that does not exist yet (no metadata, nothing
// pending in this process) n sub-counters, pinned as Resize pins them, and
// reports true; a counter that has n already is left as it is (false),
// one with another number gives ErrExists.
func (e *Engine) Create(ctx context.Context, key string, n int) (created bool, err error) {
	rep, err := e.Shards(ctx, key, 0)
	if err != nil {
		return false, err
	}
	if rep.Exists || e.Pending(key) != 0 {
		if rep.N == n {
			return false, nil
		}
		return false, fmt.Errorf("%w: %q has n=%d, not %d", ErrExists, key, rep.N, n)
	}
	if err := e.Resize(ctx, key, n); err != nil {
		return false, err
	}
	return true, nil
}

// Resume finishes an interrupted fold of key.
func (e *Engine) Resume(ctx context.Context, key string) error {
	if e.meta == nil {
		return ErrNoMetadata
	}
	return e.meta.Resume(ctx, key)
}

// Unpin lets automatic N and cooling resize key again (see
// meta.Manager.Unpin).
func (e *Engine) Unpin(ctx context.Context, key string) error {
	if e.meta == nil {
		return ErrNoMetadata
	}
	err := e.meta.Unpin(ctx, key)
	e.cache.drop(key)
	if err != nil {
		return fmt.Errorf("unpin %q: %w", key, err)
	}
	return nil
}

// Shards reports where key's sub-counters live; a counter that does not
// exist yet shows the placement n sub-counters would get (n 0: its
// default).
func (e *Engine) Shards(ctx context.Context, key string, n int) (meta.ShardReport, error) {
	if e.meta == nil {
		return meta.ShardReport{}, ErrNoMetadata
	}
	return e.meta.ShardsN(ctx, key, n)
}

// Rebalance moves key's sub-counters back onto distinct primaries.
func (e *Engine) Rebalance(ctx context.Context, key string) (bool, error) {
	if e.meta == nil {
		return false, ErrNoMetadata
	}
	changed, err := e.meta.Rebalance(ctx, key)
	if changed {
		e.cache.drop(key)
	}
	return changed, err
}

// Drop forgets key's cached sum.
func (e *Engine) Drop(key string) { e.cache.drop(key) }

// pick maps a random value to [0, n) without modulo bias worth noticing
// (Lemire's multiply-shift on the high 32 bits).
func pick(r uint64, n int) int { return int((r >> 32) * uint64(n) >> 32) }

// SumInt64 adds vs, failing with store.ErrOverflow if the sum leaves int64.
func SumInt64(vs []int64) (int64, error) {
	var s int64
	for _, v := range vs {
		if (v > 0 && s > math.MaxInt64-v) || (v < 0 && s < math.MinInt64-v) {
			return 0, store.ErrOverflow
		}
		s += v
	}
	return s, nil
}
