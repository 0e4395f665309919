package hotcount

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/buffer"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/hotkeys"
	"github.com/hotcount/hotcount/internal/autoscale"
	"github.com/hotcount/hotcount/internal/counters"
	"github.com/hotcount/hotcount/internal/durability"
	"github.com/hotcount/hotcount/internal/engine"
	"github.com/hotcount/hotcount/internal/regions"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/mem"
	"github.com/hotcount/hotcount/store/redis"
)

// Client reads and writes sharded counters. It is safe for concurrent use.
type Client struct {
	cfg   settings
	st    store.Store
	eng   *engine.Engine
	dur   *durability.Service // nil without a durable store
	scale *autoscale.Scaler
	// ops runs the operations that take more than one of eng, dur and
	// reg.
	ops *counters.Ops
	// fast is the one buffer every key goes through when all keys are
	// buffered alike and nothing else needs to see an increment (no
	// namespaces, no durable store): Incr's hot path.
	fast *buffer.Buffer
	// reg ships this region's contributions and reads the peers' (nil
	// without Config.Region).
	reg *regions.Service
	// restored is reg once started, for the durability service's restore
	// callback (which may run before).
	restored atomic.Pointer[regions.Service]

	closeParts []func(context.Context) error // in closing order
	closeOnce  sync.Once
	closed     atomic.Bool
	closeErr   error
}

