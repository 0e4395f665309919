package hotcount_test

import (
	"context"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store/redis"
)

// TestAutoRebalanceAfterMigration moves the slot of one sub-counter onto
// the primary of another, with the real IMPORTING/MIGRATING, MIGRATE,
// SETSLOT NODE sequence, while writers run: the Client notices the new
// slot map, folds the collision away by itself, and nothing is lost.
func TestAutoRebalanceAfterMigration(t *testing.T) {
	ctx := context.Background()
	cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	st, err := redis.New(ctx, redis.Config{Addrs: cl.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	c := newClient(t, st, hotcount.Config{
		Defaults:  hotcount.Namespace{NoColdStart: true, N: 3},
		Reads:     hotcount.ReadConfig{NoCache: true},
		Meta:      hotcount.MetaConfig{TTL: 100 * time.Millisecond},
		Rebalance: hotcount.RebalanceConfig{Auto: true, Check: 100 * time.Millisecond},
	})
	key := "migrating:post:1"
	w, _, err := c.Labels(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	topo, _ := st.Topology(ctx)
	slot := keyspace.Slot(keyspace.SubKey(key, w[0]))
	src, dst := topo.NodeOfSlot(slot), topo.NodeOf(keyspace.SubKey(key, w[1]))

	stop := startWriters(t, c, key, 4, 1)
	time.Sleep(200 * time.Millisecond)
	if err := testenv.MigrateSlot(ctx, slot, src, dst, topo.Nodes); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		moved := c.Stats().Rebalance.Moved
		rep, err := c.Shards(ctx, key)
		if err == nil && moved > 0 && rep.Collisions == 0 && rep.DistinctNodes == 3 {
			t.Logf("slot %d (label %s) moved %s → %s; now labels %v on %d primaries", slot, w[0], src, dst, rep.Shards, rep.DistinctNodes)
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no automatic rebalance after the migration: moved %d, report %+v, %v", moved, rep, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	sent := stop()
	if r, err := c.Get(ctx, key); err != nil || r.Value != sent {
		t.Fatalf("total %+v %v, want %d", r, err, sent)
	}
}
