package hotkeys

import (
	"strings"
	"sync"
)

// shard is one Space-Saving summary: up to k entries in a min-heap by
// count, indexed by key. All fields are guarded by mu.
type shard struct {
	mu        sync.Mutex
	idx       map[string]*entry
	heap      []*entry // min-heap on count
	pool      []entry  // backing storage of the entries, allocated once
	nextDecay int64    // ns; 0 means not started
	now       int64    // last clock reading, ns
	ops       uint32   // Observe calls since that reading
	last      *entry   // the entry observe found or made last (its key may have changed since)
	_         [32]byte // keep neighbouring shards' locks off this cache line
}

// tick records a fresh clock reading. The caller holds mu.
func (sh *shard) tick(now int64) {
	sh.now = now
	sh.ops = 0
}

// entry is one tracked key.
type entry struct {
	key   string
	count int64 // Space-Saving count (decayed)
	err   int64 // overestimation bound of count
	pos   int   // index in heap
	since int64 // ns when the key entered the shard
	fresh int64 // writes since the last Sketch.take
	last  int64 // index of the newest bucket in ring
	ring  [ringSize]int64
}

func (sh *shard) init(k int) {
	sh.idx = make(map[string]*entry, k)
	sh.heap = make([]*entry, 0, k)
	sh.pool = make([]entry, k)
}

// observe counts delta writes of key at now (ns). The caller holds mu.
func (sh *shard) observe(s *Sketch, key string, delta, now int64) {
	if now >= sh.nextDecay {
		if sh.nextDecay != 0 {
			sh.halve()
		}
		sh.nextDecay = now + s.decay
	}
	b := now / s.bucket
	// A hot key is observed many times in a row: the entry of the last
	// key observed is checked before the map. An entry lives as long as
	// the shard, and its key is the one it counts now.
	e := sh.last
	if e == nil || e.key != key {
		e = sh.idx[key]
	}
	if e != nil {
		sh.last = e
		e.add(b, delta)
		e.count += delta
		e.fresh += delta
		sh.down(e.pos)
		return
	}
	var floor int64
	if n := len(sh.heap); n < len(sh.pool) {
		e = &sh.pool[n]
		e.pos = n
		sh.heap = append(sh.heap, e)
	} else {
		// Space-Saving: the new key takes over the smallest counter and
		// inherits its count as its error bound.
		e = sh.heap[0]
		delete(sh.idx, e.key)
		floor = e.count
	}
	*e = entry{key: strings.Clone(key), count: floor + delta, err: floor, pos: e.pos, since: now, last: b, fresh: delta}
	e.ring[b&(ringSize-1)] = delta
	sh.idx[e.key] = e
	sh.last = e
	sh.up(e.pos)
	sh.down(e.pos)
}

// halve divides every count and error bound by two. Halving is monotonic,
// so the heap order survives it.
func (sh *shard) halve() {
	for _, e := range sh.heap {
		e.count /= 2
		e.err /= 2
	}
}

// add counts delta writes in bucket b.
func (e *entry) add(b, delta int64) {
	e.advance(b)
	if b < e.last {
		b = e.last // the clock went back: count in the newest bucket
	}
	e.ring[b&(ringSize-1)] += delta
}

// advance makes b the newest bucket, zeroing the buckets in between.
func (e *entry) advance(b int64) {
	if b <= e.last {
		return
	}
	n := min(b-e.last, ringSize)
	for i := int64(1); i <= n; i++ {
		e.ring[(e.last+i)&(ringSize-1)] = 0
	}
	e.last = b
}

func (sh *shard) less(i, j int) bool { return sh.heap[i].count < sh.heap[j].count }

func (sh *shard) swap(i, j int) {
	h := sh.heap
	h[i], h[j] = h[j], h[i]
	h[i].pos = i
	h[j].pos = j
}

func (sh *shard) up(i int) {
	for i > 0 {
		p := (i - 1) / 2
		if !sh.less(i, p) {
			return
		}
		sh.swap(i, p)
		i = p
	}
}

func (sh *shard) down(i int) {
	n := len(sh.heap)
	for {
		l := 2*i + 1
		if l >= n {
			return
		}
		m := l
		if r := l + 1; r < n && sh.less(r, l) {
			m = r
		}
		if !sh.less(m, i) {
			return
		}
		sh.swap(i, m)
		i = m
	}
}
