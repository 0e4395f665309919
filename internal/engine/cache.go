package engine

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// readCache holds recent summed reads. Entries are swept when the map grows
// past sweepAt, so the cache stays bounded by the set of recently read keys.
type readCache struct {
	mu      sync.Mutex
	m       map[string]*cacheEntry // pointers: add updates in place, and keeps no key
	sweepAt int
	// size is len(m), stored under mu after every change, so that add
	// skips the lock while nothing is cached (no counter read lately).
	size atomic.Int64
}

type cacheEntry struct {
	value int64
	n     int
	at    time.Time
}

func (rc *readCache) init() {
	rc.m = make(map[string]*cacheEntry)
	rc.sweepAt = 1 << 16
}

func (rc *readCache) get(key string) (value int64, n int, at time.Time, ok bool) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if e, ok := rc.m[key]; ok {
		return e.value, e.n, e.at, true
	}
	return 0, 0, time.Time{}, false
}

// put caches a sum read since seq held seen, unless seq changed since:
// checked under the lock that drop takes, so an entry read before a flush
// landed is never cached after the flush's drop.
func (rc *readCache) put(key string, value int64, n int, at time.Time, seq *atomic.Uint64, seen uint64) {
	rc.mu.Lock()
	defer rc.mu.Unlock()
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

// add applies this process's own increment to a cached sum, so it reads its
// own writes; an entry that would overflow is dropped instead.
func (rc *readCache) add(key string, delta int64) {
	if rc.size.Load() == 0 {
		// As if add had taken the lock before the put that is storing
		// the first entry (if any): that entry was read without delta,
		// as it would be then.
		return
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
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
