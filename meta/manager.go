package meta

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/singleflight"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/placement"
	"github.com/hotcount/hotcount/store"
)

// casAttempts bounds the compare-and-set retries of one change.
const casAttempts = 32

// sweepEvery is how many cache fills pass between sweeps of expired entries.
const sweepEvery = 4096

// Manager serves label sets from a TTL cache and runs the grow, fold and
// re-placement protocols. It is safe for concurrent use.
type Manager struct {
	b   Backend
	cfg Config

	cache  sync.Map // counter key → *entry
	fills  atomic.Int64
	flight singleflight.Group
}

// entry is one cached record.
type entry struct {
	m       Meta
	readAll []string  // m.Read with keyspace.ColdLabel (what readers sum)
	at      time.Time // taken before the record was read
	pinned  bool      // a stored record, not derived defaults
	stable  bool      // writers may use it: pinned, cold or naive defaults
	gone    bool      // the record was dropped at at: a cache miss
	subs    []string  // the sub-keys of m.Write, for writers
	slots   []uint16  // their slots
	writes  atomic.Uint32
}

// NewManager returns a Manager over backend. The Config is copied.
func NewManager(backend Backend, cfg Config) (*Manager, error) {
	if backend == nil {
		return nil, fmt.Errorf("%w: nil backend", ErrConfig)
	}
	c, err := cfg.withDefaults(backend)
	if err != nil {
		return nil, err
	}
	return &Manager{b: backend, cfg: c}, nil
}

// TTL returns the record cache TTL in use.
func (m *Manager) TTL() time.Duration { return m.cfg.TTL }

// Labels returns key's write and read label sets: writers pick one of
// write, readers sum every label of read. The result comes from the cache
// when it is younger than the TTL. The slices are shared: do not modify
// them. key must be a valid counter key.
func (m *Manager) Labels(ctx context.Context, key string) (write, read []string, err error) {
	now := m.cfg.Clock.Now()
	if v, ok := m.cache.Load(key); ok {
		e := v.(*entry)
		// A writer needs stable labels: placed defaults cached by a reader
		// are not, since a slot migration may change them.
		if age := now.Sub(e.at); age >= 0 && age < m.cfg.TTL && e.stable {
			return e.m.Write, e.readAll, nil
		}
	}
	v, err, _ := m.flight.Do(key, func() (any, error) {
		mt, err := m.load(ctx, key, true)
		if err != nil {
			return nil, err
		}
		return mt, nil
	})
	if err != nil {
		return nil, nil, err
	}
	mt := v.(Meta)
	if e := m.newer(key, mt); e != nil {
		return e.m.Write, e.readAll, nil
	}
	return mt.Write, m.withCold(mt.Read), nil
}

// newer returns the cached entry of key when it holds a later version of
// mt's record (the same Gen, a higher epoch), or nil. A look-up that
// joined another's may get a record read before a change this process
// made since: a Resize that returned must show in the next Labels.
func (m *Manager) newer(key string, mt Meta) *entry {
	v, ok := m.cache.Load(key)
	if !ok {
		return nil
	}
	e := v.(*entry)
	if e.pinned && mt.Gen != "" && e.m.Gen == mt.Gen && e.m.Epoch > mt.Epoch {
		return e
	}
	return nil
}

// Cached returns key's write labels, their sub-keys and slots, when the
// cache holds them fresh for a writer, with no round trip; ok is false
// otherwise (the writer may then send its increment to
// keyspace.ColdLabel, which every reader sums, and look the labels up in
// the background). stale is true once the entry is past half its TTL: the
// caller should Refresh it in the background, so that a busy counter's
// labels never lapse. The slices are shared: do not modify them.
func (m *Manager) Cached(key string) (write, subs []string, slots []uint16, stale, ok bool) {
	w, ok := m.CachedWrite(key, m.cfg.Clock.Now())
	return w.Labels, w.Subs, w.Slots, w.Stale, ok
}

// WriteSet is a counter's cached write labels, with their sub-keys and
// slots and the counter's deadline, as CachedWrite returns them. The
// slices are shared: do not modify them.
type WriteSet struct {
	Labels   []string
	Subs     []string
	Slots    []uint16
	Deadline int64 // Unix milliseconds; 0: none
	Stale    bool  // past half its TTL: Refresh it in the background
	// Writes is a count kept with this cached set for its callers (the
	// Client counts the increments written with it); a new look-up
	// starts a new count at 0.
	Writes *atomic.Uint32
}

