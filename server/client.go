package server

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/placement"
)

// ClientBackend serves a *hotcount.Client. The embedded Client's own
// methods give Counters and, as the Client has them, IdempotentIncr
// (IncrID), ExactReader (GetExact) and Resizer (Resize); ClientBackend adds
// Healthy, ShardReporter, Placement and ModeReporter on top of the Client's
// store and label sets.
type ClientBackend struct {
	*hotcount.Client
	mode func(key string) string

	mu    sync.Mutex
	epoch uint64
	since time.Time           // when nodes was last emptied
	nodes map[string][]string // key -> node per write sub-counter, for epoch
}

// The key→nodes cache of a ClientBackend is emptied when it holds
// maxNodeCache keys, when the topology changes and every nodeCacheTTL (so a
// resize is seen).
const (
	maxNodeCache = 8192
	nodeCacheTTL = 2 * time.Second
)

// NewClientBackend wraps c. mode names the durability mode of a key; nil
// means the Client's own Mode.
func NewClientBackend(c *hotcount.Client, mode func(key string) string) *ClientBackend {
	return &ClientBackend{Client: c, mode: mode, nodes: map[string][]string{}}
}

// Mode implements ModeReporter.
func (b *ClientBackend) Mode(key string) string {
	if b.mode == nil {
		return string(b.Client.Mode(key))
	}
	return b.mode(key)
}

// pingKey is the sub-key /readyz reads; it is never written.
var pingKey = keyspace.SubKey("hotcount:ping", "0")

// Ping implements Healthy: one read of a probe key.
func (b *ClientBackend) Ping(ctx context.Context) error {
	if _, err := b.Store().Get(ctx, []string{pingKey}); err != nil {
		return fmt.Errorf("ping: %w", err)
	}
	return nil
}

// Shards implements ShardReporter from the Client's read label set (every
// sub-counter that may hold a value), the store's topology and one read of
// the sub-counters.
func (b *ClientBackend) Shards(ctx context.Context, key string) (Report, error) {
	if err := keyspace.Validate(key); err != nil {
		return Report{}, err
	}
	write, labels, err := b.Labels(ctx, key)
	if err != nil {
		return Report{}, fmt.Errorf("labels of %q: %w", key, err)
	}
	sub := make([]string, len(labels))
	for i, l := range labels {
		sub[i] = keyspace.SubKey(key, l)
	}
	topo, err := b.Store().Topology(ctx)
	if err != nil {
		return Report{}, fmt.Errorf("topology: %w", err)
	}
	vals, err := b.Store().Get(ctx, sub)
	if err != nil {
		return Report{}, fmt.Errorf("read sub-counters of %q: %w", key, err)
	}
	rep := Report{Key: key, N: len(sub), Shards: make([]Shard, len(sub))}
	distinct := map[string]bool{}
	for i, sk := range sub {
		node := topo.NodeOf(sk)
		distinct[node] = true
		rep.Shards[i] = Shard{Label: labels[i], SubKey: sk, Node: node, Slot: int(keyspace.Slot(sk)), Value: vals[i]}
		rep.Value += vals[i]
	}
	rep.DistinctNodes = len(distinct)
	rep.Collisions = placement.Report(topo, key, write, nil).Collisions
	return rep, nil
}

// SubCounterNodes implements Placement for the write label set (where
// increments go). Answers are cached briefly.
func (b *ClientBackend) SubCounterNodes(ctx context.Context, key string) ([]string, error) {
	topo, err := b.Store().Topology(ctx)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	b.mu.Lock()
	if now := time.Now(); b.epoch != topo.Epoch || len(b.nodes) >= maxNodeCache || now.Sub(b.since) > nodeCacheTTL {
		b.epoch, b.since = topo.Epoch, now
		clear(b.nodes)
	}
	nodes, ok := b.nodes[key]
	b.mu.Unlock()
	if ok {
		return nodes, nil
	}
	write, _, err := b.Labels(ctx, key)
	if err != nil {
		return nil, err
	}
	nodes = make([]string, len(write))
	for i, l := range write {
		nodes[i] = topo.NodeOf(keyspace.SubKey(key, l))
	}
	b.mu.Lock()
	if b.epoch == topo.Epoch {
		b.nodes[key] = nodes
	}
	b.mu.Unlock()
	return nodes, nil
}

// Nodes implements Placement.
func (b *ClientBackend) Nodes(ctx context.Context) ([]string, error) {
	topo, err := b.Store().Topology(ctx)
	if err != nil {
		return nil, fmt.Errorf("topology: %w", err)
	}
	return append([]string(nil), topo.Nodes...), nil
}

var (
	_ Counters       = (*ClientBackend)(nil)
	_ IdempotentIncr = (*ClientBackend)(nil)
	_ ExactReader    = (*ClientBackend)(nil)
	_ Resizer        = (*ClientBackend)(nil)
	_ Healthy        = (*ClientBackend)(nil)
	_ ShardReporter  = (*ClientBackend)(nil)
	_ Placement      = (*ClientBackend)(nil)
	_ ModeReporter   = (*ClientBackend)(nil)
)

// Decisions implements AutoN from the Client's automatic-N controller
// (none unless Config.AutoN).
func (b *ClientBackend) Decisions() []Decision {
	ds := b.AutoNDecisions()
	out := make([]Decision, 0, len(ds))
	for _, d := range ds {
		out = append(out, Decision{At: d.At, Key: d.Key, From: d.From, To: d.To, Rate: d.Rate,
			Action: string(d.Action), Reason: d.Reason, Error: d.Err})
	}
	return out
}
