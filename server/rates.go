package server

import (
	"sort"
	"sync"
	"time"
)

// Rate measurement when the backend measures nothing itself.
//
// Time is cut into buckets of a fixed width; a ring holds the last few. Each
// bucket counts increments per key in a Space-Saving summary of at most K
// keys (Metwally et al.: when a new key arrives at a full summary it takes
// over the entry with the smallest count, inheriting that count as its
// error), so memory is bounded by buckets × K whatever the number of keys,
// and every key whose share of the increments exceeds 1/K is always kept.
// Each bucket also adds, per node, the expected writes of each increment:
// 1/N for each of the key's N sub-counters on that node. A rate is the sum
// over the ring divided by the time the ring covers.

// rateConfig configures a rateTracker.
type rateConfig struct {
	width   time.Duration // bucket width
	buckets int           // ring size
	k       int           // keys per bucket
	now     func() time.Time
}

// rateTracker measures per-key and per-node increment rates in bounded
// memory. It is safe for concurrent use.
type rateTracker struct {
	cfg   rateConfig
	start time.Time

	mu   sync.Mutex
	ring []rateBucket
}

type rateBucket struct {
	idx   int64 // bucket number since start; -1 when unused
	keys  map[string]*keyCount
	nodes map[string]float64
}

type keyCount struct {
	count int64
	n     int
}

func newRateTracker(cfg rateConfig) *rateTracker {
	if cfg.width <= 0 {
		cfg.width = time.Second
	}
	if cfg.buckets <= 0 {
		cfg.buckets = 10
	}
	if cfg.k <= 0 {
		cfg.k = 128
	}
	if cfg.now == nil {
		cfg.now = time.Now
	}
	t := &rateTracker{cfg: cfg, start: cfg.now(), ring: make([]rateBucket, cfg.buckets)}
	for i := range t.ring {
		t.ring[i] = rateBucket{idx: -1, keys: map[string]*keyCount{}, nodes: map[string]float64{}}
	}
	return t
}

// index returns the bucket number of now.
func (t *rateTracker) index(now time.Time) int64 {
	d := now.Sub(t.start)
	if d < 0 {
		return 0
	}
	return int64(d / t.cfg.width)
}

// bucket returns the ring slot of bucket idx, recycling it if it holds an
// older bucket. t.mu must be held.
func (t *rateTracker) bucket(idx int64) *rateBucket {
	b := &t.ring[idx%int64(len(t.ring))]
	if b.idx != idx {
		b.idx = idx
		clear(b.keys)
		clear(b.nodes)
	}
	return b
}

// add records one increment of key, whose sub-counters live on nodes (nil
// when unknown).
func (t *rateTracker) add(key string, nodes []string) {
	now := t.cfg.now()
	t.mu.Lock()
	defer t.mu.Unlock()
	b := t.bucket(t.index(now))
	if kc, ok := b.keys[key]; ok {
		kc.count++
		if len(nodes) > 0 {
			kc.n = len(nodes)
		}
	} else {
		var inherited int64
		if len(b.keys) >= t.cfg.k {
			var minKey string
			var minKC *keyCount
			for k, c := range b.keys {
				if minKC == nil || c.count < minKC.count {
					minKey, minKC = k, c
				}
			}
			inherited = minKC.count
			delete(b.keys, minKey)
		}
		b.keys[key] = &keyCount{count: inherited + 1, n: len(nodes)}
	}
	if len(nodes) > 0 {
		share := 1 / float64(len(nodes))
		for _, n := range nodes {
			b.nodes[n] += share
		}
	}
}

// window returns the live buckets and the seconds they cover. t.mu must be
// held.
func (t *rateTracker) window(now time.Time) ([]*rateBucket, float64) {
	cur := t.index(now)
	var live []*rateBucket
	for i := range t.ring {
		b := &t.ring[i]
		if b.idx >= 0 && b.idx > cur-int64(len(t.ring)) && b.idx <= cur {
			live = append(live, b)
		}
	}
	covered := now.Sub(t.start)
	if limit := time.Duration(len(t.ring)-1)*t.cfg.width + now.Sub(t.start.Add(time.Duration(cur)*t.cfg.width)); covered > limit {
		covered = limit
	}
	if covered < t.cfg.width {
		covered = t.cfg.width
	}
	return live, covered.Seconds()
}

// hotKeys returns up to n keys by rate, hottest first (ties by key).
func (t *rateTracker) hotKeys(n int) []HotKey {
	now := t.cfg.now()
	t.mu.Lock()
	live, secs := t.window(now)
	sum := map[string]*HotKey{}
	var latest = map[string]int64{}
	for _, b := range live {
		for k, c := range b.keys {
			h := sum[k]
			if h == nil {
				h = &HotKey{Key: k}
				sum[k] = h
			}
			h.Rate += float64(c.count)
			if c.n > 0 && b.idx >= latest[k] {
				h.N, latest[k] = c.n, b.idx
			}
		}
	}
	t.mu.Unlock()
	out := make([]HotKey, 0, len(sum))
	for _, h := range sum {
		h.Rate /= secs
		out = append(out, *h)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Rate != out[j].Rate {
			return out[i].Rate > out[j].Rate
		}
		return out[i].Key < out[j].Key
	})
	if n >= 0 && len(out) > n {
		out = out[:n]
	}
	return out
}

// nodeRates returns the rate of every node seen in the window and of every
// node in known, sorted by node name.
func (t *rateTracker) nodeRates(known []string) []NodeRate {
	now := t.cfg.now()
	sum := map[string]float64{}
	for _, n := range known {
		sum[n] = 0
	}
	t.mu.Lock()
	live, secs := t.window(now)
	for _, b := range live {
		for n, v := range b.nodes {
			sum[n] += v
		}
	}
	t.mu.Unlock()
	out := make([]NodeRate, 0, len(sum))
	for n, v := range sum {
		out = append(out, NodeRate{Node: n, Rate: v / secs})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}
