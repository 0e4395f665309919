package hotcount_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
)

// checkDeadline fails unless key exists with value want and a deadline
// within a second of at.
func checkDeadline(t *testing.T, c *hotcount.Client, key string, want int64, at time.Time, when string) {
	t.Helper()
	ctx := context.Background()
	got, exists, err := c.Deadline(ctx, key)
	if err != nil || !exists || got.IsZero() || got.Sub(at).Abs() > time.Second {
		t.Errorf("%s: deadline of %s = %v (exists %v, %v), want %v", when, key, got, exists, err, at)
	}
	if r, err := c.Get(ctx, key); err != nil || r.Value != want {
		t.Errorf("%s: %s = %+v %v, want %d", when, key, r, err, want)
	}
}

// TestDeadlineSurvivesRestart: a cold counter (one key) and a sharded one
// with deadlines keep them across a restart of a process on the embedded
// store, whose cache comes back empty and is restored from checkpoints.
func TestDeadlineSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() (*hotcount.Client, func()) {
		return openOnSQLite(t, dir, hotcount.Config{Reads: hotcount.ReadConfig{NoCache: true}})
	}
	c, done := open()
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	for _, k := range []string{"rt:1", "rt:sharded"} {
		if err := c.Incr(ctx, k, 3); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Resize(ctx, "rt:sharded", 3); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"rt:1", "rt:sharded"} {
		if ok, err := c.Expire(ctx, k, at); err != nil || !ok {
			t.Fatalf("Expire %s: %v %v", k, ok, err)
		}
	}
	done()
	c, done = open()
	defer done()
	checkDeadline(t, c, "rt:1", 3, at, "after a restart")
	checkDeadline(t, c, "rt:sharded", 3, at, "after a restart")
}

// TestDeadlineSurvivesNodeRestore: a cache node that came back empty
// (FLUSHALL) is restored from checkpoints with its counters' deadlines.
func TestDeadlineSurvivesNodeRestore(t *testing.T) {
	ctx := context.Background()
	node, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "hotcount.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := hotcount.New(ctx, hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: []string{node.Addr}},
		Durability: hotcount.DurabilityConfig{Store: db, CheckpointInterval: time.Hour},
		Reads:      hotcount.ReadConfig{NoCache: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if err := c.Incr(ctx, "rt:1", 3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Expire(ctx, "rt:1", at); err != nil {
		t.Fatal(err)
	}
	// A sharded counter: its record and its mark come back with the node.
	if err := c.Incr(ctx, "rt:sharded", 4); err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(ctx, "rt:sharded", 3); err != nil {
		t.Fatal(err)
	}
	for range 40 { // into its other sub-counters too
		if err := c.Incr(ctx, "rt:sharded", 1); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := testenv.Do(ctx, node.Addr, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	// Before any look-up, which would set a missing mark.
	if v, err := testenv.Do(ctx, node.Addr, "EXISTS", keyspace.MarkKey("rt:sharded")); err != nil || v != "1" {
		t.Errorf("restored sharded counter: its mark exists = %s %v, want 1", v, err)
	}
	if r, err := c.Get(ctx, "rt:sharded"); err != nil || r.Value != 44 || r.N != 3 {
		t.Errorf("restored sharded counter = %+v %v, want 44 in 3 sub-counters", r, err)
	}
	checkDeadline(t, c, "rt:1", 3, at, "after the node was restored")
	pttl, err := testenv.Do(ctx, node.Addr, "PTTL", "{rt:1#0}")
	if err != nil || pttl == "-1" || pttl == "-2" {
		t.Errorf("PTTL {rt:1#0} = %s %v after the restore, want the deadline", pttl, err)
	}
	// The same through a rebuild.
	if _, err := testenv.Do(ctx, node.Addr, "FLUSHALL"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RebuildKeys(ctx, "rt:1"); err != nil {
		t.Fatal(err)
	}
	checkDeadline(t, c, "rt:1", 3, at, "after a rebuild")
}

// TestDeadlineAcrossGrowAndFold: a cold counter with a deadline keeps it
// when it grows to N sub-counters, when a fold shrinks it, and when it
// folds back to its one key and its metadata goes.
func TestDeadlineAcrossGrowAndFold(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, mustMem(t), hotcount.Config{Meta: hotcount.MetaConfig{TTL: 20 * time.Millisecond}, Reads: hotcount.ReadConfig{NoCache: true}})
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	const key = "rt:grow"
	if err := c.Incr(ctx, key, 3); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Expire(ctx, key, at); err != nil {
		t.Fatal(err)
	}
	if err := c.Resize(ctx, key, 4); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		if err := c.Incr(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
	}
	checkDeadline(t, c, key, 23, at, "grown to 4")
	if err := c.Resize(ctx, key, 2); err != nil {
		t.Fatal(err)
	}
	checkDeadline(t, c, key, 23, at, "folded to 2")
	if err := c.Resize(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Unpin(ctx, key); err != nil {
		t.Fatal(err)
	}
	if rep, err := c.Shards(ctx, key); err != nil || rep.Epoch != 0 {
		t.Fatalf("back to one key: %+v %v; want no metadata", rep, err)
	}
	checkDeadline(t, c, key, 23, at, "folded back to one key")
}

// openOnSQLite opens a Client of cfg whose durable store is the SQLite
// file hotcount.db in dir, and returns it with a function that closes
// both (a restart is a close and another open on the same dir).
func openOnSQLite(t *testing.T, dir string, cfg hotcount.Config) (*hotcount.Client, func()) {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(dir, "hotcount.db")})
	if err != nil {
		t.Fatal(err)
	}
	cfg.Durability.Store = db
	c, err := hotcount.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c, func() {
		if err := c.Close(ctx); err != nil {
			t.Error(err)
		}
		_ = db.Close()
	}
}
