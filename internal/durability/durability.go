// Package durability connects a Client's data path to its durable store:
// fast-mode checkpoints and their restore after a cache loss, the durable
// event log with its group commit and rollup, and the rebuild of the cache
// view from the log.
//
// Durable mode: every increment goes through one durable.Committer (group
// commit) and is acknowledged only after its batch committed; a duplicate
// id is acknowledged without being applied again. The committed delta is
// then added to the engine's buffer, which feeds the cache view (a view
// that misses a delta heals, see heal.go). A rollup
// loop folds events older than the rollup age into totals.
//
// Fast mode: increments mark their counter as touched; the checkpoint loop
// (checkpoint.go) saves the touched counters' sub-counters and watches one
// sentinel key per cache node to detect and repair a node that lost its
// data (restore.go). The healer (heal.go) repairs the cache view of
// durable-mode counters from the log by itself, within two HealIntervals
// of an error that holds still; Rebuild (rebuild.go) corrects it at once.
//
// Every loop runs on the injected clock's tickers.
package durability

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/internal/engine"
	"github.com/hotcount/hotcount/internal/ns"
	"github.com/hotcount/hotcount/store"
)

// Defaults.
const (
	// DefaultCheckpointInterval is how often fast-mode totals are saved.
	DefaultCheckpointInterval = 5 * time.Second
	// DefaultRollupAge is how old a durable-mode event must be before the
	// rollup folds it into its key's total.
	DefaultRollupAge = 10 * time.Minute
	// MaxTracked bounds the fast-mode counters remembered as touched
	// between two checkpoints. Past it an early checkpoint is started and
	// further new counters wait for the next touch (Stats.Untracked).
	MaxTracked = 1 << 20
)

// ErrNotDurable: an idempotent increment or an exact read was asked for a
// key that is not in durable mode.
var ErrNotDurable = errors.New("hotcount: key is not in durable mode")

// Config configures a Service. Every field is required unless it says
// otherwise.
type Config struct {
	// Backend is the durable store.
	Backend durable.Backend
	// Engine is the data path whose cache view this keeps.
	Engine *engine.Engine
	// CheckpointInterval is how often fast-mode counters are saved.
	CheckpointInterval time.Duration
	// RollupAge is how old an event must be before it is rolled up.
	RollupAge time.Duration
	// Timeout bounds each round trip to the cache.
	Timeout time.Duration
	// Clock is the time source of every loop.
	Clock clock.Clock
	// Rand returns random 64-bit values (sentinel incarnations).
	Rand func() uint64
	// OnRestore, when set, is called after a node's fast-mode counters
	// were restored.
	OnRestore func(Restore)
	// HealInterval is how often the cache view of durable-mode counters
	// is compared with the log and repaired (heal.go); 0 means
	// DefaultHealInterval, a negative value turns healing off.
	HealInterval time.Duration
	// CleanupInterval is how often the clean-up pass runs (gc.go); 0
	// means DefaultCleanupInterval.
	CleanupInterval time.Duration
	// Observe, when set, is told how long each group commit ("commit"),
	// checkpoint round ("checkpoint") and rollup ("rollup") took.
	Observe func(op string, d time.Duration)
}

