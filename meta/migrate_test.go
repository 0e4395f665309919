package meta_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/meta"
	"github.com/hotcount/hotcount/placement"
)

// migrateSlot moves slot from primary src to primary dst the way
// redis-cli --cluster reshard does: IMPORTING on dst, MIGRATING on src,
// MIGRATE the keys in batches, then SETSLOT NODE on every primary.
func migrateSlot(t testing.TB, ctx context.Context, slot uint16, src, dst string, primaries []string) {
	t.Helper()
	if err := testenv.MigrateSlot(ctx, slot, src, dst, primaries); err != nil {
		t.Fatal(err)
	}
}

// TestMigrationRebalance migrates the slot of a sub-counter onto the
// primary of another while writers run: nothing is lost, Collisions
// reports it, and Rebalance restores distinct primaries.
func TestMigrationRebalance(t *testing.T) {
	ctx := ctxT(t)
	s := newRedis(t)
	key := "migrated:post"
	cfg := meta.Config{TTL: 50 * time.Millisecond, Margin: 250 * time.Millisecond, DefaultN: func(string) int { return 3 }}
	m := newManager(t, s, cfg)
	w, _, err := m.Labels(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	topo0, _ := s.Topology(ctx)
	if c, _ := m.Collisions(ctx, key); c != 0 {
		t.Fatalf("collisions before migration: %d (%v)", c, w)
	}
	slot := keyspace.Slot(keyspace.SubKey(key, w[0]))
	src, dst := topo0.NodeOfSlot(slot), topo0.NodeOf(keyspace.SubKey(key, w[1]))
	t.Cleanup(func() {
		// Give the slot back so other tests see the cluster as created.
		migrateSlot(t, context.Background(), slot, dst, src, topo0.Nodes)
		s.RefreshTopology(context.Background())
	})

	stop := make(chan struct{})
	var acked atomic.Int64
	wg := writers(t, ctx, s, newManager(t, s, cfg), key, 8, stop, &acked)
	waitAcked(t, &acked, 2000)
	migrateSlot(t, ctx, slot, src, dst, topo0.Nodes)
	atMove := acked.Load()
	if err := s.RefreshTopology(ctx); err != nil {
		t.Fatal(err)
	}
	if topo, _ := s.Topology(ctx); topo.NodeOfSlot(slot) != dst {
		t.Fatalf("slot %d still on %s after the move", slot, topo.NodeOfSlot(slot))
	}
	if c, err := m.Collisions(ctx, key); err != nil || c != 1 {
		t.Fatalf("Collisions after the move = %d, %v; want 1", c, err)
	}
	rep, err := m.Shards(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("after moving slot %d (label %s) %s → %s: %d distinct primaries, %d collision(s)", slot, w[0], src, dst, rep.DistinctNodes, rep.Collisions)
	waitAcked(t, &acked, atMove+2000)
	changed, err := m.Rebalance(ctx, key)
	if err != nil || !changed {
		t.Fatalf("Rebalance = %v, %v", changed, err)
	}
	waitAcked(t, &acked, acked.Load()+2000)
	close(stop)
	wg.Wait()

	mt := settled(t, m, key, 3)
	topo, _ := s.Topology(ctx)
	after := placement.Report(topo, key, mt.Write, nil)
	if after.Collisions != 0 || after.Distinct != 3 {
		t.Fatalf("after Rebalance: %+v", after)
	}
	got := sum(t, s, key, mt.Read)
	t.Logf("labels %v → %v; %d increments acknowledged (%d before the move), total %d", w, mt.Write, acked.Load(), atMove, got)
	if got != acked.Load() {
		t.Fatalf("total %d, acknowledged %d", got, acked.Load())
	}
}
