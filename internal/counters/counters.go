// Package counters runs the counter operations that take more than one
// internal service: an increment that goes to the durable event log, the
// buffers or the cache and is marked for shipping to the peer regions; a
// clear, expiry or persist that changes the cache view, records itself in
// the durable store and reaches every region; an exact read from the
// durable store with the peers' parts added; and the glue that starts the
// regions service over the engine and the durable store.
//
// Ops holds the engine, the durability service (nil without a durable
// store) and the regions service (nil without a region). It validates
// nothing: the caller checks keys, deltas and closing before it calls in.
package counters

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/internal/durability"
	"github.com/hotcount/hotcount/internal/engine"
	"github.com/hotcount/hotcount/internal/ns"
	"github.com/hotcount/hotcount/internal/regions"
	"github.com/hotcount/hotcount/store"
)

// Config is what Ops works over.
type Config struct {
	// Engine is the data path (required).
	Engine *engine.Engine
	// Service is the durability service; nil without a durable store.
	Service *durability.Service
	// Backend is the durable store; nil without one.
	Backend durable.Backend
	// Namespaces gives each key its settings (required).
	Namespaces *ns.Table
	// Region is this process's region; empty without regions.
	Region string
	// Clock is the time source (required).
	Clock clock.Clock
}

// Ops runs the operations of package counters.
type Ops struct {
	eng    *engine.Engine
	dur    *durability.Service
	store  durable.Backend
	table  *ns.Table
	region string
	clock  clock.Clock
	reg    *regions.Service
}

// New returns the Ops over cfg. It starts nothing.
func New(cfg Config) *Ops {
	return &Ops{eng: cfg.Engine, dur: cfg.Service, store: cfg.Backend, table: cfg.Namespaces,
		region: cfg.Region, clock: cfg.Clock}
}

// Incr adds delta to key as the key's namespace says: to the durable
// event log (with the idempotency id, when not empty), to the buffers, or
// to the cache at once; a written counter is marked for shipping. An id
// for a key not in durable mode gives durability.ErrNotDurable.
func (o *Ops) Incr(ctx context.Context, key string, delta int64, id string) error {
	n := o.table.Lookup(key)
	var err error
	switch {
	case n.Mode == ns.ModeDurable:
		err = o.dur.Commit(ctx, n, strings.Clone(key), delta, id)
	case id != "":
		return fmt.Errorf("incr %q: %w", strings.Clone(key), durability.ErrNotDurable)
	case n.Buffered:
		if o.dur != nil {
			o.dur.Touch(n, strings.Clone(key))
		}
		err = o.eng.Add(n, key, delta)
	default:
		var w durability.Write
		if o.dur != nil {
			w = o.dur.TouchWrite(n, strings.Clone(key))
		}
		err = o.eng.Incr(ctx, key, delta)
		if o.dur != nil {
			o.dur.Wrote(w, err == nil)
		}
	}
	if o.reg != nil && err == nil {
		// A buffered delta reaches the cache a flush later: its counter
		// is shipped again then.
		o.reg.Mark(key, n.Buffered && n.Mode != ns.ModeDurable)
	}
	return err
}

// IncrValue is Incr, except that an increment of a cold counter of a
// buffered fast-mode namespace is written at once as one INCRBY and
// returns the value the cache answered (exact: the counter is known to be
// cold). An INCRBY that could not be sent is buffered instead.
func (o *Ops) IncrValue(ctx context.Context, key string, delta int64) (value int64, exact bool, err error) {
	n := o.table.Lookup(key)
	if n.Mode != ns.ModeFast || !n.Buffered {
		return 0, false, o.Incr(ctx, key, delta, "")
	}
	var w durability.Write
	if o.dur != nil {
		w = o.dur.TouchWrite(n, strings.Clone(key))
	}
	v, exact, ok, err := o.eng.IncrDirect(ctx, n, key, delta)
	if o.dur != nil {
		// Buffered (not ok), the delta lands a flush later: not a write
		// acknowledged here.
		o.dur.Wrote(w, ok && err == nil)
	}
	switch {
	case !ok:
	case err == nil:
		return v, exact, nil
	case errors.Is(err, store.ErrUnavailable) && !errors.Is(err, store.ErrNoReply):
		// Never written: buffered and retried, as any buffered increment.
	default:
		return 0, false, err
	}
	return 0, false, o.eng.Add(n, key, delta)
}

// Get is the engine's Get (fresh: GetFresh) made global.
func (o *Ops) Get(ctx context.Context, key string, fresh bool) (engine.Reading, error) {
	get := o.eng.Get
	if fresh {
		get = o.eng.GetFresh
	}
	r, err := get(ctx, key)
	if err == nil {
		err = o.Global(ctx, []*engine.Reading{&r}, fresh)
	}
	return r, err
}

