package hotcount

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/keyspace"
)

// Durability defaults.
const (
	// DefaultRollupAge is how old a durable-mode event must be before the
	// rollup folds it into its key's total (Config.RollupAge).
	DefaultRollupAge = 10 * time.Minute
	// MaxTracked bounds the fast-mode counters remembered as touched
	// between two checkpoints. Past it an early checkpoint is started and
	// further new counters wait for the next touch (Stats.Untracked).
	MaxTracked = 1 << 20
)

// ErrNotDurable: IncrID or GetExact was asked for a key that is not in
// durable mode.
var ErrNotDurable = errors.New("hotcount: key is not in durable mode")

// durability connects a Client to its durable store.
//
// Durable mode: every increment goes through one durable.Committer (group
// commit) and is acknowledged only after its batch committed; a duplicate
// id is acknowledged without being applied again. The committed delta is
// then added to the buffer, which feeds the cache view. A rollup loop folds
// events older than RollupAge into totals.
//
// Fast mode: increments mark their counter as touched; the checkpoint loop
// (checkpoint.go) saves the touched counters' sub-counters and watches one
// sentinel key per cache node to detect and repair a node that lost its
// data.
type durability struct {
	c         *Client
	be        durable.Backend
	com       *durable.Committer // nil when no key is in durable mode
	rollupAge time.Duration

	// mu guards closed; incr holds it shared for the whole of a durable
	// increment, so closeLog (exclusive) waits until every committed
	// increment has also reached the buffer.
	mu     sync.RWMutex
	closed bool

	ck checkpointer

	viewMisses atomic.Uint64 // committed increments the buffer refused
	rollups    atomic.Uint64
	folded     atomic.Uint64
	rollupErrs atomic.Uint64

	stop      chan struct{}
	loops     sync.WaitGroup
	closeOnce sync.Once
	closeErr  error
}

// newDurability starts the checkpointer and, when some keys are in durable
// mode, the committer and the rollup loop.
func newDurability(c *Client) (*durability, error) {
	s := &c.cfg
	if s.RollupAge < 0 {
		return nil, fmt.Errorf("%w: RollupAge must not be negative, got %v", ErrConfig, s.RollupAge)
	}
	d := &durability{c: c, be: s.Durable, rollupAge: s.RollupAge, stop: make(chan struct{})}
	if d.rollupAge == 0 {
		d.rollupAge = DefaultRollupAge
	}
	d.ck.init(d)
	if s.anyDurable() {
		com, err := durable.NewCommitter(d.be, durable.CommitterConfig{CommitTimeout: commitTimeout(s.Timeout)})
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
		d.com = com
		d.loops.Add(1)
		go d.rollupLoop()
	}
	d.loops.Add(1)
	go d.checkpointLoop()
	return d, nil
}

// startup repairs the cache view before the Client is used: a checkpoint
// round checks every node's sentinel and restores fast-mode counters of a
// node that lost its data (the embedded store after a restart, a Redis
// primary restarted empty); when one did, durable-mode counters are
// rebuilt from the log as well. Nothing writes through this Client yet, so
// the rebuild is exact.
func (d *durability) startup(ctx context.Context) error {
	rep, err := d.ck.round(ctx)
	if err != nil {
		return fmt.Errorf("startup check of the cache: %w", err)
	}
	if len(rep.Restores) > 0 && d.com != nil {
		if _, err := d.c.Rebuild(ctx, ""); err != nil {
			return fmt.Errorf("startup rebuild of durable counters: %w", err)
		}
	}
	return nil
}

// commitTimeout bounds one group commit: a few backend round trips.
func commitTimeout(t time.Duration) time.Duration { return max(5*t, durable.DefaultCommitTimeout) }

// incr handles an increment of a key in namespace ns when durability needs
// to see it (durable mode: commit first; fast mode: note the key for the
// next checkpoint). handled says the increment was fully dealt with.
func (d *durability) incr(ctx context.Context, ns Namespace, key string, delta int64, id string) (handled bool, err error) {
	if ns.Mode != ModeDurable {
		d.ck.touch(key)
		return false, nil
	}
	if id == "" {
		id = newID()
	}
	return true, d.commit(ctx, key, delta, id)
}

