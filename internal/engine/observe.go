package engine

import (
	"context"
	"sort"
	"sync"
	"sync/atomic"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/hotkeys"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// observer measures the increments arriving per key, the cache writes per
// key and the cache writes per node.
type observer struct {
	arrivals *hotkeys.Sketch // increments accepted, per counter key
	writes   *hotkeys.Sketch // cache writes, per counter key
	nodeRate *hotkeys.Sketch // cache writes, per node (few keys: exact)

	mu    sync.Mutex                                // serialises adding nodes
	nodes atomic.Pointer[map[string]*atomic.Uint64] // cache writes per node, cumulative; replaced, never changed
}

func newObserver(c clock.Clock) (*observer, error) {
	o := &observer{}
	o.nodes.Store(&map[string]*atomic.Uint64{})
	var err error
	for _, sk := range []**hotkeys.Sketch{&o.arrivals, &o.writes, &o.nodeRate} {
		if *sk, err = hotkeys.NewSketch(hotkeys.SketchConfig{Now: c.Now}); err != nil {
			return nil, err
		}
	}
	return o, nil
}

// arrived records n increments of key accepted.
func (o *observer) arrived(key string, n int64) { o.arrivals.Observe(key, n) }

// wrote records n cache writes of key on node.
func (o *observer) wrote(key string, node string, n int64) {
	o.wroteKey(key, n)
	o.wroteNode(node, n)
}

// wroteKey records n cache writes of key.
func (o *observer) wroteKey(key string, n int64) { o.writes.Observe(key, n) }

// wroteNode records n cache writes on node ("" unknown).
func (o *observer) wroteNode(node string, n int64) {
	if node == "" {
		return
	}
	o.nodeRate.Observe(node, n)
	c := (*o.nodes.Load())[node]
	if c == nil {
		c = o.addNode(node)
	}
	c.Add(uint64(n))
}

// addNode returns node's write count, adding it to a copy of the map.
func (o *observer) addNode(node string) *atomic.Uint64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	old := *o.nodes.Load()
	if c := old[node]; c != nil {
		return c
	}
	m := make(map[string]*atomic.Uint64, len(old)+1)
	for k, v := range old {
		m[k] = v
	}
	c := new(atomic.Uint64)
	m[node] = c
	o.nodes.Store(&m)
	return c
}

// NodeWrites is the cache write traffic of one node.
type NodeWrites struct {
	// Node is the primary, "host:port" (or a simulated name).
	Node string `json:"node"`
	// Rate is writes per second over the last few seconds.
	Rate float64 `json:"rate"`
	// Total is the writes sent since the Client started.
	Total uint64 `json:"total"`
}

// NodeWrites returns the cache writes of every node this process wrote to,
// and every node of the topology, sorted by node.
func (e *Engine) NodeWrites(ctx context.Context) []NodeWrites {
	o := e.obs
	rates := map[string]float64{}
	for _, kr := range o.nodeRate.Top(1 << 16) {
		rates[kr.Key] = kr.Rate
	}
	seen := map[string]bool{}
	var out []NodeWrites
	for n, c := range *o.nodes.Load() {
		out = append(out, NodeWrites{Node: n, Rate: rates[n], Total: c.Load()})
		seen[n] = true
	}
	if t, err := e.st.Topology(ctx); err == nil {
		for _, n := range t.Nodes {
			if !seen[n] {
				out = append(out, NodeWrites{Node: n})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out
}

// KeyRate is the measured traffic of one counter.
type KeyRate struct {
	// Key is the counter key.
	Key string
	// Arrivals is increments accepted per second by this process.
	Arrivals float64
	// Writes is cache writes per second sent by this process.
	Writes float64
}

// TopKeys returns up to n of the counters with the most increments
// arriving in this process, hottest first, with their cache write rates.
func (e *Engine) TopKeys(n int) []KeyRate {
	top := e.obs.arrivals.Top(n)
	out := make([]KeyRate, len(top))
	for i, kr := range top {
		out[i] = KeyRate{Key: kr.Key, Arrivals: kr.Rate, Writes: e.obs.writes.Rate(kr.Key)}
	}
	return out
}

// WriteSketch is the sketch of cache writes per key (what automatic N
// sizes counters by).
func (e *Engine) WriteSketch() *hotkeys.Sketch { return e.obs.writes }

// nodeOf returns the node that owns sub's slot, or "".
func (e *Engine) nodeOf(sub string) string { return e.nodeOfSlot(keyspace.Slot(sub)) }

// nodeOfSlot returns the node that owns slot, or "".
func (e *Engine) nodeOfSlot(slot uint16) string {
	t, err := e.st.Topology(context.Background())
	if err != nil || t == nil || len(t.Nodes) == 0 {
		return ""
	}
	return t.Nodes[t.Owner[slot]]
}

// observedSink is the store as the buffers' sink: it records each flushed
// op's key, node and delta. A buffered key's arrivals are counted per
// flush as the magnitude of its flushed delta (exact for increments of
// +1, such as likes and views).
type observedSink struct {
	st store.Store
	e  *Engine
}

// IncrMulti implements buffer.Sink.
func (s observedSink) IncrMulti(ctx context.Context, ops []store.IncrOp) ([]store.IncrResult, error) {
	res, err := s.st.IncrMulti(ctx, ops)
	if err != nil {
		return res, err
	}
	// Before the buffer takes the deltas out of its pending amount: a
	// read that started before this sees the change (see Engine.Get).
	s.e.flushSeq.Add(1)
	for i, r := range res {
		if !r.Applied {
			continue
		}
		key, _, ok := keyspace.ParseSubKey(ops[i].Key)
		if !ok {
			continue
		}
		d := ops[i].Delta
		if d < 0 {
			d = -d
		}
		s.e.obs.arrived(key, d)
		s.e.obs.wrote(key, s.e.nodeOf(ops[i].Key), 1)
		// The delta left this process's pending amount: a cached sum read
		// before it landed would now miss it.
		s.e.cache.drop(key)
	}
	return res, nil
}