// GetMulti is the engine's GetMulti made global.
func (o *Ops) GetMulti(ctx context.Context, keys []string) (map[string]engine.Reading, error) {
	m, err := o.eng.GetMulti(ctx, keys)
	if err != nil || o.reg == nil {
		return m, err
	}
	rs := make([]*engine.Reading, 0, len(m))
	vals := make([]engine.Reading, 0, len(m))
	for _, r := range m {
		vals = append(vals, r)
	}
	for i := range vals {
		rs = append(rs, &vals[i])
	}
	if err := o.Global(ctx, rs, false); err != nil {
		return nil, err
	}
	for _, r := range vals {
		m[r.Key] = r
	}
	return m, nil
}

// Global turns local readings into global ones: each gets every peer's
// contribution as last received, less the fences of clears.
func (o *Ops) Global(ctx context.Context, rs []*engine.Reading, fresh bool) error {
	if o.reg == nil || len(rs) == 0 {
		return nil
	}
	keys := make([]string, len(rs))
	for i, r := range rs {
		keys[i] = r.Key
	}
	states, err := o.reg.Read(ctx, keys, fresh)
	if err != nil {
		return err
	}
	now := o.clock.Now()
	for i, r := range rs {
		r.Value, r.Regions = states[i].Global(o.region, r.Value, now)
	}
	return nil
}

// SubKeys returns the cache keys of every sub-counter of key that may
// hold a value (the read set). It creates no state.
func (o *Ops) SubKeys(ctx context.Context, key string) ([]string, error) {
	reads, _, _, err := o.eng.Read(ctx, []string{key}, nil)
	if err != nil {
		return nil, err
	}
	return reads[0].Subs, nil
}

// GetExact returns the exact value of a durable-mode counter from the
// durable store, with the peers' parts kept there; N comes from the cache
// beside it (NUnknown when the cache does not answer).
func (o *Ops) GetExact(ctx context.Context, key string) (engine.Reading, error) {
	if o.table.Lookup(key).Mode != ns.ModeDurable {
		return engine.Reading{}, fmt.Errorf("exact %q: %w", key, durability.ErrNotDurable)
	}
	// The cache is asked for N beside the store, never before it: a
	// cache that does not answer costs the read nothing but N.
	nctx, cancel := context.WithCancel(ctx)
	defer cancel()
	subs := make(chan int, 1)
	go func() {
		sub, err := o.SubKeys(nctx, key)
		if err != nil {
			subs <- -1
			return
		}
		subs <- len(sub)
	}()
	v, err := o.dur.Exact(ctx, key)
	if err != nil {
		return engine.Reading{}, err
	}
	r := engine.Reading{Key: key, Value: v}
	if r.N = <-subs; r.N < 0 {
		r.N, r.NUnknown = 0, true
	}
	if err := o.globalExact(ctx, &r); err != nil {
		return r, err
	}
	return r, nil
}

// globalExact adds to the exact local total of a durable counter every
// peer's part as kept in the durable store (no cache is read).
func (o *Ops) globalExact(ctx context.Context, r *engine.Reading) error {
	if o.reg == nil {
		return nil
	}
	dr, ok := o.store.(durable.Regions)
	if !ok {
		return nil
	}
	m, err := dr.LoadRegionParts(ctx, []string{r.Key})
	if err != nil {
		return err
	}
	st := regions.FromParts(o.region, m[r.Key])
	r.Value, r.Regions = st.Global(o.region, r.Value, o.clock.Now())
	return nil
}

// Clear deletes the counter key in the cache, records the clear in the
// durable store, and, in a region, fences the peers' parts and starts a
// new epoch of its own.
func (o *Ops) Clear(ctx context.Context, key string) error {
	var epoch uint64
	if o.reg != nil {
		// Observed-remove: what this region received from each peer is
		// fenced, and its own part starts a new epoch.
		var err error
		if epoch, err = o.reg.BeginClear(ctx, key); err != nil {
			return err
		}
	}
	if err := o.eng.Clear(ctx, key); err != nil {
		return err
	}
	if o.dur != nil {
		// Recorded durably: no checkpoint restore or rebuild brings it back.
		if err := o.dur.Cleared(ctx, key); err != nil {
			return err
		}
	}
	if o.reg != nil {
		return o.reg.EndClear(ctx, key, epoch)
	}
	return nil
}

// Expire gives the counter key the deadline at in the cache, the durable
// store and every region, and reports whether the counter existed. In a
// region a deadline not after now is a clear in every region.
func (o *Ops) Expire(ctx context.Context, key string, at time.Time) (bool, error) {
	if o.reg != nil && !at.After(o.clock.Now()) {
		return o.expireNowGlobal(ctx, key)
	}
	existed, err := o.eng.Expire(ctx, key, at)
	if err == nil && existed && o.dur != nil {
		err = o.dur.Deadline(ctx, key, at) // a deadline not after now: a clear
	}
	if err == nil && o.reg != nil {
		// Every region's part gets the deadline, and the counter ends
		// in every region when it passes.
		existed, _, err = o.reg.SetDeadline(ctx, key, at, existed)
	}
	return existed, err
}