// CachedWrite is Cached with the counter's deadline, from one cache
// look-up at now: what an increment needs, with no round trip.
func (m *Manager) CachedWrite(key string, now time.Time) (WriteSet, bool) {
	v, found := m.cache.Load(key)
	if !found {
		return WriteSet{}, false
	}
	e := v.(*entry)
	if age := now.Sub(e.at); age >= 0 && age < m.cfg.TTL && e.stable {
		return WriteSet{Labels: e.m.Write, Subs: e.subs, Slots: e.slots, Deadline: e.m.Deadline, Stale: age >= m.cfg.TTL/2, Writes: &e.writes}, true
	}
	return WriteSet{}, false
}

// Refresh reads key's record again (pinning a warm counter's default
// labels, as Labels does) and caches it, whatever the cache holds.
func (m *Manager) Refresh(ctx context.Context, key string) error {
	_, err, _ := m.flight.Do(key, func() (any, error) { return m.load(ctx, key, true) })
	return err
}

// CachedReadSets returns the read sets of the keys the cache holds fresh
// for readers, and the indexes of the others, with no round trip.
func (m *Manager) CachedReadSets(keys []string) (read [][]string, missing []int) {
	read = make([][]string, len(keys))
	now := m.cfg.Clock.Now()
	for i, k := range keys {
		if v, ok := m.cache.Load(k); ok {
			e := v.(*entry)
			if age := now.Sub(e.at); age >= 0 && age < m.cfg.TTL && (e.pinned || e.stable) {
				read[i] = e.readAll
				continue
			}
		}
		missing = append(missing, i)
	}
	return read, missing
}

// withCold returns read with keyspace.ColdLabel added (shared when it is
// there already). Naive label sets are used as they are.
func (m *Manager) withCold(read []string) []string {
	if m.cfg.Naive || slices.Contains(read, keyspace.ColdLabel) {
		return read
	}
	return append(append(make([]string, 0, len(read)+1), keyspace.ColdLabel), read...)
}

// ReadSets returns, for each of keys, the labels a reader sums (always
// with keyspace.ColdLabel) and whether the counter has a record. Records
// cached for less than the TTL are used as they are; the others are read
// together, one pipelined round per node (and, for counters the cache has
// no record of, one batched look-up in the durable store, whose records
// are restored to the cache). A counter without any record gets its
// default labels, which are never pinned (a read creates no state) and are
// cached only when they are stable (a cold counter's). The slices are
// shared: do not modify them. Every key must be a valid counter key. It
// reads no record mark (see HealMarks).
func (m *Manager) ReadSets(ctx context.Context, keys []string) (read [][]string, found []bool, err error) {
	read = make([][]string, len(keys))
	found = make([]bool, len(keys))
	now := m.cfg.Clock.Now()
	var miss []int
	for i, k := range keys {
		if v, ok := m.cache.Load(k); ok {
			e := v.(*entry)
			if age := now.Sub(e.at); age >= 0 && age < m.cfg.TTL && (e.pinned || e.stable) {
				read[i], found[i] = e.readAll, e.pinned
				continue
			}
		}
		miss = append(miss, i)
	}
	if len(miss) == 0 {
		return read, found, nil
	}
	mkeys := make([]string, len(miss))
	for j, i := range miss {
		mkeys[j] = keys[i]
	}
	data, err := m.b.GetMetas(ctx, mkeys)
	if err != nil {
		return nil, nil, fmt.Errorf("meta: read: %w", err)
	}
	var lost []int // indexes into miss without a record in the cache
	for j, i := range miss {
		if data[j] == nil {
			lost = append(lost, j)
			continue
		}
		mt, err := decode(data[j])
		if err != nil {
			return nil, nil, fmt.Errorf("meta: record of %q: %w", keys[i], err)
		}
		m.put(keys[i], mt, now)
		read[i], found[i] = m.withCold(mt.Read), true
	}
	if len(lost) > 0 && m.cfg.Durable != nil {
		lk := make([]string, len(lost))
		for x, j := range lost {
			lk[x] = mkeys[j]
		}
		recs, err := m.cfg.Durable.LoadMetas(ctx, lk)
		if err != nil {
			return nil, nil, fmt.Errorf("meta: load from the durable store: %w", err)
		}
		kept := lost[:0]
		for _, j := range lost {
			if _, ok := recs[mkeys[j]]; !ok {
				kept = append(kept, j)
				continue
			}
			// A record the cache lost: restore it, as Labels does.
			mt, err := m.load(ctx, mkeys[j], false)
			if err != nil {
				return nil, nil, err
			}
			read[miss[j]], found[miss[j]] = m.withCold(mt.Read), true
		}
		lost = kept
	}
	for _, j := range lost {
		labels, err := m.defaults(ctx, mkeys[j])
		if err != nil {
			return nil, nil, err
		}
		if m.cold(mkeys[j]) {
			m.put(mkeys[j], Meta{Write: labels, Read: labels}, now)
		}
		read[miss[j]] = m.withCold(labels)
	}
	return read, found, nil
}

