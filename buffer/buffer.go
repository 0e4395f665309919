// Package buffer coalesces counter increments in process memory and flushes
// them to the sharded cache as one idempotent increment per key.
//
// # Accumulating
//
// Add adds a delta to the key's cell: an int64 updated with one atomic add.
// Cells live in 64 shards chosen by a seeded hash of the key (wyhash's
// mixing, inlined: for short keys about a third of the cost of
// hash/maphash); each shard is an open-addressing table whose slots are
// read without locks, so an Add to a key that already has a cell costs one
// hash, one probe and one atomic add: no lock, no allocation. A new key
// takes the shard's mutex to insert its cell. The shards only spread
// new-key inserts.
//
// One hot key added to from several cores at once would make the cores
// take turns owning its counter's cache line. So a cell whose delta at a
// cut is 2^14 or more, in a process with GOMAXPROCS above 1, gets lanes:
// one padded counter per P (GOMAXPROCS rounded up to a power of two, at
// most 64), and a small Add goes to the lane of the P it runs on, so each
// core keeps writing its own cache line. (A lane picked at random instead
// was slower than one shared counter: every line then moved between the
// cores about every other Add.) A cut swaps every lane
// with zero and adds them up; a cell with lanes that gains nothing for a
// cut gives them back (they are swapped with the dead mark, and an Add
// that finds a dead lane retries on the locked path) and retires at its
// next quiet cut. At most 1,024 cells have lanes. The bound stays exact:
// each lane holds at most ±2^44, the cell's own counter takes what does
// not fit a lane within ±(MaxDelta − 64·2^44), and a delta that does not
// fit that either folds the lanes back into the cell's counter (under the
// locks that cuts take) and is checked against ±MaxDelta there.
//
// A cell keeps its own copy of the key, and Add keeps no
// reference to the string it is passed, so a key built for the call
// ("likes:" + id) does not escape to the heap: the caller's concatenation
// can stay on its stack.
//
// # Cutting and flushing
//
// A flush (every Config.Interval, early when Config.MaxKeys keys have gained
// a delta, on Flush and on Close) first cuts: it atomically swaps each
// cell's delta with zero and turns every non-zero delta into an op. Each op
// gets ONE label, chosen at random from Config.Labels(key) so buffering
// combines with sub-counters. Ops are sent with the sink's batch call, at
// most Config.BatchSize per call, each call with its own
// Config.BatchTimeout, as increments of keyspace.SubKey(key, label).
//
// # Hot and cold keys
//
// A cold key's cell also counts its Adds (on the cache line its delta is
// on already). At a cut, a cold key with at least Config.HotAt Adds since
// the previous cut turns hot; a hot key stays hot while the delta cut
// from it is at least half of HotAt in magnitude (for increments of 1, the
// count: a hot key's Add costs one atomic add, as before), and a cell with
// lanes is hot. A hot
// key's op is exactly-once by writer sequence: the buffer has a writer id
// (96 random bits from crypto/rand) and numbers its hot ops 1, 2, 3, ...;
// the sink applies an op only if its number is above the last one it
// recorded for that writer in the sub-counter's hash
// keyspace.SeqKey(key, label), and records it in the same step. A key has
// at most one op in flight (a second op, which Close may cut, waits for
// the first), so a writer's ops reach each sub-counter in order, and the
// idempotency state is one hash field per writer and hot sub-counter,
// kept for Config.TokenTTL after its last write, however many flushes
// there were. A cold
// key gets about one Add per interval, so coalescing saves it nothing: its
// op is one plain INCRBY, with no script and no extra key, as an
// unbuffered increment would be. A cold op that failed before it was sent
// is retried like any other; one that was sent and got no reply
// (store.ErrNoReply) may have been applied, so it is dropped, counted in
// Stats.ColdDropped and Stats.ColdDroppedDelta and reported, never sent
// twice. A cold op whose sub-counter takes a deadline (Config.ExpireAt)
// is sequenced, since a plain INCRBY cannot set it in the same step.
//
// A failed op keeps its label, sequence number and delta and is retried,
// with a backoff that starts at Interval and doubles up to
// Config.MaxBackoff, until the sink acknowledges it (a cold op that got no
// reply excepted, see above). The sink applies a sequence number at most
// once, so a retry of a hot op after a timeout or a lost reply never
// double-counts: a result
// with Applied false and no error means an earlier attempt was applied, and
// counts as success. While a key has an op in flight, its new deltas keep
// accumulating in its cell and are cut only after the op is acknowledged,
// so a key holds at most one op and one cell.
//
// An op the sink refuses with store.ErrOverflow can never land: it is
// dropped and counted (Stats.Dropped). Ops rejected with
// store.ErrNotInteger are not dropped and not re-routed: they stay pending
// with their sequence number, are retried with backoff, counted in
// Stats.PermanentErrors and reported to Config.OnError on every attempt,
// and the key's later deltas wait behind them, visible in Stats.Unflushed
// and Stats.OldestUnflushed, until the sub-counter accepts the delta.
//
// # Retiring and closing
//
// A cell that gained nothing for a whole flush interval is retired: the
// flusher replaces its zero with a dead mark (one compare-and-swap) and
// drops it from the table. An Add racing with that sees the dead mark in
// the value its atomic add returns, undoes its add and retries on the
// locked path, which creates a fresh cell. Close marks every cell dead in
// the same way, swapping out its last delta, so an Add either lands before
// the swap (and is flushed) or sees the mark and returns ErrClosed. Close
// then retries the remaining ops until they are acknowledged or its context
// ends; in that case it returns ErrUnflushed saying how much was not
// written. Nothing is ever kept in a lossy structure.
//
// # Read-your-writes
//
// Pending(key) is this process's delta for key that the sink has not
// acknowledged (accumulating plus in flight). Call it before reading the
// cache: a delta is then counted at least once, and twice only during the
// moment between the sink applying an op and the flusher seeing the reply.
package buffer

