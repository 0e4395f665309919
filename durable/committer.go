package durable

import (
	"context"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/clock"

	"github.com/hotcount/hotcount/store"
)

// Committer defaults, used when the CommitterConfig field is zero.
const (
	DefaultMaxBatch      = 2048
	DefaultMaxDelay      = 2 * time.Millisecond
	DefaultCommitTimeout = 10 * time.Second
	DefaultMinShare      = 128
	// DefaultMaxInFlight is the number of batches committing at once
	// when the Appender does not implement Concurrent.
	DefaultMaxInFlight = 1
)

// CommitterConfig configures a Committer. The zero value is the documented
// default of every field.
type CommitterConfig struct {
	// MaxBatch is the most events in one batch (default DefaultMaxBatch).
	MaxBatch int
	// MaxDelay is how long after the first event of a batch arrived the
	// batch is cut, if it has not filled (default DefaultMaxDelay).
	MaxDelay time.Duration
	// CommitTimeout bounds each batch's AppendEvents call (default
	// DefaultCommitTimeout).
	CommitTimeout time.Duration
	// FixedDelay makes every partial batch wait out MaxDelay. By default a
	// partial batch is also cut, when a commit slot is free, as soon as it
	// holds its share of the callers: the most events outstanding lately
	// (accepted, not yet committed) divided by MaxInFlight. Under a steady
	// closed-loop load of N callers that keeps MaxInFlight batches of about
	// N/MaxInFlight in flight, so one commits while the next is written.
	// A share is never below MinShare events (or all the callers, when
	// fewer): a light load is not split into small batches whose fixed cost
	// outweighs what their overlap gains.
	FixedDelay bool
	// MinShare is the least share of the callers at which a partial batch
	// is cut early (default DefaultMinShare; see FixedDelay). Under a
	// closed-loop load of N callers, about min(MaxInFlight, N/MinShare)
	// batches are in flight.
	MinShare int
	// MaxInFlight is how many batches may be committing at once. The
	// default is the Appender's AppendConcurrency when it implements
	// Concurrent (PostgreSQL: overlapping commits share WAL flushes), else
	// DefaultMaxInFlight, 1 (a single-writer backend gains nothing from
	// more).
	MaxInFlight int
	// Clock is the time source (default the system clock).
	Clock clock.Clock
	// OnBatch, when set, is told how long each batch's commit took and how
	// many events it held (for a latency histogram). It must be cheap.
	OnBatch func(d time.Duration, events int)
}

// Concurrent is implemented by an Appender that gains from overlapping
// AppendEvents calls.
type Concurrent interface {
	// AppendConcurrency is how many AppendEvents calls should run at once.
	AppendConcurrency() int
}

func (c CommitterConfig) withDefaults(log Appender) (CommitterConfig, error) {
	if c.MaxBatch < 0 || c.MaxDelay < 0 || c.CommitTimeout < 0 || c.MaxInFlight < 0 || c.MinShare < 0 {
		return c, fmt.Errorf("%w: negative committer setting %+v", ErrInvalidConfig, c)
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = DefaultMaxBatch
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = DefaultMaxDelay
	}
	if c.CommitTimeout == 0 {
		c.CommitTimeout = DefaultCommitTimeout
	}
	if c.MinShare == 0 {
		c.MinShare = DefaultMinShare
	}
	if c.MaxInFlight == 0 {
		c.MaxInFlight = DefaultMaxInFlight
		if cc, ok := log.(Concurrent); ok && cc.AppendConcurrency() > 1 {
			c.MaxInFlight = cc.AppendConcurrency()
		}
	}
	if c.Clock == nil {
		c.Clock = clock.Real()
	}
	return c, nil
}

// batch is a group of events committed together. Its waiters block on
// done; res and err are written before done is closed.
type batch struct {
	events []Event
	first  time.Time // arrival of events[0]
	res    []Result
	err    error
	done   chan struct{}
}