// commit appends one event, waits for its batch to commit and hands the
// delta to the buffer. A duplicate id is acknowledged and not applied.
func (d *durability) commit(ctx context.Context, key string, delta int64, id string) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.closed {
		return ErrClosed
	}
	dup, err := d.com.Append(ctx, durable.Event{Key: key, Delta: delta, ID: id, At: d.c.now()})
	if err != nil {
		return fmt.Errorf("incr %q: %w", key, err)
	}
	if dup {
		return nil
	}
	// The increment is durable: from here on it is acknowledged whatever
	// the cache view does. A delta the buffer refuses is missing from the
	// view until Rebuild, and counted.
	if err := d.c.buf.Add(key, delta); err != nil {
		d.viewMisses.Add(1)
	}
	return nil
}

// newID returns a random 128-bit id in hex. It uses crypto/rand, not the
// Client's injected Rand, so ids of different processes never collide.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// closeLog drains the committer: every accepted increment is committed and
// handed to the buffer.
func (d *durability) closeLog(ctx context.Context) error {
	d.mu.Lock()
	d.closed = true
	d.mu.Unlock()
	if d.com == nil {
		return nil
	}
	return d.com.Close(ctx)
}

// close stops the loops and takes a last checkpoint of the watched
// fast-mode counters. It is idempotent.
func (d *durability) close(ctx context.Context) error {
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

// rollupLoop folds old events every quarter of the rollup age (between 1 s
// and 1 min).
func (d *durability) rollupLoop() {
	defer d.loops.Done()
	every := min(max(d.rollupAge/4, time.Second), time.Minute)
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
			_, _ = d.rollup(context.Background())
		}
	}
}

// rollup folds the events older than the rollup age.
func (d *durability) rollup(ctx context.Context) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, commitTimeout(d.c.cfg.Timeout))
	defer cancel()
	rep, err := d.be.Rollup(ctx, d.c.now().Add(-d.rollupAge))
	d.rollups.Add(1)
	d.folded.Add(uint64(rep.Folded))
	if err == nil && len(rep.Failed) > 0 {
		err = fmt.Errorf("rollup: %d keys not folded: %w", len(rep.Failed), rep.Failed[0])
	}
	if err != nil {
		d.rollupErrs.Add(1)
		return rep.Folded, err
	}
	return rep.Folded, nil
}

// checkpointLoop runs a checkpoint round every CheckpointInterval, and
// early when the touched set is full.
func (d *durability) checkpointLoop() {
	defer d.loops.Done()
	t := time.NewTicker(d.c.cfg.CheckpointInterval)
	defer t.Stop()
	for {
		select {
		case <-d.stop:
			return
		case <-t.C:
		case <-d.ck.kick:
		}
		ctx, cancel := context.WithTimeout(context.Background(), d.c.cfg.CheckpointInterval+d.c.cfg.Timeout)
		_, _ = d.ck.round(ctx)
		cancel()
	}
}

// Mode returns the durability mode of key.
func (c *Client) Mode(key string) Mode { return c.cfg.namespace(key).Mode }

// IncrID adds delta to the durable-mode counter key, with id as the
// idempotency id: it returns once the increment is committed to the
// durable event log, and an id seen before (within the backend's dedup
// window) is acknowledged without being counted again, so a client may
// resend an increment whose reply it did not get. id must be non-empty
// valid UTF-8 without NUL. A key not in durable mode gives ErrNotDurable.
func (c *Client) IncrID(ctx context.Context, key string, delta int64, id string) error {
	if err := c.checkIncr(key, delta); err != nil {
		return err
	}
	if !durable.ValidKey(id) {
		return fmt.Errorf("incr %q: %w: bad id %q", key, durable.ErrInvalidEvent, id)
	}
	if c.cfg.namespace(key).Mode != ModeDurable {
		return fmt.Errorf("incr %q: %w", key, ErrNotDurable)
	}
	if c.dur == nil {
		return fmt.Errorf("incr %q: %w: durable mode needs Config.Durable", key, ErrConfig)
	}
	return c.dur.commit(ctx, key, delta, id)
}