// Meta returns key's current record, read from the backend (not the
// cache). A counter without a record yields its default labels with Epoch 0.
func (m *Manager) Meta(ctx context.Context, key string) (Meta, error) {
	if err := keyspace.Validate(key); err != nil {
		return Meta{}, err
	}
	mt, err := m.load(ctx, key, false)
	return mt.clone(), err
}

// Known returns the counters whose records this Manager has cached: the
// counters this process used within about a TTL (order unspecified).
func (m *Manager) Known() []string {
	var out []string
	m.cache.Range(func(k, _ any) bool {
		out = append(out, k.(string))
		return true
	})
	return out
}

// Forget drops key from the cache, so the next Labels reads the backend.
func (m *Manager) Forget(key string) { m.cache.Delete(key) }

// load reads key's record from the backend (restoring it from the durable
// store, or deriving the default, when the cache has none) and caches it.
// With pin set, a placed default is written as epoch 1.
func (m *Manager) load(ctx context.Context, key string, pin bool) (Meta, error) {
	for range casAttempts {
		at := m.cfg.Clock.Now()
		mt, found, err := m.fetch(ctx, key)
		if err != nil {
			return Meta{}, err
		}
		if found || !pin || m.cfg.Naive || m.cold(key) {
			m.put(key, mt, at)
			return mt, nil
		}
		mt.Epoch = 1
		mt.Gen = m.newGen()
		if err := m.firstDeadline(ctx, key, &mt); err != nil {
			return Meta{}, err
		}
		ok, err := m.save(ctx, key, 0, mt, mt.encode())
		if err != nil {
			return Meta{}, fmt.Errorf("meta: pin labels of %q: %w", key, err)
		}
		if ok {
			_ = m.mirror(ctx, key, mt) // best effort: the cache holds the pin
			m.put(key, mt, at)
			return mt, nil
		}
		// Another process pinned it first: read theirs.
	}
	return Meta{}, fmt.Errorf("%w: pinning %q", ErrConflict, key)
}

// fetch returns the stored record, restored from the durable store when
// the cache lost it, or the default (Epoch 0, found false).
func (m *Manager) fetch(ctx context.Context, key string) (Meta, bool, error) {
	data, ok, err := m.b.GetMeta(ctx, key)
	if err != nil {
		return Meta{}, false, fmt.Errorf("meta: read %q: %w", key, err)
	}
	if ok {
		mt, err := decode(data)
		if err != nil {
			return Meta{}, false, fmt.Errorf("meta: record of %q: %w", key, err)
		}
		_ = m.heal(ctx, []string{key}, []Meta{mt}) // best effort: the next look-up heals again
		return mt, true, nil
	}
	if m.cfg.Durable != nil {
		data, err := m.cfg.Durable.LoadMeta(ctx, key)
		if err != nil {
			return Meta{}, false, fmt.Errorf("meta: load %q from the durable store: %w", key, err)
		}
		if data != nil {
			mt, err := decode(data)
			if err != nil {
				return Meta{}, false, fmt.Errorf("meta: durable record of %q: %w", key, err)
			}
			ok, err := m.save(ctx, key, 0, mt, data)
			if err != nil {
				return Meta{}, false, fmt.Errorf("meta: restore %q: %w", key, err)
			}
			if ok {
				if err := m.unrestoreDropped(ctx, key, mt.Epoch, mt.Gen); err != nil {
					return Meta{}, false, err
				}
			}
			// Restored, or raced with another restorer, changer or
			// dropper: read back what the cache holds now.
			return m.fetch(ctx, key)
		}
	}
	labels, err := m.defaults(ctx, key)
	if err != nil {
		return Meta{}, false, err
	}
	return Meta{Write: labels, Read: labels}, false, nil
}

// unrestoreDropped takes back the record of epoch epoch that fetch just
// restored to the cache when its durable copy is gone: a drop deleted it
// (and then the cache's) after fetch read it.
func (m *Manager) unrestoreDropped(ctx context.Context, key string, epoch uint64, gen string) error {
	data, err := m.cfg.Durable.LoadMeta(ctx, key)
	if err != nil {
		return fmt.Errorf("meta: load %q from the durable store: %w", key, err)
	}
	if data != nil {
		return nil
	}
	if _, err := m.unsave(ctx, key, epoch, gen); err != nil {
		return fmt.Errorf("meta: take back the restored record of %q: %w", key, err)
	}
	return nil
}

