package proxy

import (
	"hash/maphash"
	"math"
	"sync"
	"time"

	"github.com/hotcount/hotcount"
)

// estimates hold, per counter key, the value as this proxy knows it: the
// last summed read plus the increments this proxy made since.
//
// An entry keeps adds, the sum of this proxy's increments of the key since
// the entry was made, and base, chosen so that base+adds is the estimate.
// A summed read (Counters.Get) is taken when the entry is older than its
// TTL; before the read starts, adds is noted as a0; every increment counted
// in a0 was applied before the read began, so the read includes it, and
// base becomes value−a0. Increments that arrive while the read is in flight
// are counted on top even if the read saw them too: the estimate may run
// ahead by what arrived during one read, never behind what this proxy added.
// Concurrent reads of one key keep the one that started last.
//
// The reading's own age (Reading.Stale) dates the entry, so it expires
// together with the Client's read cache and the next read is a fresh one.
type estimates struct {
	seed   maphash.Seed
	shards [estimateShards]estimateShard
}

const (
	estimateShards = 64
	// estimateSweepAt is the entry count of one shard at which expired
	// entries are dropped.
	estimateSweepAt = 4096
)

type estimateShard struct {
	mu sync.Mutex
	m  map[string]*estimate
}

type estimate struct {
	base       int64
	adds       int64
	a0         int64 // adds when the read behind base started
	at         time.Time
	valid      bool // base holds a read
	exists     bool // the read found state, or this proxy has added since
	refreshing bool
}

func newEstimates() *estimates {
	e := &estimates{seed: maphash.MakeSeed()}
	for i := range e.shards {
		e.shards[i].m = make(map[string]*estimate)
	}
	return e
}

func (e *estimates) shard(key string) *estimateShard {
	return &e.shards[maphash.String(e.seed, key)%estimateShards]
}

// value is what an estimate says: base+adds, saturated at the int64 range.
func (x *estimate) value() int64 { return satAdd(x.base, x.adds) }

// added records an increment of key this proxy made (after the Client
// accepted it) and returns the estimate when it is fresh at now, or
// ok=false and the adds snapshot to start a summed read with (always, when
// read is set).
func (e *estimates) added(key string, delta int64, now time.Time, ttl time.Duration, read bool) (v int64, ok bool, a0 int64) {
	sh := e.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	x := sh.m[key]
	if x == nil {
		if len(sh.m) >= estimateSweepAt {
			sh.sweep(now, ttl)
		}
		x = &estimate{}
		sh.m[key] = x
	}
	x.adds = satAdd(x.adds, delta)
	x.exists = true
	if !read && x.valid && (fresh(x.at, now, ttl) || x.refreshing) {
		return x.value(), true, 0
	}
	x.refreshing = true
	return 0, false, x.adds
}

// count records an increment of key this proxy made and answered without
// the estimate (a cold counter's exact reply): an estimate held of key
// counts it, and none is made for it.
func (e *estimates) count(key string, delta int64) {
	sh := e.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if x := sh.m[key]; x != nil {
		x.adds = satAdd(x.adds, delta)
		x.exists = true
	}
}

// cached returns the estimate of key when it is fresh at now; otherwise
// ok=false and the adds snapshot to start a summed read with.
func (e *estimates) cached(key string, now time.Time, ttl time.Duration) (v int64, exists, ok bool, a0 int64) {
	sh := e.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	x := sh.m[key]
	if x == nil {
		return 0, false, false, 0
	}
	if x.valid && fresh(x.at, now, ttl) {
		return x.value(), x.exists, true, 0
	}
	return 0, false, false, x.adds
}

// read records a summed read r of key that started when adds was a0, taken
// at now, and returns the estimate after it.
func (e *estimates) read(key string, r hotcount.Reading, existed bool, a0 int64, now time.Time) (v int64, exists bool) {
	sh := e.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	x := sh.m[key]
	if x == nil {
		// Not yet made (a read without an increment) or dropped by a
		// clear: start from the read alone.
		x = &estimate{}
		sh.m[key] = x
		a0 = 0
	}
	x.refreshing = false
	if !x.valid || a0 >= x.a0 {
		x.base = satAdd(r.Value, -a0)
		x.a0 = a0
		x.at = now.Add(-r.Stale)
		x.valid = true
		x.exists = existed || x.adds != a0
	}
	return x.value(), x.exists
}

// failed ends a summed read of key that failed; the estimate, if any,
// stays, and it (or, without one, the adds alone) is returned.
func (e *estimates) failed(key string) int64 {
	sh := e.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	x := sh.m[key]
	if x == nil {
		return 0
	}
	x.refreshing = false
	if x.valid {
		return x.value()
	}
	return x.adds
}

// drop forgets key (after a clear or a reset).
func (e *estimates) drop(key string) {
	sh := e.shard(key)
	sh.mu.Lock()
	delete(sh.m, key)
	sh.mu.Unlock()
}

// size returns the number of keys held.
func (e *estimates) size() int {
	n := 0
	for i := range e.shards {
		sh := &e.shards[i]
		sh.mu.Lock()
		n += len(sh.m)
		sh.mu.Unlock()
	}
	return n
}

// sweep drops entries that expired and are not being read; when that frees
// too little the shard is emptied (estimates are rebuilt by reads).
func (sh *estimateShard) sweep(now time.Time, ttl time.Duration) {
	for k, x := range sh.m {
		if !x.refreshing && !fresh(x.at, now, ttl) {
			delete(sh.m, k)
		}
	}
	if len(sh.m) >= estimateSweepAt {
		clear(sh.m)
	}
}

func fresh(at, now time.Time, ttl time.Duration) bool {
	age := now.Sub(at)
	return age >= 0 && age < ttl
}

func satAdd(a, b int64) int64 {
	s := a + b
	switch {
	case b > 0 && s < a:
		return math.MaxInt64
	case b < 0 && s > a:
		return math.MinInt64
	}
	return s
}
