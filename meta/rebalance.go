package meta

import (
	"context"
	"fmt"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/placement"
)

// ShardReport describes a counter's metadata and where its sub-counters
// are.
type ShardReport struct {
	// Meta is the current record (Epoch 0: none, defaults shown).
	Meta Meta `json:"meta"`
	// Placement covers every label of the read set, with values.
	Placement placement.Summary `json:"placement"`
	// Collisions counts write-set sub-counters beyond an even spread over
	// the primaries (0 when placement is intact).
	Collisions int `json:"collisions"`
	// Total is the sum of the read set.
	Total int64 `json:"total"`
}

// Shards reports key's labels, their slots, primaries and values.
func (m *Manager) Shards(ctx context.Context, key string) (ShardReport, error) {
	if err := keyspace.Validate(key); err != nil {
		return ShardReport{}, err
	}
	cur, err := m.load(ctx, key, false)
	if err != nil {
		return ShardReport{}, err
	}
	t, err := m.topology(ctx)
	if err != nil {
		return ShardReport{}, err
	}
	subs := make([]string, len(cur.Read))
	for i, l := range cur.Read {
		subs[i] = keyspace.SubKey(key, l)
	}
	vals, err := m.b.Get(ctx, subs)
	if err != nil {
		return ShardReport{}, fmt.Errorf("meta: read %q: %w", key, err)
	}
	r := ShardReport{
		Meta:       cur.clone(),
		Placement:  placement.Report(t, key, cur.Read, vals),
		Collisions: placement.Report(t, key, cur.Write, nil).Collisions,
	}
	for _, v := range vals {
		r.Total += v
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
