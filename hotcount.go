// Package hotcount absorbs write-hot counters on a sharded cache.
//
// A counter such as "likes:post:42" is split into N sub-counters, stored
// under the sub-keys "{likes:post:42#L}" for N labels L. Each sub-key has its
// own hash tag, so the sub-counters hash to different slots and, in a Redis
// Cluster, to different primaries: one hot counter's write load is spread
// over ~N keys instead of hammering one node.
//
// Incr adds a delta to one sub-counter chosen uniformly at random. Get sums
// all sub-counters: the sub-keys are grouped by the node that owns their slot
// and each node is asked once, in one pipelined round (never a cross-slot
// MGET). The sum is cached for ReadCacheTTL (default 1 s) with single-flight,
// so a thousand concurrent page views cost one round per node, and each
// Reading says how stale it is. Incr adjusts this process's cached sum, so a
// process reads its own writes.
//
// A Client talks to Redis (standalone or Cluster, via rueidis) when
// Config.Redis is set, and otherwise to an embedded in-process store whose
// simulated nodes route keys by the same slot rule.
//
// Counters are not balances: there is no conditional or bounded decrement,
// and money belongs in a transactional store.
package hotcount

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/hotcount/hotcount/buffer"
	"github.com/hotcount/hotcount/hotkeys"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/meta"
	"github.com/hotcount/hotcount/store"
)

// Client reads and writes sharded counters. It is safe for concurrent use.
type Client struct {
	cfg       settings
	st        store.Store
	ownsStore bool
	now       func() time.Time
	rand      func() uint64

	buf *buffer.Buffer // nil when no key is buffered
	// allBuffered: every key is buffered and nothing else needs to see
	// an increment (no namespaces, no durable store).
	allBuffered bool
	dur         *durability      // nil without a durable store
	naive       map[int][]string // label sets by N, when there is no metadata
	meta        *meta.Manager    // label sets, resizing; nil if the store has no metadata

	labelsDownUntil atomic.Int64 // unix ns: until then writeLabels fails fast

	sketch *hotkeys.Sketch     // this process's unbuffered cache writes per key
	auto   *hotkeys.Controller // automatic N; nil without Config.AutoN
	rebal  *rebalancer         // automatic re-placement; nil without Config.AutoRebalance

	flight singleflight.Group
	cache  readCache

	closeOnce sync.Once
	closed    atomic.Bool
	closeErr  error
}

// Reading is the value of one counter.
type Reading struct {
	// Key is the counter key.
	Key string
	// Value is the sum of the sub-counters.
	Value int64
	// Stale is how old the sum is: zero for a fresh read, up to the
	// ReadCacheTTL for a cached one.
	Stale time.Duration
	// N is the number of sub-counters that were summed.
	N int
}