// Committer group-commits events: many goroutines Append, one owning
// goroutine writes whole batches with Appender.AppendEvents. It does not
// own the Appender; close the backend after the Committer.
type Committer struct {
	log Appender
	cfg CommitterConfig

	mu      sync.Mutex
	cur     *batch   // filling; nil when empty
	ready   []*batch // sealed at MaxBatch, oldest first
	closing bool
	// spare holds the emptied event slices of committed batches, for the
	// next batches (at most MaxInFlight+1): a batch's events are read only
	// while it commits, and allocating them afresh for every batch was
	// about a fifth of the bytes the durable path allocated.
	spare [][]Event

	// outstanding counts events accepted and not yet committed; peak is
	// its recent maximum, halving every peakHalfLife (as of peakAt); target
	// is the size at which a partial batch is cut, peak/MaxInFlight but at
	// least min(peak, MinShare).
	outstanding int
	peak        float64
	peakAt      time.Time
	target      int

	wake  chan struct{} // cap 1: a batch started, caught up or sealed, or Close
	slots chan struct{} // cap MaxInFlight: one token per committing batch
	done  chan struct{} // closed when the owner has drained and exited

	batches, events, failed, rejected atomic.Uint64
}

// CommitterStats are a Committer's running totals.
type CommitterStats struct {
	// Batches is the number of AppendEvents calls made.
	Batches uint64
	// Events is the number of events in them (duplicates included).
	Events uint64
	// Failed is the number of events whose batch returned an error.
	Failed uint64
	// Rejected is the number of events that failed on their own
	// (Result.Err: overflow, id conflict, invalid).
	Rejected uint64
}

// Stats returns the running totals.
func (c *Committer) Stats() CommitterStats {
	return CommitterStats{Batches: c.batches.Load(), Events: c.events.Load(),
		Failed: c.failed.Load(), Rejected: c.rejected.Load()}
}

// NewCommitter starts a committer writing to log.
func NewCommitter(log Appender, cfg CommitterConfig) (*Committer, error) {
	if log == nil {
		return nil, fmt.Errorf("%w: nil Appender", ErrInvalidConfig)
	}
	cfg, err := cfg.withDefaults(log)
	if err != nil {
		return nil, err
	}
	c := &Committer{
		log:   log,
		cfg:   cfg,
		wake:  make(chan struct{}, 1),
		slots: make(chan struct{}, cfg.MaxInFlight),
		done:  make(chan struct{}),
	}
	go c.run()
	return c, nil
}

// Append adds e to the current batch and blocks until that batch has
// committed, and returns e's own result: dup reports that e.ID was seen
// before on e.Key (within the dedup window or earlier in the batch) and was
// not counted again; err is e's own failure (ErrIDConflict,
// store.ErrOverflow), which does not affect the other events of the batch,
// or the failure of the whole batch. When ctx ends first, Append returns
// its error but the event may still commit: retry with the same ID, which
// is safe. After Close, Append returns store.ErrClosed.
func (c *Committer) Append(ctx context.Context, e Event) (dup bool, err error) {
	if !ValidKey(e.Key) || !ValidKey(e.ID) {
		return false, fmt.Errorf("%w: key %q id %q", ErrInvalidEvent, e.Key, e.ID)
	}
	if err := ctx.Err(); err != nil {
		return false, err
	}
	c.mu.Lock()
	if c.closing {
		c.mu.Unlock()
		return false, store.ErrClosed
	}
	b := c.cur
	if b == nil {
		b = &batch{events: c.eventSlice(), first: c.cfg.Clock.Now(), done: make(chan struct{})}
		c.cur = b
		c.signal()
	}
	i := len(b.events)
	b.events = append(b.events, e)
	c.outstanding++
	c.peak = max(c.peak, float64(c.outstanding))
	if len(b.events) >= c.cfg.MaxBatch {
		c.ready = append(c.ready, b)
		c.cur = nil
		c.signal()
	} else if len(b.events) == c.target {
		c.signal()
	}
	c.mu.Unlock()

	if done := ctx.Done(); done == nil {
		<-b.done // a context that never ends: a plain receive is cheaper than select
	} else {
		select {
		case <-b.done:
		case <-done:
			return false, ctx.Err()
		}
	}
	if b.err != nil {
		return false, b.err
	}
	return b.res[i].Dup, b.res[i].Err
}

// eventSlice returns an empty slice for a new batch's events, with room
// for the size at which a batch is cut lately, so that a batch under load
// does not grow by copying: a spare one when it is large enough. The
// caller holds mu.
func (c *Committer) eventSlice() []Event {
	want := min(c.cfg.MaxBatch, max(64, c.target))
	if n := len(c.spare); n > 0 {
		evs := c.spare[n-1]
		c.spare[n-1] = nil
		c.spare = c.spare[:n-1]
		if cap(evs) >= want {
			return evs
		}
	}
	return make([]Event, 0, want)
}

