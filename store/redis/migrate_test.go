package redis

import (
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/hotcount/hotcount/keyspace"
)

// TestSlotMigration moves a slot to another primary while the store is in
// use: half-way (keys answered with ASK), after the move without a refresh
// (MOVED), and back again with an explicit RefreshTopology.
func TestSlotMigration(t *testing.T) {
	ctx := ctxT(t)
	s := newClusterStore(t, Config{TopologyRefresh: time.Hour}) // no periodic refresh during the test
	topo0, _ := s.Topology(ctx)
	all := topo0.Nodes
	slot := keyspace.Slot("migrating")
	src := topo0.NodeOfSlot(slot)
	dst := all[0]
	if dst == src {
		dst = all[1]
	}
	t.Cleanup(func() { restoreSlot(t, slot, src, all) })

	keys := make([]string, 10)
	for i := range keys {
		keys[i] = "{migrating}:" + strconv.Itoa(i)
	}
	if err := s.Del(ctx, keys); err != nil {
		t.Fatal(err)
	}
	want := make([]int64, len(keys))
	for i, k := range keys {
		want[i] = int64(i + 1)
		if _, err := s.IncrBy(ctx, k, want[i]); err != nil {
			t.Fatal(err)
		}
	}
	check := func(stage string) {
		t.Helper()
		got, err := s.Get(ctx, keys)
		if err != nil {
			t.Fatalf("%s: Get: %v", stage, err)
		}
		for i := range keys {
			if got[i] != want[i] {
				t.Fatalf("%s: %s = %d, want %d", stage, keys[i], got[i], want[i])
			}
		}
	}

	// Half-way: the slot is MIGRATING on src, IMPORTING on dst, and half of
	// the keys have moved.
	sl := strconv.Itoa(int(slot))
	mustDo(t, dst, "CLUSTER", "SETSLOT", sl, "IMPORTING", clusterID(t, src))
	mustDo(t, src, "CLUSTER", "SETSLOT", sl, "MIGRATING", clusterID(t, dst))
	host, port, _ := net.SplitHostPort(dst)
	mustDo(t, src, append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys[:5]...)...)
	redirects := s.Stats()[src].Redirects + s.Stats()[dst].Redirects
	check("half-way")
	if v, err := s.IncrBy(ctx, keys[0], 100); err != nil || v != want[0]+100 {
		t.Fatalf("half-way: IncrBy of a moved key = %d, %v", v, err)
	}
	want[0] += 100
	if v, err := s.IncrBy(ctx, keys[9], 100); err != nil || v != want[9]+100 {
		t.Fatalf("half-way: IncrBy of a key not yet moved = %d, %v", v, err)
	}
	want[9] += 100
	if r := s.Stats()[src].Redirects + s.Stats()[dst].Redirects; r <= redirects {
		t.Fatalf("half-way: no command was redirected (%d before, %d after)", redirects, r)
	}
	if topo, _ := s.Topology(ctx); topo.NodeOfSlot(slot) != src {
		t.Fatalf("half-way: topology moved the slot early to %s", topo.NodeOfSlot(slot))
	}

	// Finish the move; the store learns it from MOVED, without a refresh
	// call.
	mustDo(t, src, append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys[5:]...)...)
	for _, a := range all {
		mustDo(t, a, "CLUSTER", "SETSLOT", sl, "NODE", clusterID(t, dst))
	}
	waitOwner(t, slot, dst, all)
	check("after the move")
	topo1, _ := s.Topology(ctx)
	if topo1.NodeOfSlot(slot) != dst || topo1.Epoch <= topo0.Epoch {
		t.Fatalf("after MOVED: slot %d on %s epoch %d, want %s and epoch > %d", slot, topo1.NodeOfSlot(slot), topo1.Epoch, dst, topo0.Epoch)
	}
	for _, k := range keys { // every key's round now goes straight to dst
		if topo1.NodeOf(k) != dst {
			t.Fatalf("%s on %s", k, topo1.NodeOf(k))
		}
	}
	before := s.Stats()[dst]
	check("direct")
	if after := s.Stats()[dst]; after.Rounds-before.Rounds != 1 || after.Redirects != before.Redirects {
		t.Fatalf("after refresh: %+v → %+v, want one round and no redirect", before, after)
	}

	// Move it back; an explicit refresh shows the old owner again.
	migrateSlot(t, slot, dst, src, all)
	if err := s.RefreshTopology(ctx); err != nil {
		t.Fatal(err)
	}
	topo2, _ := s.Topology(ctx)
	if topo2.NodeOfSlot(slot) != src || topo2.Epoch <= topo1.Epoch {
		t.Fatalf("after RefreshTopology: slot on %s epoch %d", topo2.NodeOfSlot(slot), topo2.Epoch)
	}
	check("moved back")
	if err := s.RefreshTopology(ctx); err != nil {
		t.Fatal(err)
	}
	if topo3, _ := s.Topology(ctx); topo3 != topo2 {
		t.Fatalf("a refresh without change replaced the snapshot (epoch %d → %d)", topo2.Epoch, topo3.Epoch)
	}
}

func mustDo(t testing.TB, addr string, args ...string) {
	t.Helper()
	if err := nodeDo(t, addr, args...).Error(); err != nil {
		t.Fatalf("%v on %s: %v", args, addr, err)
	}
}

func waitOwner(t testing.TB, slot uint16, owner string, all []string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, a := range all {
		for shardOwners(t, a)[slot] != owner {
			if time.Now().After(deadline) {
				t.Fatalf("%s does not see slot %d on %s", a, slot, owner)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// restoreSlot puts slot back on owner after a failed test, so that the
// shared cluster stays as it was.
func restoreSlot(t testing.TB, slot uint16, owner string, all []string) {
	sl := strconv.Itoa(int(slot))
	for _, a := range all {
		nodeDo(t, a, "CLUSTER", "SETSLOT", sl, "STABLE")
	}
	if cur := shardOwners(t, owner)[slot]; cur != owner {
		migrateSlot(t, slot, cur, owner, all)
	}
}
