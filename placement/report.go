package placement

import (
	"sort"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// Shard is one sub-counter of a report.
type Shard struct {
	// Label is the sub-counter's label.
	Label string `json:"label"`
	// Key is the sub-key, "{K#L}".
	Key string `json:"key"`
	// Slot is the hash slot of Key.
	Slot uint16 `json:"slot"`
	// Node is the primary that owns Slot.
	Node string `json:"node"`
	// Value is the sub-counter's value, when values were given.
	Value int64 `json:"value"`
}

// NodeShare is what one primary holds of a counter.
type NodeShare struct {
	// Node is the primary.
	Node string `json:"node"`
	// SubCounters is how many of the counter's sub-counters it holds.
	SubCounters int `json:"sub_counters"`
	// Value is the sum of those sub-counters.
	Value int64 `json:"value"`
	// WriteShare is the fraction of uniformly spread writes it receives:
	// SubCounters / N.
	WriteShare float64 `json:"write_share"`
}

// Summary describes where a counter's sub-counters live.
type Summary struct {
	// Key is the counter key.
	Key string `json:"key"`
	// Shards lists the sub-counters in label order as given.
	Shards []Shard `json:"shards"`
	// Nodes lists the primaries that hold sub-counters, by node name.
	Nodes []NodeShare `json:"nodes"`
	// Primaries is the number of primaries that own slots.
	Primaries int `json:"primaries"`
	// Distinct is the number of primaries holding at least one sub-counter.
	Distinct int `json:"distinct"`
	// Collisions counts the sub-counters beyond an even spread: for each
	// primary, how many more it holds than ceil(N / Primaries). With N ≤
	// Primaries this is N − Distinct, the number of sub-counters that share a
	// primary with an earlier one.
	Collisions int `json:"collisions"`
	// MaxShare is the largest WriteShare of any primary.
	MaxShare float64 `json:"max_share"`
}

// Report describes labels of key on t. values, when not nil, are the
// sub-counter values in the order of labels.
func Report(t *store.Topology, key string, labels []string, values []int64) Summary {
	r := Summary{Key: key, Shards: make([]Shard, len(labels))}
	per := map[string]*NodeShare{}
	for i, l := range labels {
		sub := keyspace.SubKey(key, l)
		sh := Shard{Label: l, Key: sub, Slot: keyspace.Slot(sub)}
		if t != nil && len(t.Nodes) > 0 {
			sh.Node = t.NodeOfSlot(sh.Slot)
		}
		if i < len(values) {
			sh.Value = values[i]
		}
		r.Shards[i] = sh
		ns := per[sh.Node]
		if ns == nil {
			ns = &NodeShare{Node: sh.Node}
			per[sh.Node] = ns
		}
		ns.SubCounters++
		ns.Value += sh.Value
	}
	if t != nil {
		for _, o := range ownedNodes(t) {
			if o {
				r.Primaries++
			}
		}
	}
	limit := len(labels) // with no topology nothing collides
	if r.Primaries > 0 {
		limit = (len(labels) + r.Primaries - 1) / r.Primaries
	}
	for _, ns := range per {
		ns.WriteShare = float64(ns.SubCounters) / float64(len(labels))
		r.MaxShare = max(r.MaxShare, ns.WriteShare)
		r.Collisions += max(0, ns.SubCounters-limit)
		r.Nodes = append(r.Nodes, *ns)
	}
	r.Distinct = len(r.Nodes)
	sort.Slice(r.Nodes, func(i, j int) bool { return r.Nodes[i].Node < r.Nodes[j].Node })
	return r
}

// Labels returns the labels of the report's sub-counters, in order.
func (r Summary) Labels() []string {
	out := make([]string, len(r.Shards))
	for i, s := range r.Shards {
		out[i] = s.Label
	}
	return out
}

// Colliding returns the labels that Keep would drop to leave an even
// spread: the sub-counters counted by Collisions.
func (r Summary) Colliding(t *store.Topology) []string {
	labels := r.Labels()
	n := len(labels) - r.Collisions
	kept := map[string]bool{}
	for _, l := range Keep(t, r.Key, labels, n) {
		kept[l] = true
	}
	var out []string
	for _, l := range labels {
		if !kept[l] {
			out = append(out, l)
		}
	}
	return out
}
