package meta

import (
	"context"
	"fmt"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/placement"
	"github.com/hotcount/hotcount/store"
)

// ShardReport is the placement report of one counter: where its
// sub-counters live and what they hold. It is the one shard report of
// hotcount; the library, the HTTP API and the command line all use it.
type ShardReport struct {
	// Key is the counter key.
	Key string `json:"key"`
	// N is the number of sub-counters increments go to (the write set).
	N int `json:"n"`
	// ReadN is the number of sub-counters reads sum (the read set): more
	// than N while a fold is under way.
	ReadN int `json:"read_n"`
	// Epoch is the metadata epoch; 0 when the counter has no metadata
	// (its default labels are shown).
	Epoch uint64 `json:"epoch"`
	// Value is the sum of the read set.
	Value int64 `json:"value"`
	// DistinctNodes is how many primaries hold sub-counters of the read
	// set.
	DistinctNodes int `json:"distinct_nodes"`
	// Collisions counts write-set sub-counters beyond an even spread over
	// the primaries (0 while placement is intact; a slot migration can
	// raise it; Rebalance removes it).
	Collisions int `json:"collisions"`
	// Shards lists the sub-counters of the read set, with values.
	Shards []placement.Shard `json:"shards"`
	// Folds lists the folds in progress.
	Folds []FoldState `json:"folds,omitempty"`
	// Pinned is true when N was set by hand (see Meta.Pinned): automatic
	// N and cooling leave the counter alone.
	Pinned bool `json:"pinned"`
	// Exists is false for a counter that does not exist yet: no
	// metadata, and nothing in its sub-counters. Its report shows the
	// labels it would get.
	Exists bool `json:"exists"`
}

// Shards reports key's labels, their slots, primaries and values. It
// creates no state: a counter without metadata shows its default labels.
func (m *Manager) Shards(ctx context.Context, key string) (ShardReport, error) {
	return m.ShardsN(ctx, key, 0)
}

// ShardsN is Shards, except that a counter that does not exist yet shows
// the placement n sub-counters would get (n 0: its default labels).
func (m *Manager) ShardsN(ctx context.Context, key string, n int) (ShardReport, error) {
	if err := keyspace.Validate(key); err != nil {
		return ShardReport{}, err
	}
	if n < 0 || n > keyspace.MaxN {
		return ShardReport{}, fmt.Errorf("%w: %d (want 1..%d)", ErrInvalidN, n, keyspace.MaxN)
	}
	cur, err := m.load(ctx, key, false)
	if err != nil {
		return ShardReport{}, err
	}
	t, err := m.topology(ctx)
	if err != nil {
		return ShardReport{}, err
	}
	r, err := m.report(ctx, t, key, cur)
	if err != nil || r.Exists || n == 0 || n == len(cur.Write) {
		return r, err
	}
	labels := coldSet
	switch {
	case m.cfg.Naive:
		labels = keyspace.NaiveLabels(n)
	case n > 1:
		labels = placement.Extend(t, key, coldSet, n, nil)
	}
	return m.report(ctx, t, key, Meta{Write: labels, Read: labels})
}

// report is the ShardReport of record cur.
func (m *Manager) report(ctx context.Context, t *store.Topology, key string, cur Meta) (ShardReport, error) {
	subs := make([]string, len(cur.Read))
	for i, l := range cur.Read {
		subs[i] = keyspace.SubKey(key, l)
	}
	vals, err := m.b.Get(ctx, subs)
	if err != nil {
		return ShardReport{}, fmt.Errorf("meta: read %q: %w", key, err)
	}
	read := placement.Report(t, key, cur.Read, vals)
	r := ShardReport{
		Key:           key,
		N:             len(cur.Write),
		ReadN:         len(cur.Read),
		Epoch:         cur.Epoch,
		DistinctNodes: read.Distinct,
		Collisions:    placement.Report(t, key, cur.Write, nil).Collisions,
		Shards:        read.Shards,
		Folds:         cur.clone().Folds,
		Pinned:        cur.Pinned,
		Exists:        cur.Epoch > 0,
	}
	for _, v := range vals {
		r.Value += v
		r.Exists = r.Exists || v != 0
	}
	return r, nil
}

// Collisions returns how many of key's write-set sub-counters share a
// primary beyond an even spread on the current topology: non-zero after a
// slot migration moved a sub-counter onto a primary that holds another.
func (m *Manager) Collisions(ctx context.Context, key string) (int, error) {
	if err := keyspace.Validate(key); err != nil {
		return 0, err
	}
	cur, err := m.load(ctx, key, false)
	if err != nil {
		return 0, err
	}
	t, err := m.topology(ctx)
	if err != nil {
		return 0, err
	}
	return placement.Report(t, key, cur.Write, nil).Collisions, nil
}

// Rebalance restores an even spread of key's write set: it grows one new
// label on a free primary for each colliding sub-counter, then folds the
// colliding sub-counters into the new labels. It reports whether anything
// changed. Like Resize it waits out the TTL (twice).
func (m *Manager) Rebalance(ctx context.Context, key string) (bool, error) {
	if err := m.Resume(ctx, key); err != nil {
		return false, err
	}
	cur, err := m.load(ctx, key, false)
	if err != nil {
		return false, err
	}
	t, err := m.topology(ctx)
	if err != nil {
		return false, err
	}
	sum := placement.Report(t, key, cur.Write, nil)
	if sum.Collisions == 0 {
		return false, nil
	}
	colliding := sum.Colliding(t)
	keep := minus(cur.Write, colliding)
	fresh := placement.Extend(t, key, keep, len(cur.Write), cur.Read)[len(keep):]
	if err := m.grow(ctx, key, fresh); err != nil {
		return false, err
	}
	if err := m.fold(ctx, key, colliding, fresh); err != nil {
		return false, err
	}
	return true, nil
}