// defaults returns the label set of a counter without a record.
func (m *Manager) defaults(ctx context.Context, key string) ([]string, error) {
	n := m.cfg.DefaultN(key)
	if n < 1 || n > keyspace.MaxN {
		return nil, fmt.Errorf("%w: DefaultN(%q) = %d", ErrInvalidN, key, n)
	}
	if m.cfg.Naive {
		return keyspace.NaiveLabels(n), nil
	}
	if m.cold(key) {
		return coldSet, nil
	}
	t, err := m.topology(ctx)
	if err != nil {
		return nil, err
	}
	return placement.Extend(t, key, coldSet, n, nil), nil
}

// coldSet is the label set of a cold counter.
var coldSet = []string{keyspace.ColdLabel}

// cold reports whether a counter of key without a record is cold.
func (m *Manager) cold(key string) bool {
	return m.cfg.Cold != nil && !m.cfg.Naive && m.cfg.Cold(key)
}

// topology returns the current slot map, or nil without a source.
func (m *Manager) topology(ctx context.Context) (*store.Topology, error) {
	if m.cfg.Topology == nil {
		return nil, nil
	}
	t, err := m.cfg.Topology(ctx)
	if err != nil {
		return nil, fmt.Errorf("meta: topology: %w", err)
	}
	return t, nil
}

func (m *Manager) put(key string, mt Meta, at time.Time) {
	pinned := mt.Epoch > 0
	e := &entry{m: mt, readAll: m.withCold(mt.Read), at: at, pinned: pinned,
		stable: pinned || m.cfg.Naive || m.cold(key)}
	if e.stable {
		e.subs, e.slots = make([]string, len(mt.Write)), make([]uint16, len(mt.Write))
		for i, l := range mt.Write {
			e.subs[i] = keyspace.SubKey(key, l)
			e.slots[i] = keyspace.Slot(e.subs[i])
		}
	}
	m.store(key, e)
	if m.fills.Add(1)%sweepEvery == 0 {
		now := m.cfg.Clock.Now()
		m.cache.Range(func(k, v any) bool {
			if now.Sub(v.(*entry).at) >= m.cfg.TTL {
				m.cache.CompareAndDelete(k, v)
			}
			return true
		})
	}
}

// store caches e unless the cache holds something newer: a look-up that
// started before a record was dropped must not bring it back, and of two
// versions of one record (the same Gen) the higher epoch wins whichever
// look-up started later.
func (m *Manager) store(key string, e *entry) {
	for {
		old, loaded := m.cache.LoadOrStore(key, e)
		if !loaded {
			return
		}
		o := old.(*entry)
		sameGen := o.pinned && e.pinned && o.m.Gen != "" && o.m.Gen == e.m.Gen
		switch {
		case sameGen && o.m.Epoch > e.m.Epoch:
			// A look-up that started after a change was stamped but
			// read the record before the change landed: keep the newer.
			return
		case (!sameGen || o.m.Epoch == e.m.Epoch) && o.at.After(e.at):
			return
		}
		if m.cache.CompareAndSwap(key, old, e) {
			return
		}
	}
}

// forgetDropped marks key's record as gone in the cache: later look-ups
// read the backend, and ones that started earlier do not cache what they
// read.
func (m *Manager) forgetDropped(key string) {
	m.store(key, &entry{at: m.cfg.Clock.Now(), gone: true})
}

func (m *Manager) mirror(ctx context.Context, key string, mt Meta) error {
	if m.cfg.Durable == nil {
		return nil
	}
	if err := m.cfg.Durable.SaveMeta(ctx, key, mt.encode()); err != nil {
		return fmt.Errorf("meta: mirror %q to the durable store: %w", key, err)
	}
	return nil
}

// errNoChange tells update that the change function found nothing to do.
var errNoChange = errors.New("meta: no change")

// update applies change to a fresh copy of key's record and stores it with
// compare-and-set on the epoch, retrying on conflict. It returns the record
// as stored (or as read, when change returned errNoChange).
func (m *Manager) update(ctx context.Context, key string, change func(*Meta) error) (Meta, error) {
	for range casAttempts {
		at := m.cfg.Clock.Now()
		cur, _, err := m.fetch(ctx, key)
		if err != nil {
			return Meta{}, err
		}
		next := cur.clone()
		switch err := change(&next); {
		case errors.Is(err, errNoChange):
			m.put(key, cur, at)
			return cur, nil
		case err != nil:
			return Meta{}, err
		}
		next.Epoch = cur.Epoch + 1
		if cur.Epoch == 0 {
			next.Gen = m.newGen()
			if err := m.firstDeadline(ctx, key, &next); err != nil {
				return Meta{}, err
			}
		}
		ok, err := m.save(ctx, key, cur.Epoch, next, next.encode())
		if err != nil {
			return Meta{}, fmt.Errorf("meta: write %q: %w", key, err)
		}
		if !ok {
			continue
		}
		m.put(key, next, at)
		if err := m.mirror(ctx, key, next); err != nil {
			return next, err
		}
		return next, nil
	}
	return Meta{}, fmt.Errorf("%w: %q", ErrConflict, key)
}

