package hotkeys

import (
	"errors"
	"fmt"
	"hash/maphash"
	"math/bits"
	"slices"
	"strings"
	"time"
)

// ErrConfig is wrapped by every error about an invalid configuration.
var ErrConfig = errors.New("hotkeys: invalid config")

// Sketch defaults, used when a SketchConfig field is zero.
const (
	// DefaultK is the number of counters of one shard.
	DefaultK = 64
	// DefaultShards is the number of independently locked shards.
	DefaultShards = 8
	// DefaultWindow is the span of the sliding rate window.
	DefaultWindow = 2 * time.Second
	// DefaultBuckets is the number of buckets the window is cut into.
	DefaultBuckets = 8
	// DefaultDecayEvery is how often all counts are halved.
	DefaultDecayEvery = 10 * time.Second
	// DefaultClockEvery is how many Observe calls of a shard share one
	// clock reading.
	DefaultClockEvery = 16
	// MaxBuckets is the largest SketchConfig.Buckets.
	MaxBuckets = ringSize - 1
)

// ringSize is the number of bucket slots an entry keeps (a power of two).
const ringSize = 16

// SketchConfig configures a Sketch. The zero value is valid: DefaultShards
// shards of DefaultK counters, a DefaultWindow rate window of
// DefaultBuckets buckets, counts halved every DefaultDecayEvery, the
// system clock.
type SketchConfig struct {
	// K is the number of keys one shard tracks; 0 means DefaultK.
	K int
	// Shards is the number of shards, rounded up to a power of two; 0
	// means DefaultShards. The sketch tracks up to K×Shards keys.
	Shards int
	// Window is the span over which rates are measured; 0 means
	// DefaultWindow. A longer window is steadier and slower to react.
	Window time.Duration
	// Buckets is the number of buckets of the window, 1..MaxBuckets; 0
	// means DefaultBuckets.
	Buckets int
	// DecayEvery is how often every count (and error bound) is halved, so
	// that keys hot long ago make room for keys hot now; 0 means
	// DefaultDecayEvery.
	DecayEvery time.Duration
	// ClockEvery makes Observe read the clock on one call in ClockEvery
	// per shard and reuse the shard's last reading otherwise; 0 means
	// DefaultClockEvery, 1 reads it on every call. Top and Rate always
	// read it and refresh the shards they visit. A write is thus dated
	// late by at most the time the shard's last ClockEvery writes took, or
	// the time since the last Top, whichever is less.
	ClockEvery int
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

func (c SketchConfig) withDefaults() (SketchConfig, error) {
	if c.K < 0 || c.Shards < 0 || c.Window < 0 || c.Buckets < 0 || c.DecayEvery < 0 || c.ClockEvery < 0 {
		return c, fmt.Errorf("%w: negative K, Shards, Window, Buckets, DecayEvery or ClockEvery", ErrConfig)
	}
	if c.ClockEvery == 0 {
		c.ClockEvery = DefaultClockEvery
	}
	if c.K == 0 {
		c.K = DefaultK
	}
	if c.Shards == 0 {
		c.Shards = DefaultShards
	}
	if c.Shards > 1<<16 {
		return c, fmt.Errorf("%w: Shards must be at most %d, got %d", ErrConfig, 1<<16, c.Shards)
	}
	c.Shards = 1 << bits.Len(uint(c.Shards-1))
	if c.Window == 0 {
		c.Window = DefaultWindow
	}
	if c.Buckets == 0 {
		c.Buckets = DefaultBuckets
	}
	if c.Buckets > MaxBuckets {
		return c, fmt.Errorf("%w: Buckets must be 1..%d, got %d", ErrConfig, MaxBuckets, c.Buckets)
	}
	if c.Window/time.Duration(c.Buckets) <= 0 {
		return c, fmt.Errorf("%w: Window %v is too short for %d buckets", ErrConfig, c.Window, c.Buckets)
	}
	if c.DecayEvery == 0 {
		c.DecayEvery = DefaultDecayEvery
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c, nil
}

// Sketch finds the keys written most often and measures their rates. It is
// safe for concurrent use. See the package documentation for the
// algorithm and its error bounds.
type Sketch struct {
	cfg        SketchConfig
	seed       maphash.Seed
	mask       uint64
	bucket     int64 // bucket width, ns
	decay      int64 // ns
	clockEvery uint32
	shards     []shard
}

// KeyRate is one key of Sketch.Top.
type KeyRate struct {
	// Key is the counter key.
	Key string
	// Rate is the key's writes per second over the sketch's window,
	// counted since the key entered the sketch.
	Rate float64
	// Count is the Space-Saving count: the key's writes (halved every
	// DecayEvery), overestimated by at most ErrBound.
	Count int64
	// ErrBound bounds how much Count overestimates: Count-ErrBound is a
	// lower bound of the key's (decayed) writes.
	ErrBound int64
}

// NewSketch returns a Sketch for cfg. The caller's SketchConfig is not
// modified.
func NewSketch(cfg SketchConfig) (*Sketch, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	s := &Sketch{
		cfg:        c,
		seed:       maphash.MakeSeed(),
		mask:       uint64(c.Shards - 1),
		bucket:     int64(c.Window) / int64(c.Buckets),
		decay:      int64(c.DecayEvery),
		clockEvery: uint32(min(c.ClockEvery, 1<<30)),
		shards:     make([]shard, c.Shards),
	}
	now := c.Now().UnixNano()
	for i := range s.shards {
		s.shards[i].init(c.K)
		s.shards[i].now = now
	}
	return s, nil
}

// Observe counts delta writes of key (normally 1 per write the key causes
// on the cache). A non-positive delta is ignored. Observing a key that is
// already tracked does not allocate.
func (s *Sketch) Observe(key string, delta int64) {
	if delta <= 0 {
		return
	}
	sh := &s.shards[maphash.String(s.seed, key)&s.mask]
	sh.mu.Lock()
	if sh.ops++; sh.ops >= s.clockEvery {
		sh.ops = 0
		sh.now = s.cfg.Now().UnixNano()
	}
	sh.observe(s, key, delta, sh.now)
	sh.mu.Unlock()
}

// Rate returns key's writes per second in this process, or 0 when the
// sketch does not track key. It makes Sketch a RateSource of local rates.
func (s *Sketch) Rate(key string) float64 {
	now := s.cfg.Now().UnixNano()
	sh := &s.shards[maphash.String(s.seed, key)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.tick(now)
	e, ok := sh.idx[key]
	if !ok {
		return 0
	}
	return s.rate(e, now)
}

// Top returns up to n tracked keys with the highest rates, highest first
// (all of them when n <= 0). Keys with a zero rate are left out.
func (s *Sketch) Top(n int) []KeyRate {
	now := s.cfg.Now().UnixNano()
	var out []KeyRate
	for i := range s.shards {
		sh := &s.shards[i]
		sh.mu.Lock()
		sh.tick(now)
		for _, e := range sh.heap {
			if r := s.rate(e, now); r > 0 {
				out = append(out, KeyRate{Key: e.key, Rate: r, Count: e.count, ErrBound: e.err})
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b KeyRate) int {
		switch {
		case a.Rate != b.Rate:
			if a.Rate > b.Rate {
				return -1
			}
			return 1
		case a.Count != b.Count:
			if a.Count > b.Count {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Key, b.Key)
	})
	if n > 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// rate returns e's writes per second at now (ns): the sum of the last
// Buckets complete buckets and the current one, over the time they span,
// or over the time since e entered the sketch when that is shorter (but
// never less than one bucket).
func (s *Sketch) rate(e *entry, now int64) float64 {
	b := now / s.bucket
	e.advance(b)
	if b < e.last {
		b = e.last // the clock went back
	}
	var sum int64
	for i := int64(0); i <= int64(s.cfg.Buckets); i++ {
		sum += e.ring[(b-i)&(ringSize-1)]
	}
	span := int64(s.cfg.Buckets)*s.bucket + (now - b*s.bucket)
	if young := now - e.since; young < span {
		span = max(young, s.bucket)
	}
	return float64(sum) / (float64(span) / float64(time.Second))
}

// take returns the writes of key observed since the last take (0 for an
// untracked key) and starts counting afresh.
func (s *Sketch) take(key string) int64 {
	sh := &s.shards[maphash.String(s.seed, key)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	e, ok := sh.idx[key]
	if !ok {
		return 0
	}
	n := e.fresh
	e.fresh = 0
	return n
}

// giveBack returns n writes that take handed out but could not be
// published, so that the next take includes them.
func (s *Sketch) giveBack(key string, n int64) {
	sh := &s.shards[maphash.String(s.seed, key)&s.mask]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if e, ok := sh.idx[key]; ok {
		e.fresh += n
	}
}
