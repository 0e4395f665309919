package hotkeys

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// Counters is the part of store.Store that Shared uses.
type Counters interface {
	// IncrMulti applies increments, one pipelined round per node.
	IncrMulti(ctx context.Context, ops []store.IncrOp) ([]store.IncrResult, error)
	// Get reads keys; a missing key reads 0.
	Get(ctx context.Context, keys []string) ([]int64, error)
}

// SharedConfig configures a Shared. Store and Local are required; other
// zero fields mean their defaults.
type SharedConfig struct {
	// Store holds the cluster-wide write counters (normally the Client's
	// store.Store).
	Store Counters
	// Local is this process's sketch.
	Local *Sketch
	// Window is the span over which the cluster rate is measured; 0
	// means DefaultWindow. It should cover several Syncs of every
	// process (the Controller syncs every Interval).
	Window time.Duration
	// Timeout bounds one Sync; 0 means DefaultSharedTimeout.
	Timeout time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
}

// Shared estimates cluster-wide rates through the cache. For each key it
// syncs, every process adds the writes it observed since its previous Sync
// to one counter in the cache, WriteKey(key), so that counter is the
// cluster's running write count of the key; the rate is its growth over
// Window, as seen by this process's Syncs. It is never below this
// process's own rate. Writes a process made while the key was outside its
// sketch are not counted, so the estimate errs low by at most the tail
// below every process's top K.
//
// The write counters are plain cache counters: one per key that was ever
// synced, never expiring (8 bytes of value each). A retried or lost
// increment only skews a rate estimate; no counter value depends on it.
type Shared struct {
	cfg SharedConfig

	mu     sync.Mutex
	series map[string]*series
}

// sample is one reading of a write counter.
type sample struct {
	at time.Time
	v  int64
}

// series holds the recent readings of one write counter, oldest first.
type series struct {
	s    []sample
	seen time.Time
}

// WriteKey returns the cache key of key's cluster-wide write counter:
// "{K#hk}:w", in the slot of a sub-counter labelled "hk".
func WriteKey(key string) string { return keyspace.AuxKey(key, "hk", "w", "") }

// DefaultSharedTimeout bounds one Sync when SharedConfig.Timeout is 0.
const DefaultSharedTimeout = time.Second

// NewShared returns a Shared for cfg. The caller's SharedConfig is not
// modified.
func NewShared(cfg SharedConfig) (*Shared, error) {
	if cfg.Store == nil || cfg.Local == nil {
		return nil, fmt.Errorf("%w: Shared needs a Store and a Local sketch", ErrConfig)
	}
	if cfg.Window < 0 || cfg.Timeout < 0 {
		return nil, fmt.Errorf("%w: negative Window or Timeout", ErrConfig)
	}
	if cfg.Window == 0 {
		cfg.Window = DefaultWindow
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = DefaultSharedTimeout
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return &Shared{cfg: cfg, series: map[string]*series{}}, nil
}

// Sync adds this process's new writes of keys to their write counters and
// reads the counters back: one IncrMulti (and one Get for keys without new
// writes), each one pipelined round per node. Writes that could not be
// added are kept for the next Sync.
func (s *Shared) Sync(ctx context.Context, keys []string) error {
	if len(keys) == 0 {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	var ops []store.IncrOp
	var incrKeys, getKeys, getSub []string
	for _, k := range keys {
		if n := s.cfg.Local.take(k); n > 0 {
			ops = append(ops, store.IncrOp{Key: WriteKey(k), Delta: n})
			incrKeys = append(incrKeys, k)
		} else {
			getKeys = append(getKeys, k)
			getSub = append(getSub, WriteKey(k))
		}
	}
	var errs []error
	if len(ops) > 0 {
		res, err := s.cfg.Store.IncrMulti(ctx, ops)
		if err != nil {
			errs = append(errs, err)
			res = nil
		}
		at := s.cfg.Now()
		for i, k := range incrKeys {
			if res == nil || res[i].Err != nil || !res[i].Applied {
				s.cfg.Local.giveBack(k, ops[i].Delta)
				if res != nil && res[i].Err != nil {
					errs = append(errs, res[i].Err)
				}
				continue
			}
			s.add(k, at, res[i].Value)
		}
	}
	if len(getSub) > 0 {
		vals, err := s.cfg.Store.Get(ctx, getSub)
		if err != nil {
			errs = append(errs, err)
		} else {
			at := s.cfg.Now()
			for i, k := range getKeys {
				s.add(k, at, vals[i])
			}
		}
	}
	s.prune()
	if len(errs) > 0 {
		return fmt.Errorf("hotkeys: sync of %d keys: %w", len(keys), errors.Join(errs...))
	}
	return nil
}

// add records a reading of key's write counter.
func (s *Shared) add(key string, at time.Time, v int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.series[key]
	if sr == nil {
		sr = &series{}
		s.series[key] = sr
	}
	sr.seen = at
	if n := len(sr.s); n > 0 && (v < sr.s[n-1].v || at.Before(sr.s[n-1].at)) {
		sr.s = sr.s[:0] // the counter was lost (or the clock went back)
	}
	sr.s = append(sr.s, sample{at, v})
	// Keep one reading at least Window older than the newest, and the
	// ones after it.
	cut := 0
	for i := range sr.s {
		if at.Sub(sr.s[i].at) >= s.cfg.Window {
			cut = i
		}
	}
	sr.s = sr.s[cut:]
}

// prune forgets keys not synced for four windows.
func (s *Shared) prune() {
	now := s.cfg.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, sr := range s.series {
		if now.Sub(sr.seen) > 4*s.cfg.Window {
			delete(s.series, k)
		}
	}
}

// Rate returns key's cluster-wide writes per second: the growth of its
// write counter over about Window, or this process's own rate when that
// is higher (or no two readings exist yet).
func (s *Shared) Rate(key string) float64 {
	local := s.cfg.Local.Rate(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	sr := s.series[key]
	if sr == nil || len(sr.s) < 2 {
		return local
	}
	first, last := sr.s[0], sr.s[len(sr.s)-1]
	span := last.at.Sub(first.at)
	if span <= 0 {
		return local
	}
	return max(local, float64(last.v-first.v)/span.Seconds())
}
