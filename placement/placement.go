// Package placement chooses sub-counter labels that land on distinct
// primaries, and reports where a counter's sub-counters live.
//
// Sub-keys hash independently ("{K#L}" is placed by CRC16("K#L") mod 16384),
// so N arbitrary labels collide on nodes: 8 naive labels on 20 primaries are
// all on distinct primaries only about 20% of the time. Knowing the
// slot→primary map, Choose searches the candidate labels "0", "1", "2", ...
// in order and greedily takes a candidate when its primary currently holds
// the fewest of the chosen sub-counters (among the primaries that own at
// least one slot). It stops after N labels. Hence:
//
//   - N ≤ primaries: every label is on its own primary;
//   - N > primaries: the counts per primary differ by at most one.
//
// The search is deterministic: every process that sees the same topology
// picks the same labels for the same key. Extend continues the same greedy
// rule from labels already in use (to grow a counter or to replace colliding
// sub-counters), and Keep picks the subset of existing labels to retain
// when a counter shrinks.
//
// Report describes a label set on a topology: the slot and primary of each
// sub-counter, the sub-counters and value per primary, and the collisions
// (sub-counters beyond an even spread).
package placement

import (
	"errors"
	"strconv"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// MaxCandidates bounds the label search of Choose and Extend. A primary
// that owns a single slot is hit once in 16384 candidates on average, so
// the bound is never reached on a real slot map.
const MaxCandidates = 1 << 22

// ErrNoTopology is returned (wrapped) by helpers that need a topology and
// got nil or one without nodes.
var ErrNoTopology = errors.New("placement: no topology")

// Naive returns the labels "0" … "n-1", which ignore the topology.
func Naive(n int) []string { return keyspace.NaiveLabels(n) }

// Choose returns n labels for key whose sub-keys are spread over t's
// primaries: distinct primaries when n is at most the number of primaries,
// otherwise counts per primary that differ by at most one. Labels in avoid
// are never chosen. A nil or empty topology yields Naive labels (skipping
// avoid).
func Choose(t *store.Topology, key string, n int, avoid []string) []string {
	return Extend(t, key, nil, n, avoid)
}

// Extend returns keep followed by labels chosen as by Choose until there
// are n in all, taking into account the primaries that keep already
// occupies. When len(keep) ≥ n it returns a copy of keep.
func Extend(t *store.Topology, key string, keep []string, n int, avoid []string) []string {
	out := append(make([]string, 0, max(n, len(keep))), keep...)
	if len(out) >= n {
		return out
	}
	skip := make(map[string]bool, len(keep)+len(avoid))
	for _, l := range keep {
		skip[l] = true
	}
	for _, l := range avoid {
		skip[l] = true
	}
	if t == nil || len(t.Nodes) == 0 {
		for i := 0; len(out) < n; i++ {
			if l := strconv.Itoa(i); !skip[l] {
				out = append(out, l)
			}
		}
		return out
	}
	counts := make([]int, len(t.Nodes))
	owns := ownedNodes(t)
	for _, l := range keep {
		counts[nodeIndex(t, key, l)]++
	}
	low := minCount(counts, owns)
	for i := 0; len(out) < n; i++ {
		l := strconv.Itoa(i)
		if skip[l] {
			continue
		}
		idx := nodeIndex(t, key, l)
		if i < MaxCandidates && counts[idx] != low {
			continue
		}
		// Past MaxCandidates (an unreachable primary) any label is taken.
		out = append(out, l)
		counts[idx]++
		low = minCount(counts, owns)
	}
	return out
}

// Keep returns n of labels (in their order) that are spread over t's
// primaries as evenly as labels allow: the greedy rule of Choose applied to
// the given labels instead of the candidates. Use it to decide which
// sub-counters remain when a counter shrinks or is re-placed.
func Keep(t *store.Topology, key string, labels []string, n int) []string {
	if n >= len(labels) {
		return append([]string(nil), labels...)
	}
	if n <= 0 {
		return nil
	}
	if t == nil || len(t.Nodes) == 0 {
		return append([]string(nil), labels[:n]...)
	}
	counts := make([]int, len(t.Nodes))
	taken := make([]bool, len(labels))
	out := make([]string, 0, n)
	for len(out) < n {
		// Pick, in order, the first label whose primary has the fewest.
		best := -1
		for i, l := range labels {
			if taken[i] {
				continue
			}
			if best < 0 || counts[nodeIndex(t, key, l)] < counts[nodeIndex(t, key, labels[best])] {
				best = i
			}
		}
		taken[best] = true
		counts[nodeIndex(t, key, labels[best])]++
		out = append(out, labels[best])
	}
	// Restore the original order.
	ordered := out[:0:0]
	for i, l := range labels {
		if taken[i] {
			ordered = append(ordered, l)
		}
	}
	return ordered
}

// nodeIndex is the index in t.Nodes of the primary of key's sub-counter l.
func nodeIndex(t *store.Topology, key, l string) int {
	return int(t.Owner[keyspace.Slot(keyspace.SubKey(key, l))])
}

// ownedNodes marks the nodes that own at least one slot.
func ownedNodes(t *store.Topology) []bool {
	owns := make([]bool, len(t.Nodes))
	for _, o := range t.Owner {
		if int(o) < len(owns) {
			owns[o] = true
		}
	}
	return owns
}

func minCount(counts []int, owns []bool) int {
	low := -1
	for i, c := range counts {
		if owns[i] && (low < 0 || c < low) {
			low = c
		}
	}
	return low
}