// New returns a Client for cfg. It connects to the backend and fails with
// ErrUnavailable if that is not reachable, or ErrConfig for a bad Config.
// The caller's Config is not modified.
func New(ctx context.Context, cfg Config) (*Client, error) {
	s, err := cfg.resolve()
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: s}
	if c.cfg.Rand == nil {
		c.cfg.Rand = rand.Uint64
	}
	// Every part started is closed again, in reverse, if a later one fails.
	var undo []func(context.Context) error
	fail := func(err error) (*Client, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			_ = undo[i](ctx)
		}
		return nil, err
	}
	switch {
	case s.Store != nil:
		c.st = s.Store
	case len(s.Redis.Addrs) > 0:
		c.st, err = redis.New(ctx, redis.Config{Addrs: s.Redis.Addrs, Username: s.Redis.Username,
			Password: s.Redis.Password, TLS: s.Redis.TLS, Timeout: s.Timeout, FlushDelay: s.Redis.FlushDelay, BatchWindow: s.Redis.IncrBatchWindow})
	default:
		c.st, err = mem.Open(mem.Config{Nodes: s.Embedded.Nodes, Clock: s.Clock, AOF: s.Embedded.AOF, AOFSync: s.Embedded.AOFSync})
	}
	if err != nil {
		return fail(err)
	}
	if s.Store == nil {
		undo = append(undo, func(context.Context) error { return c.st.Close() })
	}
	c.eng, err = engine.New(engine.Config{
		Store: c.st, Namespaces: s.table, MetaTTL: s.Meta.TTL, NaiveLabels: s.Meta.NaiveLabels,
		Durable: durability.MetaMirror(s.Durability.Store), NoReadCache: s.Reads.NoCache, MaxBufferedKeys: s.Buffer.MaxKeys,
		MaxPendingKeys: s.Buffer.MaxPendingKeys, HotAt: s.Buffer.HotAt, Timeout: s.Timeout, Clock: s.Clock, Rand: c.cfg.Rand,
		Observe: s.Observe,
	})
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrConfig, err))
	}
	undo = append(undo, c.eng.CloseBuffers)
	c.scale, err = autoscale.New(autoscale.Config{
		Engine: c.eng, AutoN: s.AutoN.Enabled, NaiveLabels: s.Meta.NaiveLabels, Rebalance: s.Rebalance.Auto, RebalanceCheck: s.Rebalance.Check,
		Policy:  hotkeys.Policy{Budget: s.AutoN.Budget, MaxN: s.AutoN.MaxN, Hysteresis: s.AutoN.Hysteresis},
		Timeout: s.Timeout, Clock: s.Clock,
	})
	if err != nil {
		return fail(fmt.Errorf("%w: %w", ErrConfig, err))
	}
	undo = append(undo, c.scale.Close)
	if s.Durability.Store != nil {
		c.dur, err = durability.New(durability.Config{
			Backend: s.Durability.Store, Engine: c.eng, CheckpointInterval: s.Durability.CheckpointInterval,
			RollupAge: s.Durability.RollupAge, Timeout: s.Timeout, Clock: s.Clock, Rand: c.cfg.Rand,
			OnRestore: c.onRestore(s.Durability.OnRestore), Observe: s.Observe, HealInterval: s.Durability.HealInterval,
			CleanupInterval: s.Durability.CleanupInterval,
		})
		if err != nil {
			return fail(fmt.Errorf("%w: %w", ErrConfig, err))
		}
		undo = append(undo, c.dur.CloseLog, c.dur.Close)
		c.eng.SetBehind(c.dur.Behind)
		if !s.Durability.NoStartupRepair {
			if err := c.dur.Startup(ctx); err != nil {
				if errors.Is(err, durability.ErrModeChanged) {
					err = fmt.Errorf("%w: %w", ErrConfig, err)
				}
				return fail(err)
			}
		} else if err := c.dur.ForgetModes(ctx); err != nil {
			return fail(err)
		}
	} else {
		c.fast = c.eng.OnlyBuffer()
	}
	c.ops = counters.New(counters.Config{Engine: c.eng, Service: c.dur, Backend: s.Durability.Store,
		Namespaces: s.table, Region: s.Region, Clock: s.Clock})
	if err := c.startRegions(); err != nil {
		return fail(err)
	}
	if c.reg != nil {
		c.restored.Store(c.reg)
		// Every increment is marked for shipping: no path skips c.incr.
		c.fast = nil
		undo = append(undo, c.reg.Close)
	}
	// Close drains in this order: the loops that resize, the durable log
	// (whose commits feed the buffers), the buffers (whose flushes feed the
	// cache), the final checkpoint, and the store if the Client opened it.
	c.closeParts = []func(context.Context) error{c.scale.Close}
	if c.dur != nil {
		c.closeParts = append(c.closeParts, c.dur.CloseLog, c.eng.CloseBuffers, c.dur.Close)
	} else {
		c.closeParts = append(c.closeParts, c.eng.CloseBuffers)
	}
	if c.reg != nil {
		// After the buffers: the counters their last flushes marked are
		// handed to the shipper.
		c.closeParts = append(c.closeParts, c.reg.Close)
	}
	if s.Store == nil {
		c.closeParts = append(c.closeParts, func(context.Context) error { return c.st.Close() })
	}
	return c, nil
}

// Incr adds delta to the counter key: to one sub-counter chosen at
// random, to this process's buffered delta, or, in durable mode, to the
// event log first. delta must not be zero. A delta, or its sub-counter or
// buffered delta, past ±store.MaxValue returns ErrOverflow (no change).
func (c *Client) Incr(ctx context.Context, key string, delta int64) error {
	if c.fast != nil && delta != 0 {
		// The hot path: the buffer validates every key it has not seen
		// yet, and after Close it answers ErrClosed itself. Nothing keeps
		// key (the other paths get a copy), so a key built for the call
		// ("likes:" + id) stays on the caller's stack.
		if err := c.fast.Add(key, delta); err != nil {
			return engine.AddError(strings.Clone(key), err)
		}
		return nil
	}
	return c.incr(ctx, key, delta, "")
}

// IncrID adds delta to the durable-mode counter key, with id as the
// idempotency id: it returns once the increment is committed to the
// durable event log, and an id seen before (within the backend's dedup
// window) is acknowledged without being counted again, so a client may
// resend an increment whose reply it did not get. id must be non-empty
// valid UTF-8 without NUL. A key not in durable mode gives ErrNotDurable.
func (c *Client) IncrID(ctx context.Context, key string, delta int64, id string) error {
	if !durable.ValidKey(id) {
		return fmt.Errorf("incr %q: %w: bad id %q", key, durable.ErrInvalidEvent, id)
	}
	return c.incr(ctx, key, delta, id)
}

