package engine

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// readCache holds recent summed reads. Entries are swept when the map grows
// past sweepAt, so the cache stays bounded by the set of recently read keys.
//
// It also keeps this process's increments from being lost by a read that
// overlaps them. A read marks its keys (begin) before it reads their
// values; every increment this process applies to a marked key until the
// read ends (settle) is added to the mark, and settle adds the marks to the
// sums it was given, under the lock that add takes. An increment applied
// before the mark was in the values read; one applied after settle finds
// the entry settle cached. So a sum, cached or handed to the callers that
// shared the read, never misses an increment this process applied before
// the read returned: it may only run ahead by what this process applied
// while the read was in flight and the read saw too.
type readCache struct {
	mu      sync.Mutex
	m       map[string]*cacheEntry // pointers: add updates in place, and keeps no key
	sweepAt int
	// size is len(m), stored under mu after every change, so that add
	// skips the lock while nothing is cached (no counter read lately).
	size atomic.Int64
	// reads holds the marks of the reads in flight, per key; nreads
	// counts them, so that add skips the lock while none is.
	reads  map[string][]*readMark
	nreads atomic.Int64
}

// readMark is one read in flight of one key: the sum of this process's
// increments of the key applied since the read began.
type readMark struct {
	delta    int64
	overflow bool
}

type cacheEntry struct {
	value int64
	n     int
	at    time.Time
}

func (rc *readCache) init() {
	rc.m = make(map[string]*cacheEntry)
	rc.reads = make(map[string][]*readMark)
	rc.sweepAt = 1 << 16
}

// begin marks a read of keys that is about to read their values; every
// mark must be ended by settle or abandon.
func (rc *readCache) begin(keys []string) map[string]*readMark {
	marks := make(map[string]*readMark, len(keys))
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, k := range keys {
		if _, dup := marks[k]; dup {
			continue
		}
		m := &readMark{}
		marks[k] = m
		rc.reads[k] = append(rc.reads[k], m)
		rc.nreads.Add(1)
	}
	return marks
}

// unmark removes mark m of key; rc.mu is held.
func (rc *readCache) unmark(key string, m *readMark) {
	ms := rc.reads[key]
	for i, x := range ms {
		if x == m {
			ms = append(ms[:i], ms[i+1:]...)
			rc.nreads.Add(-1)
			break
		}
	}
	if len(ms) == 0 {
		delete(rc.reads, key)
	} else {
		rc.reads[key] = ms
	}
}

// abandon ends the marks of a read that failed.
func (rc *readCache) abandon(marks map[string]*readMark) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for k, m := range marks {
		rc.unmark(k, m)
	}
}

// settle ends the mark m of key and returns value, a sum read while it
// was set, with the increments applied meanwhile added; ok is false when
// that would leave int64. When store is set and ok, the result is cached
// as a read taken at at, as put does (not when a flush landed since seq
// held seen).
func (rc *readCache) settle(key string, m *readMark, value int64, n int, at time.Time, store bool, seq *atomic.Uint64, seen uint64) (int64, bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	rc.unmark(key, m)
	if m.overflow || (m.delta > 0 && value > math.MaxInt64-m.delta) || (m.delta < 0 && value < math.MinInt64-m.delta) {
		return value, false
	}
	value += m.delta
	if store {
		rc.putLocked(key, value, n, at, seq, seen)
	}
	return value, true
}

func (rc *readCache) get(key string) (value int64, n int, at time.Time, ok bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if e, ok := rc.m[key]; ok {
		return e.value, e.n, e.at, true
	}
	return 0, 0, time.Time{}, false
}

// putLocked caches a sum read since seq held seen, unless seq changed
// since: checked under rc.mu, which drop takes too, so an entry read
// before a flush landed is never cached after the flush's drop.
func (rc *readCache) putLocked(key string, value int64, n int, at time.Time, seq *atomic.Uint64, seen uint64) {
	if seq.Load() != seen {
		return
	}
	if len(rc.m) >= rc.sweepAt {
		oldest := at.Add(-time.Minute)
		for k, e := range rc.m {
			if e.at.Before(oldest) {
				delete(rc.m, k)
			}
		}
		if len(rc.m) >= rc.sweepAt {
			clear(rc.m)
		}
	}
	rc.m[key] = &cacheEntry{value: value, n: n, at: at}
	rc.size.Store(int64(len(rc.m)))
}

// add applies this process's own increment, once applied to the cache, to
// a cached sum and to the reads of key in flight, so this process reads
// its own writes; an entry that would overflow is dropped instead.
func (rc *readCache) add(key string, delta int64) {
	if rc.size.Load() == 0 && rc.nreads.Load() == 0 {
		// As if add had taken the lock before the begin or put that is
		// storing the first mark or entry (if any): that read has the
		// increment in its values, as it would then.
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	for _, m := range rc.reads[key] {
		if (delta > 0 && m.delta > math.MaxInt64-delta) || (delta < 0 && m.delta < math.MinInt64-delta) {
			m.overflow = true
			continue
		}
		m.delta += delta
	}
	e, ok := rc.m[key]
	if !ok {
		return
	}
	if (delta > 0 && e.value > math.MaxInt64-delta) || (delta < 0 && e.value < math.MinInt64-delta) {
		delete(rc.m, key)
		rc.size.Store(int64(len(rc.m)))
		return
	}
	e.value += delta
}

func (rc *readCache) drop(key string) {
	rc.mu.Lock()
	delete(rc.m, key)
	rc.size.Store(int64(len(rc.m)))
	rc.mu.Unlock()
}