// Service keeps a cache view durable. It is safe for concurrent use.
type Service struct {
	cfg Config
	obs *observer
	be  durable.Backend
	eng *engine.Engine
	ns  *ns.Table
	com *durable.Committer // nil when no key is in durable mode

	// mu guards closed; Commit holds it shared for the whole of a durable
	// increment, so CloseLog (exclusive) waits until every committed
	// increment has also reached the buffer.
	mu     sync.RWMutex
	closed bool

	ck   checkpointer
	heal healer
	gc   gc

	viewMisses atomic.Uint64 // committed increments the buffer refused
	rollups    atomic.Uint64
	folded     atomic.Uint64
	rollupErrs atomic.Uint64

	stop      chan struct{}
	loops     sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// New starts the checkpoint loop and, when some keys are in durable mode,
// the committer and the rollup loop.
func New(cfg Config) (*Service, error) {
	d0 := &observer{f: cfg.Observe}
	if cfg.Backend == nil || cfg.Engine == nil || cfg.Clock == nil || cfg.Rand == nil ||
		cfg.CheckpointInterval <= 0 || cfg.RollupAge <= 0 || cfg.Timeout <= 0 {
		return nil, errors.New("durability: every Config field but OnRestore, CleanupInterval and Observe is required")
	}
	if cfg.CleanupInterval <= 0 {
		cfg.CleanupInterval = DefaultCleanupInterval
	}
	d := &Service{obs: d0, cfg: cfg, be: cfg.Backend, eng: cfg.Engine, ns: cfg.Engine.Namespaces(), stop: make(chan struct{})}
	d.ck.init(d)
	if d.ns.Any(func(n *ns.Namespace) bool { return n.Mode == ns.ModeDurable }) {
		com, err := durable.NewCommitter(d.be, durable.CommitterConfig{CommitTimeout: commitTimeout(cfg.Timeout), Clock: cfg.Clock,
			OnBatch: func(d time.Duration, _ int) { d0.observe("commit", d) }})
		if err != nil {
			return nil, fmt.Errorf("durability: %w", err)
		}
		d.com = com
		d.loops.Add(1)
		go d.every(cfg.Clock.NewTicker(min(max(cfg.RollupAge/4, time.Second), time.Minute)), nil, 0,
			func(ctx context.Context) { _, _ = d.Rollup(ctx) })
		if iv := cmp.Or(cfg.HealInterval, DefaultHealInterval); iv > 0 {
			d.heal.init(d, iv)
			d.loops.Add(1)
			go d.every(cfg.Clock.NewTicker(iv), d.heal.kick, iv+commitTimeout(cfg.Timeout),
				func(ctx context.Context) { _, _ = d.Heal(ctx) })
		}
	}
	d.loops.Add(2)
	go d.every(cfg.Clock.NewTicker(cfg.CheckpointInterval), d.ck.kick, cfg.CheckpointInterval+cfg.Timeout,
		func(ctx context.Context) { _, _ = d.ck.round(ctx) })
	go d.every(cfg.Clock.NewTicker(cfg.CleanupInterval), nil, 0,
		func(ctx context.Context) { _, _ = d.Cleanup(ctx) })
	return d, nil
}

// Startup checks the durable store and repairs the cache view before the
// Client is used. First it refuses (ErrModeChanged) settings under which
// counters the store holds would change durability mode (see
// checkModes). Then a checkpoint round checks every node's sentinel and
// restores fast-mode counters of a node that lost its data (the embedded
// store after a restart, a Redis primary restarted empty); when one did,
// durable-mode counters are rebuilt from the log as well. Nothing writes
// through this Client yet, so the rebuild is exact.
func (d *Service) Startup(ctx context.Context) error {
	if err := d.checkModes(ctx); err != nil {
		return err
	}
	rep, err := d.ck.round(ctx)
	if err != nil {
		return fmt.Errorf("startup check of the cache: %w", err)
	}
	if len(rep.Restores) > 0 && d.com != nil {
		if _, err := d.Rebuild(ctx, ""); err != nil {
			return fmt.Errorf("startup rebuild of durable counters: %w", err)
		}
	}
	return nil
}

// commitTimeout bounds one group commit: a few backend round trips.
func commitTimeout(t time.Duration) time.Duration { return max(5*t, durable.DefaultCommitTimeout) }

// Touch notes a fast-mode increment of key for the next checkpoint (and,
// in a namespace with a TTL, for its deadline estimate).
func (d *Service) Touch(n *ns.Namespace, key string) {
	d.ck.touch(key)
	d.noteTTL(n, key)
}

// Write is an unbuffered fast-mode write noted by TouchWrite, whose
// outcome Wrote reports.
type Write struct{ e *touchEntry }

// TouchWrite is Touch for an increment written to the cache at once (not
// buffered): the caller reports its outcome with Wrote. A counter written
// only that way, every write acknowledged, leaves the checkpoint watch
// after one round has read it, instead of after two idle intervals.
func (d *Service) TouchWrite(n *ns.Namespace, key string) Write {
	e := d.ck.note(key, true)
	d.noteTTL(n, key)
	return Write{e}
}

// Wrote reports the outcome of a write noted by TouchWrite: ok when the
// cache acknowledged it.
func (d *Service) Wrote(w Write, ok bool) { d.ck.wrote(w.e, ok) }

// Commit appends one durable-mode event, waits for its batch to commit and
// hands the delta to the engine's buffer. A duplicate id is acknowledged
// and not applied. An empty id gets a random one.
func (d *Service) Commit(ctx context.Context, n *ns.Namespace, key string, delta int64, id string) error {
	if d.com == nil {
		return fmt.Errorf("incr %q: %w", key, ErrNotDurable)
	}
	if delta > store.MaxValue || delta < -store.MaxValue {
		return fmt.Errorf("incr %q: %w: |delta| %d passes the sub-counter bound %d", key, store.ErrOverflow, delta, int64(store.MaxValue))
	}
	if id == "" {
		id = NewID()
	}
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return engine.ErrClosed
	}
	dup, err := d.com.Append(ctx, durable.Event{Key: key, Delta: delta, ID: id, At: d.cfg.Clock.Now()})
	if err != nil {
		return fmt.Errorf("incr %q: %w", key, err)
	}
	if dup {
		return nil
	}
	d.noteTTL(n, key)
	// The increment is durable: from here on it is acknowledged whatever
	// the cache view does. A delta the buffer refuses is missing from the
	// view until the healer repairs it, and counted.
	if err := d.eng.Add(n, key, delta); err != nil {
		d.viewMisses.Add(1)
	}
	return nil
}

// NewID returns a random 128-bit id in hex. It uses crypto/rand, not the
// injected Rand, so ids of different processes never collide.
func NewID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Exact returns the exact value of a durable-mode counter: its rolled-up
// total plus the events not yet rolled up.
func (d *Service) Exact(ctx context.Context, key string) (int64, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	v, err := d.be.Exact(ctx, key)
	if err != nil {
		return 0, fmt.Errorf("exact %q: %w", key, err)
	}
	return v, nil
}