import (
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// Named errors. Test with errors.Is.
var (
	// ErrOverflow: the Add would take the key's local delta past ±MaxDelta;
	// nothing was changed. It wraps store.ErrOverflow.
	ErrOverflow = fmt.Errorf("%w: local delta would pass ±store.MaxValue (2^53-1)", store.ErrOverflow)
	// ErrBackpressure: Config.MaxPendingKeys entries are held (usually
	// because the sink is failing), so a new key cannot be buffered.
	// Nothing was changed; Adds to keys already buffered still succeed.
	ErrBackpressure = errors.New("hotcount: buffer full, flushes are behind")
	// ErrClosed: the buffer was closed; nothing was changed.
	ErrClosed = errors.New("hotcount: buffer closed")
	// ErrUnflushed: Flush or Close could not write every delta; the error
	// says how much is still held. The deltas are kept and retried.
	ErrUnflushed = errors.New("hotcount: deltas not flushed")
	// ErrNoLabels: Config.Labels returned no label for a key; its delta is
	// kept and retried at the next flush.
	ErrNoLabels = errors.New("hotcount: no active label for key")
)

// Sink receives flushed increments. store.Store implements it.
type Sink interface {
	// IncrMulti applies ops; an op with a TokenKey is applied at most once
	// per token within its TTL, and the token is checked before anything
	// else, so a retry of an applied op reports Applied false with no
	// error. The results match ops; err means nothing was attempted.
	IncrMulti(ctx context.Context, ops []store.IncrOp) ([]store.IncrResult, error)
}

// Buffer holds process-local deltas and flushes them to a Sink. It is safe
// for concurrent use. Create it with New and stop it with Close.
type Buffer struct {
	sink    Sink
	cfg     Config
	seed    uint64 // of hashString
	shards  [numShards]shard
	cells   atomic.Int64 // cells in the tables
	spread  atomic.Int64 // cells with lanes
	nops    atomic.Int64 // ops not yet acknowledged
	newKeys atomic.Int64 // cells created since the last cut
	closed  atomic.Bool
	kick    chan struct{}

	// flushMu makes flushes exclusive; its holder owns seq and the label,
	// sequence and retry fields of every op.
	flushMu sync.Mutex
	writer  string // this buffer's writer id, for sequenced flushes
	seq     uint64 // the last sequence number given out
	// opsMu guards ops, and makes a cut (cell → op) atomic for Pending.
	opsMu sync.RWMutex
	ops   map[string][]*op

	stats counters

	stop       chan struct{}
	done       chan struct{}
	cancelLoop context.CancelFunc
	closeOnce  sync.Once
}

// New returns a Buffer that flushes to sink, and starts its flusher.
func New(sink Sink, cfg Config) (*Buffer, error) {
	if sink == nil {
		return nil, fmt.Errorf("%w: sink is nil", ErrConfig)
	}
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	b := &Buffer{
		sink:   sink,
		cfg:    cfg,
		writer: newWriterID(),
		seed:   rand.Uint64(),
		kick:   make(chan struct{}, 1),
		ops:    make(map[string][]*op),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	for i := range b.shards {
		b.shards[i].tab.Store(newTable(minTableSize))
	}
	ctx, cancel := context.WithCancel(context.Background())
	b.cancelLoop = cancel
	go b.run(ctx, cfg.Clock.NewTicker(cfg.Interval))
	return b, nil
}

// Add adds delta to key's local delta. It returns ErrOverflow (nothing
// changed) if delta or the key's delta would pass ±MaxDelta, ErrBackpressure if key is new and
// the buffer is full, ErrClosed after Close, and an error wrapping
// keyspace.ErrInvalidKey for an invalid new key. Adding to a key that is
// already buffered takes no lock and does not allocate. Add keeps no
// reference to key (a new cell keeps a copy), so a key built for the call,
// "likes:" + id, can stay on the caller's stack.
func (b *Buffer) Add(key string, delta int64) error {
	h := hashString(b.seed, key)
	c := b.shards[h>>(64-shardBits)].tab.Load().find(h, key)
	if c != nil && uint64(delta+fastLimit) < 2*fastLimit {
		if ls := c.lanes.Load(); ls != nil {
			return b.addLane(c, ls, delta)
		}
		// One range check covers both the bound and the dead mark: a dead
		// cell's value lies far below -MaxDelta, so nv+MaxDelta is negative
		// and, as a uint64, far above 2*MaxDelta.
		nv := c.v.Add(delta)
		if uint64(nv+MaxDelta) <= 2*MaxDelta {
			if !c.hot.Load() {
				c.adds.Add(1) // a cold key's Adds are counted
			}
			return nil
		}
		return b.addFixup(c, delta, nv)
	}
	return b.addMiss(c, h, key, delta)
}

// addLane adds a small delta to the lane of the P the caller runs on.
// A dead lane (the cell was closed or lost its lanes) sends the
// add to the locked path; a lane at its limit sends it to the cell's own
// value.
func (b *Buffer) addLane(c *cell, ls *lanes, delta int64) error {
	p := ls.pick()
	nv := p.Add(delta)
	if uint64(nv+laneLimit) <= 2*laneLimit {
		return nil
	}
	if before := p.Add(-delta) + delta; before < deadZone {
		if nv-delta >= deadZone {
			// The lane was swapped out between our add and the undo:
			// the delta was taken with the rest.
			return nil
		}
		return b.addSlow(c.hash, c.key, delta)
	}
	return b.addBig(c, delta)
}

// addMiss is Add for a key without a cell in the table it read, or with
// a delta too large for the fast path. A delta past ±MaxDelta is refused
// whatever the key holds, so that whether it fits does not depend on the
// deltas buffered (or flushed) before it.
func (b *Buffer) addMiss(c *cell, h uint64, key string, delta int64) error {
	if delta > MaxDelta || delta < -MaxDelta {
		return ErrOverflow
	}
	if c == nil {
		return b.addLocked(&b.shards[h>>(64-shardBits)], h, key, delta)
	}
	return b.addBig(c, delta)
}

// addFixup finishes a small add whose atomic add returned nv: it undoes
// an add to a retired cell or past the bound.
func (b *Buffer) addFixup(c *cell, delta, nv int64) error {
	if nv-delta < deadZone { // retired or closed: take our add back
		c.v.Add(-delta)
		return b.addSlow(c.hash, c.key, delta)
	}
	if nv > MaxDelta || nv < -MaxDelta {
		if before := c.v.Add(-delta) + delta; before < deadZone {
			// Close swapped the cell out between our add and the undo:
			// the delta was taken with the rest and will be flushed.
			return nil
		}
		return ErrOverflow
	}
	return nil
}

// addBig adds a delta too large for the fast path, or one that did not
// fit a lane.
func (b *Buffer) addBig(c *cell, delta int64) error {
	dead, err := b.addCAS(c, delta)
	if err == errSpill {
		b.spill(c)
	} else if !dead {
		return err
	}
	return b.addSlow(c.hash, c.key, delta)
}

// addSlow adds after a retired cell was found: under the lock it finds
// or creates the live cell.
func (b *Buffer) addSlow(h uint64, key string, delta int64) error {
	return b.addLocked(&b.shards[h>>(64-shardBits)], h, key, delta)
}

// addCAS adds delta to c with a compare-and-swap loop, so the bound check
// is exact. It reports dead, changing nothing, if c was retired, and
// errSpill if c has lanes and delta does not fit the share of the bound
// they leave to v: the bound is exact once spill has folded them in.
func (b *Buffer) addCAS(c *cell, delta int64) (dead bool, err error) {
	for {
		old := c.v.Load()
		if old < deadZone {
			return true, nil
		}
		if c.lanes.Load() != nil {
			if overflows(old, delta, MaxDelta-laneReserve) {
				return false, errSpill
			}
		} else if overflows(old, delta, MaxDelta) {
			return false, ErrOverflow
		}
		if c.v.CompareAndSwap(old, old+delta) {
			if !c.hot.Load() {
				c.adds.Add(1)
			}
			return false, nil
		}
	}
}

// errSpill is addCAS's answer for a delta that does not fit beside a
// cell's lanes.
var errSpill = errors.New("spill lanes")

// overflows reports whether old+delta passes ±limit. old may exceed the
// bound transiently by far less than 2^60, so nothing here wraps.
func overflows(old, delta, limit int64) bool {
	if delta > 0 {
		return old > limit-delta
	}
	return old < -limit-delta
}

// spill takes c's lanes away and adds what they hold to c.v, so that
// c.v holds the cell's whole delta again. Adds racing with it find a dead
// lane and retry on the locked path. opsMu keeps Pending and Stats from
// seeing a delta in neither place.
func (b *Buffer) spill(c *cell) {
	b.opsMu.Lock()
	defer b.opsMu.Unlock()
	sh := &b.shards[c.hash>>(64-shardBits)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	b.unspread(c)
}

// unspread folds c's lanes, if any, into c.v; the caller holds opsMu and
// c's shard lock.
func (b *Buffer) unspread(c *cell) { c.v.Add(b.dropLanes(c)) }

// dropLanes takes c's lanes away, marking them dead, and returns what
// they held; the caller holds opsMu and c's shard lock.
func (b *Buffer) dropLanes(c *cell) int64 {
	ls := c.lanes.Load()
	if ls == nil {
		return 0
	}
	c.lanes.Store(nil)
	b.spread.Add(-1)
	return ls.swap(deadMark)
}

// addLocked is the path for a key without a live cell: under the shard
// lock, it finds or creates the cell.
func (b *Buffer) addLocked(sh *shard, h uint64, key string, delta int64) error {
	for {
		c, err := b.addLockedOnce(sh, h, key, delta)
		if err != errSpill {
			return err
		}
		b.spill(c)
	}
}

// addLockedOnce is one attempt of addLocked; it returns errSpill and the
// cell whose lanes must be folded first.
func (b *Buffer) addLockedOnce(sh *shard, h uint64, key string, delta int64) (*cell, error) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if b.closed.Load() {
		return nil, ErrClosed
	}
	if c := sh.tab.Load().find(h, key); c != nil {
		// Cells in the current table are live while we hold the lock.
		_, err := b.addCAS(c, delta)
		return c, err
	}
	if err := keyspace.Validate(key); err != nil {
		return nil, err
	}
	if delta == 0 {
		return nil, nil
	}
	if b.cells.Load()+b.nops.Load() >= int64(b.cfg.MaxPendingKeys) {
		b.stats.backpressure.Add(1)
		b.kickFlush()
		return nil, ErrBackpressure
	}
	c := &cell{key: strings.Clone(key), hash: h}
	c.v.Store(delta)
	c.adds.Store(1)
	c.since.Store(b.cfg.Clock.Now().UnixNano())
	sh.insert(c)
	b.cells.Add(1)
	if b.newKeys.Add(1) >= int64(b.cfg.MaxKeys) {
		b.kickFlush()
	}
	return nil, nil
}

// kickFlush asks the flusher to flush now, without waiting.
func (b *Buffer) kickFlush() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

// Pending returns this process's delta for key that the sink has not yet
// acknowledged: the accumulating delta plus ops in flight.
func (b *Buffer) Pending(key string) int64 {
	h := hashString(b.seed, key)
	sh := &b.shards[h>>(64-shardBits)]
	b.opsMu.RLock()
	defer b.opsMu.RUnlock()
	var sum int64
	if c := sh.tab.Load().find(h, key); c != nil {
		if v := c.v.Load(); v >= deadZone {
			sum = v
			if ls := c.lanes.Load(); ls != nil {
				sum += ls.sum()
			}
		}
	}
	for _, o := range b.ops[key] {
		sum += o.delta
	}
	return sum
}

// newWriterID returns 96 random bits in hex from crypto/rand: a writer id
// must differ from every other process's, whatever Config.Rand returns.
func newWriterID() string {
	var raw [12]byte
	_, _ = crand.Read(raw[:]) // never fails (crypto/rand panics instead)
	return hex.EncodeToString(raw[:])
}

// Direct counts one increment of key that the caller writes to the cache
// itself, at once, and reports whether it may: true when key is cold and
// this buffer holds nothing of it (no delta, no op), so that the value the
// cache answers is not short of a buffered delta. It returns false, and
// counts nothing, when the key is hot or holds a delta: the caller Adds
// it instead. A key counted by Direct turns hot, as one counted by Add,
// at Config.HotAt increments in one interval; from then on Direct answers
// false. After Close, or when the buffer is at Config.MaxPendingKeys, it
// answers true without counting.
func (b *Buffer) Direct(key string) bool {
	h := hashString(b.seed, key)
	sh := &b.shards[h>>(64-shardBits)]
	if c := sh.tab.Load().find(h, key); c != nil {
		if c.hot.Load() || c.lanes.Load() != nil || c.v.Load() != 0 {
			return false
		}
	}
	b.opsMu.RLock()
	pending := len(b.ops[key]) > 0
	b.opsMu.RUnlock()
	if pending {
		return false
	}
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if c := sh.tab.Load().find(h, key); c != nil {
		// Live while we hold the lock.
		if c.hot.Load() || c.lanes.Load() != nil || c.v.Load() != 0 {
			return false
		}
		c.adds.Add(1)
		return true
	}
	if b.closed.Load() || keyspace.Validate(key) != nil || b.cells.Load()+b.nops.Load() >= int64(b.cfg.MaxPendingKeys) {
		return true
	}
	c := &cell{key: strings.Clone(key), hash: h}
	c.adds.Store(1)
	c.since.Store(b.cfg.Clock.Now().UnixNano())
	sh.insert(c)
	b.cells.Add(1)
	return true
}