// New returns a Client for cfg. It connects to the backend and fails with
// ErrUnavailable if that is not reachable, or ErrConfig for a bad Config.
// The caller's Config is not modified.
func New(ctx context.Context, cfg Config) (*Client, error) {
	s, err := cfg.validate()
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: s, now: s.Now, rand: s.Rand}
	if c.now == nil {
		c.now = time.Now
	}
	if c.rand == nil {
		c.rand = rand.Uint64
	}
	c.cache.init()
	c.naive = map[int][]string{s.N: keyspace.NaiveLabels(s.N)}
	for _, ns := range s.namespaces {
		c.naive[ns.N] = keyspace.NaiveLabels(ns.N)
	}
	switch {
	case s.Store != nil:
		c.st = s.Store
	default:
		c.st, err = openStore(ctx, s)
		if err != nil {
			return nil, err
		}
		c.ownsStore = true
	}
	if mb, ok := c.st.(meta.Backend); ok {
		mcfg := meta.Config{
			TTL:      s.MetaTTL,
			Margin:   metaMargin(s.MetaTTL),
			Clock:    funcClock{c.now},
			DefaultN: func(key string) int { return c.cfg.namespace(key).N },
			Naive:    s.NaiveLabels,
			Rand:     c.rand,
		}
		if s.Durable != nil {
			mcfg.Durable = durableMeta{s.Durable}
		}
		c.meta, err = meta.NewManager(mb, mcfg)
		if err != nil {
			if c.ownsStore {
				_ = c.st.Close()
			}
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	if s.anyDurable() && s.Durable == nil {
		if c.ownsStore {
			_ = c.st.Close()
		}
		return nil, fmt.Errorf("%w: durable mode needs a durable store (Config.Durable)", ErrConfig)
	}
	if s.anyBuffered() {
		c.buf, err = buffer.New(c.st, buffer.Config{
			Interval:       s.FlushInterval,
			MaxKeys:        s.MaxBufferedKeys,
			MaxPendingKeys: s.MaxPendingKeys,
			BatchTimeout:   s.Timeout,
			Labels:         c.writeLabels,
			Rand:           c.rand,
		})
		if err != nil {
			if c.ownsStore {
				_ = c.st.Close()
			}
			return nil, fmt.Errorf("%w: %v", ErrConfig, err)
		}
	}
	if err := c.startHotKeys(); err != nil {
		_ = c.closeParts(ctx)
		return nil, err
	}
	if err := c.startRebalancer(); err != nil {
		_ = c.closeParts(ctx)
		return nil, err
	}
	c.allBuffered = c.buf != nil && s.Buffered && len(s.namespaces) == 0 && s.Durable == nil
	if s.Durable != nil {
		c.dur, err = newDurability(c)
		if err != nil {
			_ = c.closeParts(ctx)
			return nil, err
		}
	}
	if c.dur != nil && !s.NoStartupRepair {
		if err := c.dur.startup(ctx); err != nil {
			_ = c.closeParts(ctx)
			return nil, err
		}
	}
	return c, nil
}

// Store returns the backend the Client uses.
func (c *Client) Store() store.Store { return c.st }

// Labels returns the labels of key's sub-counters: write is the active
// set that increments go to, read every label that may hold a value. The
// slices are shared: do not modify them. Without metadata support in the
// store both are the naive labels "0".."N-1".
func (c *Client) Labels(ctx context.Context, key string) (write, read []string, err error) {
	if c.meta == nil {
		l := c.naive[c.cfg.namespace(key).N]
		return l, l, nil
	}
	return c.meta.Labels(ctx, key)
}

// writeLabels is the buffer's label source: the active labels, or none
// (the buffer then keeps the delta and retries) when they cannot be read.
//
// While the cache is unreachable, a metadata read that is not cached waits
// up to Timeout; so that a flush of many keys does not wait that long for
// each of them, a failed lookup makes the next ones fail at once for one
// Timeout.
func (c *Client) writeLabels(key string) []string {
	if until := c.labelsDownUntil.Load(); until != 0 && c.now().UnixNano() < until {
		if w, ok := c.cachedWriteLabels(key); ok {
			return w
		}
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.Timeout)
	defer cancel()
	w, _, err := c.Labels(ctx, key)
	if err != nil {
		c.labelsDownUntil.Store(c.now().Add(c.cfg.Timeout).UnixNano())
		return nil
	}
	return w
}

// cachedWriteLabels returns key's write labels when no cache round trip is
// needed to know them (no metadata support: the naive labels).
func (c *Client) cachedWriteLabels(key string) ([]string, bool) {
	if c.meta == nil {
		return c.naive[c.cfg.namespace(key).N], true
	}
	return nil, false
}

// SubKeys returns the cache keys of every sub-counter of key that may hold
// a value (the read set).
func (c *Client) SubKeys(ctx context.Context, key string) ([]string, error) {
	if err := keyspace.Validate(key); err != nil {
		return nil, err
	}
	_, labels, err := c.Labels(ctx, key)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(labels))
	for i, l := range labels {
		out[i] = keyspace.SubKey(key, l)
	}
	return out, nil
}

// Incr adds delta to the counter key. delta must not be zero. If the chosen
// sub-counter would overflow int64, Incr returns ErrOverflow and changes
// nothing.
func (c *Client) Incr(ctx context.Context, key string, delta int64) error {
	if c.allBuffered && delta != 0 {
		// The hot path: the buffer validates every key it has not seen
		// yet, so an increment of a buffered key costs no validation, and
		// after Close it answers ErrClosed itself.
		if err := c.buf.Add(key, delta); err != nil {
			return addError(key, err)
		}
		return nil
	}
	return c.incr(ctx, key, delta)
}