func (c *Client) incr(ctx context.Context, key string, delta int64, id string) error {
	if err := c.check(key); err != nil {
		return err
	}
	if delta == 0 {
		return ErrZeroDelta
	}
	return c.ops.Incr(ctx, key, delta, id)
}

// IncrValue adds delta to key as Incr does, except that an increment of a
// cold counter of a buffered fast-mode namespace is written at once, as
// one INCRBY on the counter's one sub-counter, instead of being buffered
// (no script, no extra key, no read), and returns the value the cache
// answered. exact reports that the counter is known to be cold (its
// metadata, cached or looked up beside the INCRBY, names the cold
// sub-counter alone, and this process buffers nothing of it), so value is
// the counter's value, what a plain INCR would answer; otherwise value is
// 0 and the increment was buffered or written as Incr does. A key that
// gets Config.Buffer.HotAt increments in one flush interval is hot and
// buffered from then on. When the INCRBY could not be sent (the cache is
// unreachable) the increment is buffered instead; when it was sent and
// got no reply, the error wraps ErrUnavailable and its outcome is
// unknown, as for an unbuffered Incr. The Redis-protocol proxy's INCR
// uses it.
func (c *Client) IncrValue(ctx context.Context, key string, delta int64) (value int64, exact bool, err error) {
	if err := c.check(key); err != nil {
		return 0, false, err
	}
	if delta == 0 {
		return 0, false, ErrZeroDelta
	}
	return c.ops.IncrValue(ctx, key, delta)
}

// check refuses calls after Close and invalid keys.
func (c *Client) check(key string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	return keyspace.Validate(key)
}

// Get returns the sum of key's sub-counters, from the summed-read cache
// when it is fresh enough, plus this process's unflushed delta.
func (c *Client) Get(ctx context.Context, key string) (Reading, error) {
	if err := c.check(key); err != nil {
		return Reading{}, err
	}
	return c.ops.Get(ctx, key, false)
}

// GetFresh is Get without the summed-read cache: it reads the
// sub-counters now (one round per node), for callers that need the latest
// value and accept the cost of N reads.
func (c *Client) GetFresh(ctx context.Context, key string) (Reading, error) {
	if err := c.check(key); err != nil {
		return Reading{}, err
	}
	return c.ops.Get(ctx, key, true)
}

// GetMulti returns the sums of many counters. Counters not in the cache
// are read together: one round per node for their label sets and one for
// their values. Every key is validated before anything is read.
func (c *Client) GetMulti(ctx context.Context, keys []string) (map[string]Reading, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	for _, k := range keys {
		if err := keyspace.Validate(k); err != nil {
			return nil, err
		}
	}
	return c.ops.GetMulti(ctx, keys)
}

// GetExact returns the exact value of a durable-mode counter from the
// durable store: its rolled-up total plus the events not yet rolled up.
// Every acknowledged increment is in it. It stands on the durable store
// alone: Stale is zero, and N is the number of sub-counters of the cache
// view when the cache answers; while the cache is down or failing over, N
// is 0 and NUnknown is set, and the read still succeeds.
func (c *Client) GetExact(ctx context.Context, key string) (Reading, error) {
	if err := c.check(key); err != nil {
		return Reading{}, err
	}
	return c.ops.GetExact(ctx, key)
}

// SubKeys returns the cache keys of every sub-counter of key that may hold
// a value (the read set). It creates no state.
func (c *Client) SubKeys(ctx context.Context, key string) ([]string, error) {
	if err := c.check(key); err != nil {
		return nil, err
	}
	return c.ops.SubKeys(ctx, key)
}