// expireNowGlobal is Expire with a deadline not after now in a region: a
// clear of the counter in every region, when it exists in some region.
func (o *Ops) expireNowGlobal(ctx context.Context, key string) (bool, error) {
	r, err := o.Get(ctx, key, true)
	if err != nil {
		return false, err
	}
	n, err := o.eng.Exists(ctx, []string{key})
	if err != nil {
		return false, err
	}
	existed := n > 0
	for name, sh := range r.Regions {
		if name != o.region && sh.Value != 0 {
			existed = true
		}
	}
	if !existed {
		return false, nil
	}
	return true, o.Clear(ctx, key)
}

// Persist removes the deadline of key in the cache, the durable store and
// every region, and reports whether there was one.
func (o *Ops) Persist(ctx context.Context, key string) (bool, error) {
	had, err := o.eng.Persist(ctx, key)
	if err == nil && had && o.dur != nil {
		err = o.dur.Deadline(ctx, key, time.Time{})
	}
	if err == nil && o.reg != nil {
		var some bool
		if _, some, err = o.reg.SetDeadline(ctx, key, time.Time{}, had); err == nil {
			had = had || some
		}
	}
	return had, err
}

// RegionsConfig is what StartRegions needs beside the Ops.
type RegionsConfig struct {
	// Local is this region's cache.
	Local rueidis.Client
	// Peers are the other regions.
	Peers []regions.Peer
	// Retention, Interval, ReadTTL and Timeout are those of
	// regions.Config.
	Retention, Interval, ReadTTL, Timeout time.Duration
}

// StartRegions starts the regions service over the Ops (which ships and
// reads through it from then on) and returns it.
func (o *Ops) StartRegions(cfg RegionsConfig) (*regions.Service, error) {
	var dr durable.Regions
	if r, ok := o.store.(durable.Regions); ok {
		dr = r
	}
	// A counter is shipped again one flush interval after it changed, so
	// that a delta buffered in another process is shipped too.
	settle := cfg.Interval
	if fl := o.table.FlushIntervals(); len(fl) > 0 {
		settle = max(settle, fl[len(fl)-1]+cfg.Timeout)
	}
	var known func(context.Context, func([]string) error) error
	if o.dur != nil {
		known = o.dur.Counters
	}
	reg, err := regions.New(regions.Config{
		Region: o.region, Local: cfg.Local, Peers: cfg.Peers, Totals: o.regionTotals(), Durable: dr, Counters: known,
		Retention: cfg.Retention,
		Deadlines: o.eng.Deadlines, Expire: o.ownDeadline, Ended: o.regionEnded,
		Expiring: func(key string) bool { return o.table.Lookup(key).TTL != 0 },
		Interval: cfg.Interval, Settle: settle, ReadTTL: cfg.ReadTTL, Timeout: cfg.Timeout, Clock: o.clock,
	})
	if err != nil {
		return nil, err
	}
	o.reg = reg
	return reg, nil
}

// ownDeadline gives this region's own counter key the deadline at (zero:
// none) that the counter's deadline register holds (set in a peer), as
// Expire and Persist do here, the durable record included.
func (o *Ops) ownDeadline(ctx context.Context, key string, at time.Time) error {
	var ok bool
	var err error
	if at.IsZero() {
		ok, err = o.eng.Persist(ctx, key)
	} else {
		ok, err = o.eng.Expire(ctx, key, at)
	}
	if err == nil && ok && o.dur != nil {
		err = o.dur.Deadline(ctx, key, at)
	}
	return err
}

// regionEnded drops, after a durable-mode counter's expiry ran here, what
// the ended counter left in the durable store (its log events and total
// up to the deadline), so that its exact total, which this region ships,
// counts only the counter that started after it.
func (o *Ops) regionEnded(ctx context.Context, key string, at time.Time) error {
	if o.table.Lookup(key).Mode != ns.ModeDurable || o.store == nil {
		return nil
	}
	return o.store.ClearEnded(ctx, key, at)
}

// regionTotals reads this region's own totals of keys: the exact durable
// total of a durable-mode counter, the sum of the sub-counters of any
// other (without unflushed deltas: those are shipped once flushed).
func (o *Ops) regionTotals() regions.Totals {
	var exact regions.Totals
	if o.store != nil {
		exact = o.store.ExactMulti
	}
	return regions.SplitTotals(func(k string) bool { return o.table.Lookup(k).Mode == ns.ModeDurable }, exact, o.sums)
}

// sums reads the sums of the sub-counters of keys.
func (o *Ops) sums(ctx context.Context, keys []string) (map[string]int64, error) {
	reads, _, _, err := o.eng.Read(ctx, keys, nil)
	if err != nil {
		return nil, err
	}
	out := make(map[string]int64, len(keys))
	for _, r := range reads {
		v, err := r.Sum()
		if err != nil {
			return nil, err
		}
		out[r.Key] = v
	}
	return out, nil
}
