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
	// byTopo is the totals of nodes by index into the last topology an
	// increment was written with.
	byTopo atomic.Pointer[nodeTotals]
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

// Sampling of unbuffered increments for the hot-key sketches: a sharded
// counter's increments written with one cached write set are counted
// exactly up to exactFirst, and after that one in sampleEvery, with
// weight sampleEvery.
const (
	exactFirst  = 64
	sampleEvery = 8 // a power of two
)

// incremented records one unbuffered increment of key, written to slot
// of topology t (nil: unknown). writes counts the increments written with
// the counter's cached write set (nil: not cached), and r is the random
// value that chose the sub-counter (pick uses its high bits). The node's
// write total is always exact. The sketches see every increment of a
// counter with one sub-counter (cold or not: its first writes must be
// seen for it to grow), and of any counter until exactFirst increments
// used its cached write set; after that, a sharded counter (more than one
// sub-counter, sized for hundreds of writes per second or more) is
// sampled by r's low bits, one in sampleEvery with weight sampleEvery:
// the sketches then cost one observation instead of three per
// increment, and the rates stay unbiased (at 1,000/s over the default
// 2 s window their standard error is 6%). The count's cache line is
// written only until it reaches exactFirst, so hot writers on several
// cores share it read-only.
func (o *observer) incremented(key string, t *store.Topology, slot uint16, sharded bool, writes *atomic.Uint32, r uint64) {
	n := int64(1)
	switch {
	case !sharded || writes == nil:
	case writes.Load() < exactFirst:
		writes.Add(1)
	case r&(sampleEvery-1) != 0:
		o.countOwner(t, slot)
		return
	default:
		n = sampleEvery
	}
	o.arrivals.Observe(key, n)
	o.writes.Observe(key, n)
	if t != nil {
		o.nodeRate.Observe(t.NodeOfSlot(slot), n)
		o.countOwner(t, slot)
	}
}

// nodeTotals is the write totals of the nodes of one topology, by index
// into its Nodes: the totals of the nodes map, found without hashing a
// node's name.
type nodeTotals struct {
	topo   *store.Topology
	totals []*atomic.Uint64
}

// countOwner adds one write to the total of the node that owns slot in t
// (nil: none).
func (o *observer) countOwner(t *store.Topology, slot uint16) {
	if t == nil {
		return
	}
	nt := o.byTopo.Load()
	if nt == nil || nt.topo != t {
		nt = &nodeTotals{topo: t, totals: make([]*atomic.Uint64, len(t.Nodes))}
		for i, node := range t.Nodes {
			nt.totals[i] = o.total(node)
		}
		o.byTopo.Store(nt)
	}
	nt.totals[t.Owner[slot]].Add(1)
}

// wroteKey records n cache writes of key.
func (o *observer) wroteKey(key string, n int64) { o.writes.Observe(key, n) }

// wroteNode records n cache writes on node ("" unknown).
func (o *observer) wroteNode(node string, n int64) {
	if node == "" {
		return
	}
	o.nodeRate.Observe(node, n)
	o.countNode(node, n)
}

// countNode adds n to node's total of cache writes ("" unknown: none).
func (o *observer) countNode(node string, n int64) {
	if node == "" {
		return
	}
	o.total(node).Add(uint64(n))
}

// total returns node's total of cache writes.
func (o *observer) total(node string) *atomic.Uint64 {
	if c := (*o.nodes.Load())[node]; c != nil {
		return c
	}
	return o.addNode(node)
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
	// Rate is writes per second over the last few seconds (unbuffered
	// increments of a hot sharded counter in it are sampled: see
	// TopKeys).
	Rate float64 `json:"rate"`
	// Total is the writes sent since the Client started (exact).
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
// Past its first 64 increments with one cached write set, the unbuffered
// increments of a counter with more than one sub-counter are counted from
// a sample, one in 8 with weight 8; a counter with one sub-counter, and
// every buffered flush, is counted exactly.
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
	t := e.topology()
	if t == nil {
		return ""
	}
	return t.Nodes[t.Owner[slot]]
}

// topology returns the store's slot map, or nil when it has none.
func (e *Engine) topology() *store.Topology {
	t, err := e.st.Topology(context.Background())
	if err != nil || t == nil || len(t.Nodes) == 0 {
		return nil
	}
	return t
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