// CloseLog drains the committer: every accepted increment is committed and
// handed to the buffer.
func (d *Service) CloseLog(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	if d.com == nil {
		return nil
	}
	return d.com.Close(ctx)
}

// Close stops the loops and takes a last checkpoint of the watched
// fast-mode counters. It is idempotent.
func (d *Service) Close(ctx context.Context) error {
	d.closeOnce.Do(func() {
		close(d.stop)
		d.loops.Wait()
		if d.ck.ntracked.Load() == 0 {
			return // no fast-mode counter to save
		}
		if _, err := d.ck.round(ctx); err != nil {
			d.closeErr = fmt.Errorf("final checkpoint: %w", err)
		}
	})
	return d.closeErr
}

// Rollup folds the events older than the rollup age and returns how many
// it folded.
func (d *Service) Rollup(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, commitTimeout(d.cfg.Timeout))
	defer cancel()
	start := d.cfg.Clock.Now()
	rep, err := d.be.Rollup(ctx, start.Add(-d.cfg.RollupAge))
	d.obs.observe("rollup", d.cfg.Clock.Now().Sub(start))
	d.rollups.Add(1)
	d.folded.Add(uint64(rep.Folded))
	if err == nil && len(rep.Failed) > 0 {
		err = fmt.Errorf("%d keys not folded: %w", len(rep.Failed), rep.Failed[0])
	}
	if err != nil {
		d.rollupErrs.Add(1)
		return rep.Folded, fmt.Errorf("rollup: %w", err)
	}
	return rep.Folded, nil
}

// Stats are the running totals of the durable layer.
type Stats struct {
	// Batches, Events and FailedEvents count the group commits of the
	// durable event log (see durable.CommitterStats).
	Batches, Events, FailedEvents uint64
	// ViewMisses counts committed increments that the buffer refused
	// (backpressure): they are durable but missing from the cache view
	// until the healer repairs it (or Rebuild).
	ViewMisses uint64
	// Rollups, Folded and RollupErrors count rollup runs, events folded
	// and failed runs.
	Rollups, Folded, RollupErrors uint64
	// Checkpoints is the number of checkpoint rounds, CheckpointErrors
	// the failed ones, Saved the sub-counter checkpoints written.
	Checkpoints, CheckpointErrors, Saved uint64
	// LastCheckpoint is when the last successful checkpoint round ended
	// (zero before the first).
	LastCheckpoint time.Time
	// Tracked is the number of fast-mode counters currently watched for
	// checkpoints; Untracked counts touches dropped because MaxTracked
	// counters were watched already.
	Tracked, Untracked uint64
	// Restores counts node losses repaired from checkpoints;
	// RestoredKeys and RestoredAmount sum their Keys and Amount.
	Restores, RestoredKeys uint64
	RestoredAmount         int64
	// HealSweeps counts the sweeps of the healer that compared the cache
	// view of durable-mode counters with the log, HealSkipped the
	// intervals another process swept, HealErrors the failed sweeps.
	HealSweeps, HealSkipped, HealErrors uint64
	// Repairs counts the cache views of durable-mode counters the healer
	// corrected, and RepairedAmount the signed sum of the corrections
	// (positive: the view was behind).
	Repairs        uint64
	RepairedAmount int64
	// Behind is the number of durable-mode counters whose view the last
	// sweeps found off and not yet repaired.
	Behind uint64
	// GC counts clears and the clean-up of expired counters, and holds
	// the store's size (see GCStats).
	GC GCStats
}

// Stats returns the running totals.
func (d *Service) Stats() Stats {
	var s Stats
	if d.com != nil {
		cs := d.com.Stats()
		s.Batches, s.Events, s.FailedEvents = cs.Batches, cs.Events, cs.Failed
	}
	s.ViewMisses = d.viewMisses.Load()
	s.Rollups, s.Folded, s.RollupErrors = d.rollups.Load(), d.folded.Load(), d.rollupErrs.Load()
	d.ck.stats(&s)
	if d.heal.d != nil {
		d.heal.stats(&s)
	}
	s.GC = d.gcStats()
	return s
}

// observer reports durations to Config.Observe, when set.
type observer struct {
	f func(op string, d time.Duration)
}

func (o *observer) observe(op string, d time.Duration) {
	if o.f != nil {
		o.f(op, d)
	}
}

// every runs f on each tick of t and each signal on kick (nil: none) until
// Close, each run with a context bounded by timeout (0: f bounds itself).
func (d *Service) every(t clock.Ticker, kick <-chan struct{}, timeout time.Duration, f func(context.Context)) {
	defer d.loops.Done()
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C():
		case <-kick:
		}
		ctx, cancel := context.Background(), context.CancelFunc(func() {})
		if timeout > 0 {
			ctx, cancel = context.WithTimeout(ctx, timeout)
		}
		f(ctx)
		cancel()
	}
}