// incr is Incr for keys that are not all buffered alike.
func (c *Client) incr(ctx context.Context, key string, delta int64) error {
	if err := c.checkIncr(key, delta); err != nil {
		return err
	}
	ns := c.cfg.namespace(key)
	if c.dur != nil {
		if handled, err := c.dur.incr(ctx, ns, key, delta, ""); handled {
			return err
		}
	} else if ns.Mode == ModeDurable {
		return fmt.Errorf("incr %q: %w: durable mode needs Config.Durable", key, ErrConfig)
	}
	if c.buf != nil && ns.buffered() {
		return c.addBuffered(key, delta)
	}
	// No timeout of its own here: the store bounds each round trip.
	labels, _, err := c.Labels(ctx, key)
	if err != nil {
		return fmt.Errorf("incr %q: %w", key, err)
	}
	label := labels[pick(c.rand(), len(labels))]
	c.sketch.Observe(key, 1)
	if _, err := c.st.IncrBy(ctx, keyspace.SubKey(key, label), delta); err != nil {
		return fmt.Errorf("incr %q: %w", key, err)
	}
	c.cache.add(key, delta)
	return nil
}

// addBuffered adds delta to key's process-local delta.
func (c *Client) addBuffered(key string, delta int64) error {
	err := c.buf.Add(key, delta)
	if err == nil {
		return nil
	}
	return addError(key, err)
}

func addError(key string, err error) error {
	if errors.Is(err, buffer.ErrClosed) {
		return ErrClosed
	}
	return fmt.Errorf("incr %q: %w", key, err)
}

func (c *Client) checkIncr(key string, delta int64) error {
	if c.closed.Load() {
		return ErrClosed
	}
	if err := keyspace.Validate(key); err != nil {
		return err
	}
	if delta == 0 {
		return ErrZeroDelta
	}
	return nil
}

// pick maps a random value to [0, n) without modulo bias worth noticing
// (Lemire's multiply-shift on the high 32 bits).
func pick(r uint64, n int) int { return int((r >> 32) * uint64(n) >> 32) }

// Get returns the sum of key's sub-counters, from the summed-read cache when
// it is fresh enough.
func (c *Client) Get(ctx context.Context, key string) (Reading, error) {
	if c.closed.Load() {
		return Reading{}, ErrClosed
	}
	if err := keyspace.Validate(key); err != nil {
		return Reading{}, err
	}
	if r, ok := c.cached(key); ok {
		return c.withPending(r), nil
	}
	v, err, _ := c.flight.Do(key, func() (any, error) {
		if r, ok := c.cached(key); ok {
			return r, nil
		}
		m, err := c.fetch(ctx, []string{key})
		if err != nil {
			return Reading{}, err
		}
		return m[key], nil
	})
	if err != nil {
		return Reading{}, err
	}
	return c.withPending(v.(Reading)), nil
}

// withPending adds this process's unflushed delta of a buffered key to a
// reading (read-your-writes within a process). A delta is counted twice
// only for the instant between the cache applying a flush and the flusher
// seeing its reply.
func (c *Client) withPending(r Reading) Reading {
	if c.buf == nil {
		return r
	}
	if p := c.buf.Pending(r.Key); p != 0 {
		if v, err := sumInt64([]int64{r.Value, p}); err == nil {
			r.Value = v
		}
	}
	return r
}

// GetMulti returns the sums of many counters. Counters not in the cache are
// read together: one pipelined round per node for all of them. Every key is
// validated before anything is read.
func (c *Client) GetMulti(ctx context.Context, keys []string) (map[string]Reading, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	for _, k := range keys {
		if err := keyspace.Validate(k); err != nil {
			return nil, err
		}
	}
	out := make(map[string]Reading, len(keys))
	var missing []string
	for _, k := range keys {
		if _, dup := out[k]; dup {
			continue
		}
		if r, ok := c.cached(k); ok {
			out[k] = r
			continue
		}
		out[k] = Reading{}
		missing = append(missing, k)
	}
	if len(missing) == 0 {
		return out, nil
	}
	got, err := c.fetch(ctx, missing)
	if err != nil {
		return nil, err
	}
	for k, r := range got {
		out[k] = r
	}
	for k, r := range out {
		out[k] = c.withPending(r)
	}
	return out, nil
}

func (c *Client) cached(key string) (Reading, bool) {
	if c.cfg.NoReadCache {
		return Reading{}, false
	}
	v, n, at, ok := c.cache.get(key)
	if !ok {
		return Reading{}, false
	}
	age := c.now().Sub(at)
	ttl := c.cfg.ReadCacheTTL
	if len(c.cfg.namespaces) > 0 {
		ttl = c.cfg.namespace(key).ReadCacheTTL
	}
	if age >= ttl || age < 0 {
		return Reading{}, false
	}
	return Reading{Key: key, Value: v, Stale: age, N: n}, true
}