// signal wakes the owner; the caller holds mu.
func (c *Committer) signal() {
	select {
	case c.wake <- struct{}{}:
	default:
	}
}

// Close stops accepting events, commits every accepted one and waits for
// that (or ctx). It is idempotent; a later call waits again.
func (c *Committer) Close(ctx context.Context) error {
	c.mu.Lock()
	c.closing = true
	c.signal()
	c.mu.Unlock()
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// run is the owning goroutine: it takes a commit slot, then picks the next
// batch, waiting until MaxDelay after a partial batch's first event, and
// commits it in the background. While every slot is busy the current batch
// keeps filling, so batches grow with load. On Close it commits what is
// left and waits for every commit.
func (c *Committer) run() {
	defer close(c.done)
	defer func() { // wait for the commits in flight
		for range cap(c.slots) {
			c.slots <- struct{}{}
		}
	}()
	for {
		c.slots <- struct{}{} // a free slot; released when the commit ends
		if !c.next() {
			<-c.slots
			return
		}
	}
}

// peakHalfLife is how fast the estimate of the callers in flight forgets
// a load that went away.
const peakHalfLife = time.Second

// next waits for the next batch and starts its commit; it returns false
// when the committer is closing and has nothing left.
func (c *Committer) next() bool {
	for {
		c.mu.Lock()
		var b *batch
		var wait time.Duration
		switch {
		case len(c.ready) > 0:
			b = c.ready[0]
			c.ready[0] = nil
			c.ready = c.ready[1:]
		case c.cur != nil:
			now := c.cfg.Clock.Now()
			c.updateTarget(now)
			wait = c.cur.first.Add(c.cfg.MaxDelay).Sub(now)
			if wait <= 0 || c.closing || (!c.cfg.FixedDelay && len(c.cur.events) >= c.target) {
				b, c.cur = c.cur, nil
			}
		case c.closing:
			c.mu.Unlock()
			return false
		}
		c.mu.Unlock()

		if b != nil {
			go c.commit(b)
			return true
		}
		if wait > 0 {
			select {
			case <-c.cfg.Clock.After(wait):
			case <-c.wake:
			}
			continue
		}
		<-c.wake
	}
}

// updateTarget decays the peak to now and sets the target batch size;
// the caller holds mu.
func (c *Committer) updateTarget(now time.Time) {
	if dt := now.Sub(c.peakAt); dt > 0 {
		c.peak *= math.Exp2(-float64(dt) / float64(peakHalfLife))
		c.peakAt = now
	}
	c.peak = max(c.peak, float64(c.outstanding))
	peak := int(math.Ceil(c.peak))
	share := int(math.Ceil(c.peak / float64(c.cfg.MaxInFlight)))
	c.target = max(1, share, min(peak, c.cfg.MinShare))
}

// commit writes one batch, releases its waiters and frees its slot.
func (c *Committer) commit(b *batch) {
	defer func() { <-c.slots }()
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.CommitTimeout)
	start := c.cfg.Clock.Now()
	res, err := c.log.AppendEvents(ctx, b.events)
	cancel()
	if c.cfg.OnBatch != nil {
		c.cfg.OnBatch(c.cfg.Clock.Now().Sub(start), len(b.events))
	}
	if err == nil && len(res) != len(b.events) {
		err = fmt.Errorf("%w: durable append returned %d results for %d events",
			ErrBackend, len(res), len(b.events))
	}
	b.res, b.err = res, err
	n := len(b.events)
	// The waiters read only res and err: the events go back for reuse,
	// cleared so that they do not hold their strings.
	clear(b.events)
	evs := b.events[:0]
	b.events = nil
	c.mu.Lock()
	c.outstanding -= n
	if len(c.spare) <= c.cfg.MaxInFlight {
		c.spare = append(c.spare, evs)
	}
	c.mu.Unlock()
	c.batches.Add(1)
	c.events.Add(uint64(n))
	if err != nil {
		c.failed.Add(uint64(n))
	} else {
		var bad uint64
		for _, r := range res {
			if r.Err != nil {
				bad++
			}
		}
		c.rejected.Add(bad)
	}
	close(b.done)
}