// Clear deletes the counter key: every sub-counter and its metadata, after
// sending this process's buffered deltas; its next increment starts it
// again. Clearing a counter that does not exist is not an error. Once
// the metadata record is deleted, the rest (its record mark, the
// sub-counters it named) is deleted even if ctx ends meanwhile: nothing
// would name them afterwards.
func (c *Client) Clear(ctx context.Context, key string) error {
	if err := c.check(key); err != nil {
		return err
	}
	return c.ops.Clear(ctx, key)
}

// Expire gives the counter key the deadline at, as Redis EXPIREAT does: the
// counter and every part of it go then (a deadline not after now removes
// it at once). It reports whether the counter existed. A cold counter
// expires exactly as its one cache key does; a sharded one is taken as
// gone by every reader from the deadline on (see docs/concepts.md, counter lifecycle,
// for how increments, clears and folds meet a deadline). In a region the
// deadline is the counter's in every region (docs/regions.md, Deadlines).
func (c *Client) Expire(ctx context.Context, key string, at time.Time) (bool, error) {
	if err := c.check(key); err != nil {
		return false, err
	}
	return c.ops.Expire(ctx, key, at)
}

// Persist removes the deadline of key, as Redis PERSIST does. It reports
// whether there was one. In a region, the counter keeps no deadline in
// any region.
func (c *Client) Persist(ctx context.Context, key string) (bool, error) {
	if err := c.check(key); err != nil {
		return false, err
	}
	return c.ops.Persist(ctx, key)
}

// Deadline returns the deadline of key (zero: none) and whether the
// counter exists.
func (c *Client) Deadline(ctx context.Context, key string) (at time.Time, exists bool, err error) {
	if err := c.check(key); err != nil {
		return time.Time{}, false, err
	}
	return c.eng.Deadline(ctx, key)
}

// Exists returns how many of keys are counters that exist (a key named
// twice counts twice), as Redis EXISTS does.
func (c *Client) Exists(ctx context.Context, keys ...string) (int64, error) {
	if c.closed.Load() {
		return 0, ErrClosed
	}
	for _, k := range keys {
		if err := keyspace.Validate(k); err != nil {
			return 0, err
		}
	}
	return c.eng.Exists(ctx, keys)
}

// Flush sends this process's buffered deltas now and waits for the cache
// to acknowledge them.
func (c *Client) Flush(ctx context.Context) error { return c.eng.Flush(ctx) }

// Mode returns the durability mode of key.
func (c *Client) Mode(key string) Mode { return c.cfg.table.Lookup(key).Mode }

// Namespace returns the settings that apply to key, and whether a
// namespace matched (false: Config.Defaults apply).
func (c *Client) Namespace(key string) (Namespace, bool) {
	n, ok := c.cfg.table.Match(key)
	return *n, ok
}

// Store returns the backend the Client uses.
func (c *Client) Store() store.Store { return c.st }

// Ping checks that the backend answers, with one read of a probe key that
// is never written.
func (c *Client) Ping(ctx context.Context) error {
	if c.closed.Load() {
		return ErrClosed
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	if _, err := c.st.Get(ctx, []string{pingKey}); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// pingKey is the key Ping reads.
var pingKey = keyspace.SubKey("hotcount:ping", "0")

// Close drains buffered deltas and the durable log (until ctx ends: then
// it returns an error saying what was not flushed), takes a last
// checkpoint, and releases the Client. It is idempotent; later calls
// return the first call's result. Operations after Close return ErrClosed.
func (c *Client) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		var errs []error
		for _, f := range c.closeParts {
			if err := f(ctx); err != nil && !errors.Is(err, store.ErrClosed) {
				errs = append(errs, err)
			}
		}
		c.closeErr = errors.Join(errs...)
	})
	return c.closeErr
}

// ValidateKey reports whether key is a legal counter key: 1 to 512 bytes of
// valid UTF-8 without control characters or braces. The error wraps
// ErrInvalidKey.
func ValidateKey(key string) error { return keyspace.Validate(key) }