// fetch reads the sub-counters of keys in one Get (one round per node),
// sums them and refreshes the cache.
func (c *Client) fetch(ctx context.Context, keys []string) (map[string]Reading, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	var sub []string
	spans := make([]int, len(keys)+1)
	for i, k := range keys {
		_, read, err := c.Labels(ctx, k)
		if err != nil {
			return nil, fmt.Errorf("read %q: %w", k, err)
		}
		for _, l := range read {
			sub = append(sub, keyspace.SubKey(k, l))
		}
		spans[i+1] = len(sub)
	}
	at := c.now()
	vals, err := c.st.Get(ctx, sub)
	if err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	out := make(map[string]Reading, len(keys))
	for i, k := range keys {
		sum, err := sumInt64(vals[spans[i]:spans[i+1]])
		if err != nil {
			return nil, fmt.Errorf("read %q: %w", k, err)
		}
		n := spans[i+1] - spans[i]
		out[k] = Reading{Key: k, Value: sum, N: n}
		if !c.cfg.NoReadCache {
			c.cache.put(k, sum, n, at)
		}
	}
	return out, nil
}

func sumInt64(vs []int64) (int64, error) {
	var s int64
	for _, v := range vs {
		if (v > 0 && s > math.MaxInt64-v) || (v < 0 && s < math.MinInt64-v) {
			return 0, ErrOverflow
		}
		s += v
	}
	return s, nil
}

// Clear deletes every sub-counter of key. Clearing a counter that does not
// exist is not an error.
func (c *Client) Clear(ctx context.Context, key string) error {
	if c.closed.Load() {
		return ErrClosed
	}
	sub, err := c.SubKeys(ctx, key)
	if err != nil {
		return err
	}
	if c.buf != nil {
		// Send this process's buffered deltas first, so they do not land
		// after the clear. Other processes' buffers are theirs.
		if err := c.buf.Flush(ctx); err != nil {
			return fmt.Errorf("clear %q: %w", key, err)
		}
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	if err := c.st.Del(ctx, sub); err != nil {
		return fmt.Errorf("clear %q: %w", key, err)
	}
	c.cache.drop(key)
	if c.dur != nil {
		c.dur.cleared(key) // the next checkpoint saves the cleared value
	}
	return nil
}

// Flush sends this process's buffered deltas now and waits for the cache
// to acknowledge them.
func (c *Client) Flush(ctx context.Context) error {
	if c.buf == nil {
		return nil
	}
	return c.buf.Flush(ctx)
}

// BufferStats returns the gauges of the buffered deltas: unflushed delta,
// oldest unflushed age, flushes, errors, retries and writes sent. It is
// the zero value when no key is buffered.
func (c *Client) BufferStats() buffer.Stats {
	if c.buf == nil {
		return buffer.Stats{}
	}
	return c.buf.Stats()
}

// Close drains buffered deltas (until ctx ends: then it returns an error
// saying what was not flushed) and releases the Client. It is idempotent;
// later calls return the first call's result. Operations after Close
// return ErrClosed.
func (c *Client) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.closed.Store(true)
		c.closeErr = c.closeParts(ctx)
	})
	if c.closeErr != nil && !errors.Is(c.closeErr, store.ErrClosed) {
		return c.closeErr
	}
	return nil
}

// closeParts drains and closes, in order: the durable log (whose commits
// feed the buffer), the buffer (whose flushes feed the cache), the final
// checkpoint, and the store if the Client opened it.
func (c *Client) closeParts(ctx context.Context) error {
	var first error
	keep := func(err error) {
		if err != nil && first == nil {
			first = err
		}
	}
	if c.rebal != nil {
		c.rebal.close()
	}
	if c.auto != nil {
		keep(c.auto.Close(ctx))
	}
	if c.dur != nil {
		keep(c.dur.closeLog(ctx))
	}
	if c.buf != nil {
		keep(c.buf.Close(ctx))
	}
	if c.dur != nil {
		keep(c.dur.close(ctx))
	}
	if c.ownsStore {
		keep(c.st.Close())
	}
	return first
}

// ValidateKey reports whether key is a legal counter key: 1 to 512 bytes of
// valid UTF-8 without control characters or braces. The error wraps
// ErrInvalidKey.
func ValidateKey(key string) error { return keyspace.Validate(key) }