// GetExact returns the exact value of a durable-mode counter from the
// durable store: its rolled-up total plus the events not yet rolled up.
// Every acknowledged increment is in it. Stale is zero and N is the
// number of sub-counters of the cache view.
func (c *Client) GetExact(ctx context.Context, key string) (Reading, error) {
	if c.closed.Load() {
		return Reading{}, ErrClosed
	}
	if err := keyspace.Validate(key); err != nil {
		return Reading{}, err
	}
	if c.cfg.namespace(key).Mode != ModeDurable {
		return Reading{}, fmt.Errorf("exact %q: %w", key, ErrNotDurable)
	}
	if c.dur == nil {
		return Reading{}, fmt.Errorf("exact %q: %w: durable mode needs Config.Durable", key, ErrConfig)
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	v, err := c.dur.be.Exact(ctx, key)
	if err != nil {
		return Reading{}, fmt.Errorf("exact %q: %w", key, err)
	}
	_, read, err := c.Labels(ctx, key)
	if err != nil {
		return Reading{}, fmt.Errorf("exact %q: %w", key, err)
	}
	return Reading{Key: key, Value: v, N: len(read)}, nil
}

// Rollup folds the durable-mode events older than Config.RollupAge into
// their keys' totals now (the Client also does it in the background) and
// returns how many events it folded.
func (c *Client) Rollup(ctx context.Context) (int, error) {
	if c.closed.Load() {
		return 0, ErrClosed
	}
	if c.dur == nil {
		return 0, fmt.Errorf("rollup: %w: no durable store (Config.Durable)", ErrConfig)
	}
	return c.dur.rollup(ctx)
}

// DurabilityStats are the running totals of the durable layer.
type DurabilityStats struct {
	// Batches, Events and FailedEvents count the group commits of the
	// durable event log (see durable.CommitterStats).
	Batches, Events, FailedEvents uint64
	// ViewMisses counts committed increments that the buffer refused
	// (backpressure): they are durable but missing from the cache view
	// until Rebuild.
	ViewMisses uint64
	// Rollups, Folded and RollupErrors count rollup runs, events folded
	// and failed runs.
	Rollups, Folded, RollupErrors uint64
	// Checkpoints is the number of checkpoint rounds, CheckpointErrors
	// the failed ones, Saved the sub-counter checkpoints written.
	Checkpoints, CheckpointErrors, Saved uint64
	// Tracked is the number of fast-mode counters currently watched for
	// checkpoints; Untracked counts touches dropped because MaxTracked
	// counters were watched already.
	Tracked, Untracked uint64
	// Restores counts node losses repaired from checkpoints;
	// RestoredKeys and RestoredAmount sum their Keys and Amount.
	Restores, RestoredKeys uint64
	RestoredAmount         int64
}

// DurabilityStats returns the running totals of the durable layer; the
// zero value without Config.Durable.
func (c *Client) DurabilityStats() DurabilityStats {
	d := c.dur
	if d == nil {
		return DurabilityStats{}
	}
	var s DurabilityStats
	if d.com != nil {
		cs := d.com.Stats()
		s.Batches, s.Events, s.FailedEvents = cs.Batches, cs.Events, cs.Failed
	}
	s.ViewMisses = d.viewMisses.Load()
	s.Rollups, s.Folded, s.RollupErrors = d.rollups.Load(), d.folded.Load(), d.rollupErrs.Load()
	d.ck.stats(&s)
	return s
}

// cleared notes that Clear deleted key's sub-counters, so that a fast-mode
// counter's next checkpoint records the cleared value (else a later
// restore would bring the old one back).
func (d *durability) cleared(key string) {
	if d.c.cfg.namespace(key).Mode != ModeDurable {
		d.ck.touch(key)
	}
}
