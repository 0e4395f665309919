package hotcount_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/keyspace"
)

// pgStore opens a PostgreSQL store in a schema of its own.
func pgStore(t testing.TB) durable.Backend {
	ds := durStores()[1]
	return ds.open(t, ds.loc(t))
}

// rowsOf returns the store's rows that belong to the counters keys:
// checkpoints of their sub-counters, metadata, log events and totals, and
// deadline records.
func rowsOf(t *testing.T, be durable.Backend, keys []string) (cps, meta, logKeys, deadlines int) {
	t.Helper()
	ctx := context.Background()
	for _, k := range keys {
		list, err := be.ListCheckpoints(ctx, "{"+k+"#")
		if err != nil {
			t.Fatal(err)
		}
		for _, cp := range list {
			if c, _, ok := keyspace.ParseSubKey(cp.Key); ok && c == k {
				cps++
			}
		}
		if _, err := be.LoadMeta(ctx, k); err == nil {
			meta++
		}
		lk, err := be.Keys(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		for _, x := range lk {
			if x == k {
				logKeys++
			}
		}
	}
	due, err := be.DueDeadlines(ctx, time.Now().Add(1000*time.Hour), 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, ok := due[k]; ok {
			deadlines++
		}
	}
	return
}

// TestTTLRemovesStoreRows: counters of a namespace with a TTL, fast mode
// (unbuffered, buffered, and sharded from the first write, which has
// metadata), expire in the cache by Redis's clock; their deadlines are
// recorded in PostgreSQL (an estimate noted from the writes, written by
// the clean-up pass), and the first pass after the deadline removes their
// checkpoint and metadata rows and the records. A counter without a TTL
// keeps its rows; a counter given a deadline with Expire and then Persist
// keeps them too. Before, nothing removed those rows.
func TestTTLRemovesStoreRows(t *testing.T) {
	const ttl = 2 * time.Second
	for _, mode := range []string{"unbuffered", "buffered", "sharded"} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			be := pgStore(t)
			run := uniqueKey(t)
			tmp := hotcount.Namespace{Prefix: run + ":tmp:", TTL: ttl, Buffered: mode == "buffered",
				FlushInterval: 20 * time.Millisecond, NoColdStart: mode == "sharded", N: 4}
			c := durClient(t, hotcount.Config{
				Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
				Namespaces: []hotcount.Namespace{tmp},
				Reads:      hotcount.ReadConfig{NoCache: true},
				Durability: hotcount.DurabilityConfig{Store: be, CheckpointInterval: time.Hour, CleanupInterval: time.Hour},
			})
			var tmps []string
			for i := range 20 {
				tmps = append(tmps, fmt.Sprintf("%s%d", tmp.Prefix, i))
			}
			keep, persisted := run+":keep", run+":persisted"
			t.Cleanup(func() {
				// Sub-counters of sharded counters expire a grace period
				// after their deadline: leave no key expiring under the
				// tests that follow on the shared cluster.
				for _, k := range append([]string{keep, persisted}, tmps...) {
					_ = c.Clear(context.Background(), k)
				}
			})
			for _, k := range append([]string{keep, persisted}, tmps...) {
				for range 3 {
					if err := c.Incr(ctx, k, 2); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Expire(ctx, persisted, time.Now().Add(ttl)); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Persist(ctx, persisted); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
			rep, err := c.Cleanup(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Noted != len(tmps) || rep.Expired != 0 {
				t.Fatalf("first pass: %+v, want %d deadlines noted and nothing expired", rep, len(tmps))
			}
			cps, meta, _, dl := rowsOf(t, be, tmps)
			wantSubs := 1
			if mode == "sharded" {
				wantSubs = 4
			}
			if cps < len(tmps)*wantSubs || dl != len(tmps) || (mode == "sharded") != (meta == len(tmps)) {
				t.Fatalf("before the deadline: %d checkpoints, %d metadata rows, %d deadlines", cps, meta, dl)
			}
			if r, err := c.Get(ctx, tmps[0]); err != nil || r.Value != 6 {
				t.Fatalf("before the deadline: %+v %v", r, err)
			}
			time.Sleep(ttl + 200*time.Millisecond)
			if r, err := c.Get(ctx, tmps[0]); err != nil || r.Value != 0 {
				t.Fatalf("after the deadline: %+v %v", r, err)
			}
			// The deadline is an estimate from the first write seen: a
			// pass may find a counter not yet past its estimate; the
			// next one then removes it.
			var expired int
			for i := 0; i < 10 && expired < len(tmps); i++ {
				rep, err := c.Cleanup(ctx)
				if err != nil {
					t.Fatal(err)
				}
				expired += rep.Expired
				if expired < len(tmps) {
					time.Sleep(200 * time.Millisecond)
				}
			}
			if expired != len(tmps) {
				t.Fatalf("passes expired %d counters, want %d", expired, len(tmps))
			}
			if cps, meta, _, dl := rowsOf(t, be, tmps); cps+meta+dl != 0 {
				t.Fatalf("after the pass: %d checkpoints, %d metadata rows, %d deadlines of expired counters", cps, meta, dl)
			}
			if cps, _, _, _ := rowsOf(t, be, []string{keep, persisted}); cps != 2 {
				t.Fatalf("counters without a deadline have %d checkpoints, want 2", cps)
			}
			if st := c.Stats().Durability.GC; st.Expired != uint64(len(tmps)) || st.StoreRows["checkpoints"] != 2 || st.StoreBytes <= 0 {
				t.Fatalf("GC stats: %+v", st)
			}
		})
	}
}

// TestTTLDurableCounter: a durable-mode counter with a deadline set by
// Expire: its cache view is gone at the deadline, and the next clean-up
// pass clears its events, totals and metadata in the store, so that the
// exact read is 0 and a rebuild does not bring it back. An increment after
// the deadline starts a new counter, which the pass keeps: only what
// ended with the old one goes. Before, the log
// kept the expired counter and Rebuild restored it.
func TestTTLDurableCounter(t *testing.T) {
	for _, ds := range durStores() {
		t.Run(ds.name, func(t *testing.T) {
			ctx := context.Background()
			be := ds.open(t, ds.loc(t))
			run := uniqueKey(t)
			c := durClient(t, hotcount.Config{
				Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
				Defaults:   hotcount.Namespace{Mode: hotcount.ModeDurable, FlushInterval: 20 * time.Millisecond},
				Reads:      hotcount.ReadConfig{NoCache: true},
				Durability: hotcount.DurabilityConfig{Store: be, CleanupInterval: time.Hour},
			})
			gone, again := run+":gone", run+":again"
			for _, k := range []string{gone, again} {
				for i := range 5 {
					if err := c.IncrID(ctx, k, 3, fmt.Sprint(i)); err != nil {
						t.Fatal(err)
					}
				}
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			deadline := time.Now().Add(1500 * time.Millisecond)
			for _, k := range []string{gone, again} {
				if existed, err := c.Expire(ctx, k, deadline); err != nil || !existed {
					t.Fatalf("Expire(%s) = %v %v", k, existed, err)
				}
			}
			if _, _, _, dl := rowsOf(t, be, []string{gone, again}); dl != 2 {
				t.Fatalf("%d deadlines recorded, want 2", dl)
			}
			time.Sleep(time.Until(deadline) + 200*time.Millisecond)
			if r, err := c.Get(ctx, gone); err != nil || r.Value != 0 {
				t.Fatalf("the view after the deadline: %+v %v", r, err)
			}
			if err := c.IncrID(ctx, again, 4, "new"); err != nil {
				t.Fatal(err)
			}
			rep, err := c.Cleanup(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Expired != 2 || rep.Moved != 0 {
				t.Fatalf("pass: %+v, want 2 expired (one started again without a deadline)", rep)
			}
			if v, err := c.GetExact(ctx, gone); err != nil || v.Value != 0 {
				t.Fatalf("exact read of an expired counter after the pass: %+v %v", v, err)
			}
			if _, _, lk, dl := rowsOf(t, be, []string{gone}); lk+dl != 0 {
				t.Fatalf("the store keeps %d log keys and %d deadlines of the expired counter", lk, dl)
			}
			if _, err := c.RebuildKeys(ctx, gone, again); err != nil {
				t.Fatal(err)
			}
			if r, err := c.Get(ctx, gone); err != nil || r.Value != 0 {
				t.Fatalf("rebuild brought an expired counter back: %+v %v", r, err)
			}
			if v, err := c.GetExact(ctx, again); err != nil || v.Value != 4 {
				t.Fatalf("the counter started after the deadline: exact %+v %v, want 4", v, err)
			}
		})
	}
}

// TestClearNotRestoredFromCheckpoint: a fast-mode counter checkpointed,
// then cleared; every primary loses its data before the next checkpoint
// round; the round restores the nodes from their checkpoints and must not
// bring the cleared counter back, while a counter not cleared is restored.
// Before, a clear only marked the counter for the next checkpoint, so the
// restore added the old value back.
func TestClearNotRestoredFromCheckpoint(t *testing.T) {
	for _, ds := range durStores() {
		t.Run(ds.name, func(t *testing.T) {
			ctx := context.Background()
			be := ds.open(t, ds.loc(t))
			run := uniqueKey(t)
			c := durClient(t, hotcount.Config{
				Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
				Reads:      hotcount.ReadConfig{NoCache: true},
				Durability: hotcount.DurabilityConfig{Store: be, CheckpointInterval: time.Hour, CleanupInterval: time.Hour},
			})
			cleared, kept := run+":cleared", run+":kept"
			for _, k := range []string{cleared, kept} {
				if err := c.Incr(ctx, k, 100); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
			if err := c.Clear(ctx, cleared); err != nil {
				t.Fatal(err)
			}
			cpsAfterClear, _, _, _ := rowsOf(t, be, []string{cleared})
			if err := cluster.FlushAll(ctx); err != nil {
				t.Fatal(err)
			}
			rep, err := c.Checkpoint(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Restores) == 0 {
				t.Fatalf("no restore after FLUSHALL: %+v", rep)
			}
			if r, err := c.Get(ctx, kept); err != nil || r.Value != 100 {
				t.Fatalf("the counter not cleared after the restore: %+v %v, want 100", r, err)
			}
			if r, err := c.Get(ctx, cleared); err != nil || r.Value != 0 {
				t.Fatalf("the restore brought the cleared counter back: %+v %v", r, err)
			}
			if cpsAfterClear != 0 {
				t.Fatalf("the clear left %d checkpoints", cpsAfterClear)
			}
			if _, err := c.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
			if cps, _, _, _ := rowsOf(t, be, []string{cleared}); cps != 0 {
				t.Fatalf("a checkpoint after the clear saved %d rows of the cleared counter", cps)
			}
		})
	}
}

// fakeClockClient opens a Client of the test cluster on clock clk, with
// store be, checkpoints every interval, uncached reads and namespaces nss.
func fakeClockClient(t *testing.T, be durable.Backend, clk *clock.Fake, interval time.Duration, nss ...hotcount.Namespace) *hotcount.Client {
	t.Helper()
	return durClient(t, hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
		Reads:      hotcount.ReadConfig{NoCache: true},
		Clock:      clk,
		Namespaces: nss,
		Durability: hotcount.DurabilityConfig{Store: be, CheckpointInterval: interval, CleanupInterval: time.Hour},
	})
}

// TestCheckpointSavesAfterALongGap: a counter written, then no checkpoint
// round for longer than the watch keeps an idle counter (rounds failing
// while the store is down, a paused process, a round slower than two
// intervals): the next round must still save it. Before, that round
// dropped the counter from the watch without ever saving it, so a cache
// loss then lost it whole (the create-then-expire run left 21,441 of
// 200,000 new counters without a checkpoint that way).
func TestCheckpointSavesAfterALongGap(t *testing.T) {
	ctx := context.Background()
	be, clk := pgStore(t), clock.NewFake()
	c := fakeClockClient(t, be, clk, time.Second)
	key := uniqueKey(t)
	if err := c.Incr(ctx, key, 7); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Minute)
	if _, err := c.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if cps, _, _, _ := rowsOf(t, be, []string{key}); cps != 1 {
		t.Fatalf("%d checkpoints of a counter written before the gap, want 1", cps)
	}
}

// TestCheckpointReadsAWrittenCounterOnce: a counter written by
// acknowledged unbuffered increments alone leaves the checkpoint watch
// once a round has read it after the last reply, so a long tail of
// counters written once each is read once each (before, every one was
// read by every round for two idle intervals: about three reads per
// counter at the defaults). Buffered deltas, whose landing is not seen
// here, keep the idle rule.
func TestCheckpointReadsAWrittenCounterOnce(t *testing.T) {
	ctx := context.Background()
	be, clk := pgStore(t), clock.NewFake()
	// Rounds run when the test asks for them alone.
	c := fakeClockClient(t, be, clk, time.Hour, hotcount.Namespace{Prefix: "ckbuf:", Buffered: true, FlushInterval: time.Millisecond})
	rounds := func(want ...int) {
		t.Helper()
		var got []int
		for range want {
			clk.Advance(time.Millisecond)
			rep, err := c.Checkpoint(ctx)
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, rep.Counters)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("counters read by the rounds: %v, want %v", got, want)
		}
	}
	key := uniqueKey(t)
	if err := c.Incr(ctx, key, 3); err != nil {
		t.Fatal(err)
	}
	rounds(1, 0, 0)
	if cps, _, _, _ := rowsOf(t, be, []string{key}); cps != 1 {
		t.Fatalf("%d checkpoints of the counter read once, want 1", cps)
	}
	// Written again after a round read it: read again, once.
	if err := c.Incr(ctx, key, 4); err != nil {
		t.Fatal(err)
	}
	rounds(1, 0)
	list, err := be.ListCheckpoints(ctx, "{"+key+"#")
	if err != nil || len(list) != 1 || list[0].Total != 7 {
		t.Fatalf("checkpoints of the counter: %+v, %v; want one of 7", list, err)
	}
	// A buffered counter stays watched: its delta lands a flush later.
	bkey := "ckbuf:" + uniqueKey(t)
	if err := c.Incr(ctx, bkey, 1); err != nil {
		t.Fatal(err)
	}
	rounds(1, 1)
}
