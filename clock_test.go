package hotcount_test

import (
	"context"
	"runtime"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable/sqlite"
)

// TestFakeClockDrivesEveryTicker: a fake clock given in the Config drives
// every loop of the Client — buffered flushes, checkpoints, rollups,
// automatic N and re-placement — and the test moves time on without
// sleeping.
func TestFakeClockDrivesEveryTicker(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: t.TempDir() + "/hotcount.db"})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	clk := clock.NewFake()
	c := newClient(t, mustMem(t), hotcount.Config{
		Defaults: hotcount.Namespace{FlushInterval: time.Second},
		Namespaces: []hotcount.Namespace{
			{Prefix: "views:", Buffered: true},
			{Prefix: "paid:", Mode: hotcount.ModeDurable},
		},
		Durability: hotcount.DurabilityConfig{Store: db, CheckpointInterval: 5 * time.Second, RollupAge: 4 * time.Second},
		AutoN:      hotcount.AutoNConfig{Enabled: true},
		Rebalance:  hotcount.RebalanceConfig{Auto: true, Check: 2 * time.Second},
		Clock:      clk,
	})
	if err := c.Incr(ctx, "views:1", 1); err != nil { // buffered
		t.Fatal(err)
	}
	if err := c.Incr(ctx, "likes:1", 1); err != nil { // fast, unbuffered: checkpointed, seen by automatic N
		t.Fatal(err)
	}
	start := c.Stats()
	ran := map[string]func(s hotcount.Stats) bool{
		"flush":      func(s hotcount.Stats) bool { return s.Buffer.Flushes > start.Buffer.Flushes },
		"checkpoint": func(s hotcount.Stats) bool { return s.Durability.Checkpoints > start.Durability.Checkpoints },
		"rollup":     func(s hotcount.Stats) bool { return s.Durability.Rollups > start.Durability.Rollups },
		"rebalance":  func(s hotcount.Stats) bool { return s.Rebalance.Checks > start.Rebalance.Checks },
		"auto N": func(hotcount.Stats) bool {
			for _, h := range c.HotKeys(ctx, 10) {
				if h.Reason != "" {
					return true
				}
			}
			return false
		},
	}
	// Every loop waits on a ticker of the fake clock.
	clk.BlockUntil(5)
	// Move time on in small steps until every loop has run. Nothing here
	// sleeps: the loops run on the ticks alone. The wall-clock bound only
	// stops a broken loop from hanging the suite.
	bound := time.Now().Add(2 * time.Minute)
	for step := 0; len(ran) > 0; step++ {
		if _, waiting := ran["auto N"]; waiting {
			// Keep likes:1 among the hot keys until automatic N has
			// looked at it: a loop that a loaded machine runs late would
			// otherwise find its one write decayed away.
			if err := c.Incr(ctx, "likes:1", 1); err != nil {
				t.Fatal(err)
			}
		}
		clk.Advance(100 * time.Millisecond)
		for range 100 {
			runtime.Gosched()
		}
		s := c.Stats()
		for name, done := range ran {
			if done(s) {
				t.Logf("%s ran after %v of fake time", name, time.Duration(step+1)*100*time.Millisecond)
				delete(ran, name)
			}
		}
		if time.Now().After(bound) {
			t.Fatalf("these loops never ran on the fake clock: %v (hot keys %+v)", keysOf(ran), c.HotKeys(ctx, 10))
		}
	}
	if r, err := c.Get(ctx, "views:1"); err != nil || r.Value != 1 {
		t.Fatalf("views:1 = %+v, %v", r, err)
	}
}

func keysOf[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// TestFlushIntervalPerNamespace: each namespace's buffered deltas are
// flushed at its own interval.
func TestFlushIntervalPerNamespace(t *testing.T) {
	ctx := context.Background()
	clk := clock.NewFake()
	st := mustMem(t)
	c := newClient(t, st, hotcount.Config{
		Defaults: hotcount.Namespace{NoColdStart: true, N: 1},
		Namespaces: []hotcount.Namespace{
			{Prefix: "live:", Buffered: true, FlushInterval: time.Second},
			{Prefix: "views:", Buffered: true, FlushInterval: 10 * time.Second},
		},
		Clock: clk,
	})
	for _, k := range []string{"live:1", "views:1"} {
		if err := c.Incr(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
	}
	// stored reads what reached the cache, bypassing the Client.
	stored := func(key string) int64 {
		subs, err := c.SubKeys(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		vals, err := st.Get(ctx, subs)
		if err != nil {
			t.Fatal(err)
		}
		var sum int64
		for _, v := range vals {
			sum += v
		}
		return sum
	}
	clk.BlockUntil(2) // one flusher per interval
	// waitStored advances nothing: it lets the flusher that was just
	// ticked finish (bounded by wall time only against a hang).
	waitStored := func(key string, want int64) {
		bound := time.Now().Add(time.Minute)
		for stored(key) != want {
			if time.Now().After(bound) {
				t.Fatalf("%s stored %d, want %d", key, stored(key), want)
			}
			runtime.Gosched()
		}
	}
	clk.Advance(time.Second)
	waitStored("live:1", 1)
	if v := stored("views:1"); v != 0 {
		t.Fatalf("views:1 was flushed after 1 s: %d", v)
	}
	clk.Advance(9 * time.Second)
	waitStored("views:1", 1)
}