// newGen draws the generation of a new record (see Meta.Gen).
func (m *Manager) newGen() string { return fmt.Sprintf("%016x", m.cfg.Rand()) }

// firstDeadline gives a counter's first record the deadline Config.Deadline
// says, unless the change set one.
func (m *Manager) firstDeadline(ctx context.Context, key string, mt *Meta) error {
	if m.cfg.Deadline == nil || mt.Deadline != 0 {
		return nil
	}
	at, err := m.cfg.Deadline(ctx, key)
	if err != nil {
		return fmt.Errorf("meta: deadline of %q: %w", key, err)
	}
	if !at.IsZero() {
		mt.Deadline = at.UnixMilli()
	}
	return nil
}

// SetDeadline records key's deadline in its record (zero: none). It
// reports false, changing nothing, when the counter has no record (a cold
// counter keeps its deadline on its one sub-counter).
func (m *Manager) SetDeadline(ctx context.Context, key string, at time.Time) (bool, error) {
	var ms int64
	if !at.IsZero() {
		ms = at.UnixMilli()
	}
	had := true
	_, err := m.update(ctx, key, func(mt *Meta) error {
		if mt.Epoch == 0 {
			had = false
			return errNoChange
		}
		if mt.Deadline == ms {
			return errNoChange
		}
		mt.Deadline = ms
		return nil
	})
	return had, err
}

// CachedDeadline returns the deadline of key's cached record (zero: none
// or not cached).
func (m *Manager) CachedDeadline(key string) time.Time {
	if v, ok := m.cache.Load(key); ok {
		if d := v.(*entry).m.Deadline; d != 0 {
			return time.UnixMilli(d)
		}
	}
	return time.Time{}
}

// Drop deletes key's record, whatever it holds, from the cache and the
// durable store (a counter that expired, or is gone). It reports whether
// there was one.
func (m *Manager) Drop(ctx context.Context, key string) (bool, error) {
	for range casAttempts {
		cur, found, err := m.fetch(ctx, key)
		if err != nil || !found {
			m.forgetDropped(key)
			return false, err
		}
		ok, err := m.dropRecord(ctx, key, cur.Epoch, cur.Gen)
		if err != nil {
			return false, err
		}
		if ok {
			return true, nil
		}
	}
	return false, fmt.Errorf("%w: dropping the record of %q", ErrConflict, key)
}

// dropRecord deletes key's record of epoch epoch: first its durable copy,
// then, if it still has that epoch, the cache's. In that order a look-up
// that finds no record in the cache finds none in the durable store
// either: the other way round, one in between restored the record just
// dropped from its durable copy (fetch), and a counter that expired came
// back with its passed deadline, or a new counter started on the old
// record. ok is false, and the durable copy is gone, when the record
// changed meanwhile: the caller reads it again, and mirrors it when it
// keeps it.
func (m *Manager) dropRecord(ctx context.Context, key string, epoch uint64, gen string) (ok bool, err error) {
	if m.cfg.Durable != nil {
		if err := m.cfg.Durable.DeleteMeta(ctx, key); err != nil {
			return false, fmt.Errorf("meta: drop the durable record of %q: %w", key, err)
		}
	}
	ok, err = m.unsave(ctx, key, epoch, gen)
	if err != nil {
		return false, fmt.Errorf("meta: drop the record of %q: %w", key, err)
	}
	if ok {
		m.forgetDropped(key)
	}
	return ok, nil
}

// CacheCounts returns how many counters the cache holds labels of: with a
// record (sharded), and cold (no record, one sub-counter). It scans the
// cache: call it at the pace of a metrics scrape.
func (m *Manager) CacheCounts() (sharded, cold int) {
	now := m.cfg.Clock.Now()
	m.cache.Range(func(_, v any) bool {
		e := v.(*entry)
		switch {
		case e.gone || now.Sub(e.at) >= m.cfg.TTL:
		case e.pinned:
			sharded++
		case len(e.m.Write) == 1:
			cold++
		}
		return true
	})
	return sharded, cold
}
