package hotcount_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
)

// Every path that copies a counter's value keeps its deadline: restore
// after a node came back empty, restart, rebuild, grow, fold and cool, for
// a deadline set with Expire and for one a namespace's TTL gave.

// deadlineOf returns the deadline of key, failing unless it exists and has
// one.
func deadlineOf(t *testing.T, c *hotcount.Client, key string) time.Time {
	t.Helper()
	at, exists, err := c.Deadline(context.Background(), key)
	if err != nil || !exists || at.IsZero() {
		t.Fatalf("deadline of %s = %v (exists %v, %v), want one", key, at, exists, err)
	}
	return at
}

// sameDeadline fails unless key exists with value want and exactly the
// deadline at (to the millisecond the cache keeps).
func sameDeadline(t *testing.T, c *hotcount.Client, key string, want int64, at time.Time, when string) {
	t.Helper()
	ctx := context.Background()
	got, exists, err := c.Deadline(ctx, key)
	if err != nil || !exists || got.IsZero() || got.Sub(at).Abs() >= time.Millisecond {
		t.Errorf("%s: deadline of %s = %v (exists %v, %v), want %v", when, key, got, exists, err, at)
	}
	if r, err := c.Get(ctx, key); err != nil || r.Value != want {
		t.Errorf("%s: %s = %+v %v, want %d", when, key, r, err, want)
	}
}

// deadlineClient opens a durable-mode Client on be whose namespace
// run+":tmp:" has a one-hour TTL, with checkpoints and clean-up left to
// the test and the healer every heal (-1: none). It returns a key of that
// namespace.
func deadlineClient(t *testing.T, be durable.Backend, run string, heal time.Duration) (*hotcount.Client, string) {
	t.Helper()
	tmp := hotcount.Namespace{Prefix: run + ":tmp:", TTL: time.Hour, Mode: hotcount.ModeDurable}
	c := durClient(t, hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
		Defaults:   hotcount.Namespace{Mode: hotcount.ModeDurable},
		Namespaces: []hotcount.Namespace{tmp},
		Reads:      hotcount.ReadConfig{NoCache: true},
		Durability: hotcount.DurabilityConfig{Store: be, CheckpointInterval: time.Hour, CleanupInterval: time.Hour, HealInterval: heal},
	})
	return c, tmp.Prefix + "1"
}

// writeExpiring adds 4 to expiring, ttl and the others, flushes, and
// gives expiring a deadline one hour away, which it returns. The
// counters are cleared when the test ends.
func writeExpiring(t *testing.T, c *hotcount.Client, expiring, ttl string, others ...string) time.Time {
	t.Helper()
	ctx := context.Background()
	all := append([]string{expiring, ttl}, others...)
	t.Cleanup(func() {
		for _, k := range all {
			_ = c.Clear(context.Background(), k)
		}
	})
	for _, k := range all {
		if err := c.IncrID(ctx, k, 4, "a"); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if _, err := c.Expire(ctx, expiring, at); err != nil {
		t.Fatal(err)
	}
	return at
}

// TestTTLDeadlineSurvivesNodeRestore: counters of a namespace with a TTL
// come back from checkpoints, after every primary lost its data, with the
// deadline they had in the cache: one first written by another process
// (this one's estimate of its deadline is later), one whose estimate was
// not written yet when the cache was lost, one sharded, and one sharded
// whose metadata row the durable store lost (its record is rebuilt from
// its labels). Before, the first came back with the later estimate, the
// second without a deadline, outliving its TTL, and the last with a
// record without a deadline.
func TestTTLDeadlineSurvivesNodeRestore(t *testing.T) {
	for _, ds := range durStores() {
		t.Run(ds.name, func(t *testing.T) {
			ctx := context.Background()
			be := ds.open(t, ds.loc(t))
			run := uniqueKey(t)
			tmp := hotcount.Namespace{Prefix: run + ":tmp:", TTL: time.Hour}
			big := hotcount.Namespace{Prefix: run + ":big:", TTL: time.Hour, NoColdStart: true, N: 4}
			other := durClient(t, hotcount.Config{
				Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
				Namespaces: []hotcount.Namespace{tmp, big},
				Reads:      hotcount.ReadConfig{NoCache: true},
			})
			c := durClient(t, hotcount.Config{
				Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
				Namespaces: []hotcount.Namespace{tmp, big},
				Reads:      hotcount.ReadConfig{NoCache: true},
				Durability: hotcount.DurabilityConfig{Store: be, CheckpointInterval: time.Hour, CleanupInterval: time.Hour},
			})
			first, late, sharded, bare := tmp.Prefix+"first", tmp.Prefix+"late", big.Prefix+"sharded", big.Prefix+"bare"
			t.Cleanup(func() {
				for _, k := range []string{first, late, sharded, bare} {
					_ = c.Clear(context.Background(), k)
				}
			})
			if err := other.Incr(ctx, first, 1); err != nil {
				t.Fatal(err)
			}
			time.Sleep(20 * time.Millisecond) // this process sees it later
			for _, k := range []string{first, sharded, bare} {
				if err := c.Incr(ctx, k, 2); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := c.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Cleanup(ctx); err != nil { // writes the estimates
				t.Fatal(err)
			}
			if err := c.Incr(ctx, late, 5); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
			want := map[string]time.Time{}
			for _, k := range []string{first, late, sharded, bare} {
				want[k] = deadlineOf(t, c, k)
			}
			if err := be.DeleteMeta(ctx, bare); err != nil {
				t.Fatal(err)
			}
			if err := cluster.FlushAll(ctx); err != nil {
				t.Fatal(err)
			}
			if rep, err := c.Checkpoint(ctx); err != nil || len(rep.Restores) == 0 {
				t.Fatalf("no restore after FLUSHALL: %+v %v", rep, err)
			}
			sameDeadline(t, c, first, 3, want[first], "first written elsewhere, restored")
			sameDeadline(t, c, late, 5, want[late], "estimate not written, restored")
			sameDeadline(t, c, sharded, 2, want[sharded], "sharded, restored")
			sameDeadline(t, c, bare, 2, want[bare], "sharded without a metadata row, restored")
		})
	}
}

// TestTTLDeadlineSurvivesRestart: a counter of a namespace with a TTL on
// the embedded store keeps its deadline across a clean restart, whose
// cache comes back empty and is restored from checkpoints. Before, the
// estimate of its deadline was still waiting for the clean-up pass when
// the process stopped, and the counter came back without a deadline.
func TestTTLDeadlineSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	ns := []hotcount.Namespace{{Prefix: "rt:", TTL: time.Hour}}
	open := func() (*hotcount.Client, func()) {
		return openOnSQLite(t, dir, hotcount.Config{Namespaces: ns, Reads: hotcount.ReadConfig{NoCache: true}})
	}
	c, done := open()
	if err := c.Incr(ctx, "rt:1", 3); err != nil {
		t.Fatal(err)
	}
	at := deadlineOf(t, c, "rt:1")
	done()
	c, done = open()
	defer done()
	sameDeadline(t, c, "rt:1", 3, at, "after a restart")
}

// TestDeadlineSurvivesDurableRebuild: durable-mode counters with a
// deadline (set with Expire, and from a namespace's TTL) whose cache view
// was lost are rebuilt from the log with their deadline. Before, the
// rebuilt view had none and outlived the counter.
func TestDeadlineSurvivesDurableRebuild(t *testing.T) {
	for _, ds := range durStores() {
		t.Run(ds.name, func(t *testing.T) {
			ctx := context.Background()
			be := ds.open(t, ds.loc(t))
			run := uniqueKey(t)
			c, ttl := deadlineClient(t, be, run, -1)
			expiring := run + ":expiring"
			at := writeExpiring(t, c, expiring, ttl)
			if _, err := c.Cleanup(ctx); err != nil {
				t.Fatal(err)
			}
			want := map[string]time.Time{expiring: at, ttl: deadlineOf(t, c, ttl)}
			if err := cluster.FlushAll(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.RebuildKeys(ctx, expiring, ttl); err != nil {
				t.Fatal(err)
			}
			for _, k := range []string{expiring, ttl} {
				sameDeadline(t, c, k, 4, want[k], "rebuilt from the log")
			}
		})
	}
}

// TestCleanupKeepsLiveCounter: a sharded counter that expired and started
// again under its key, sharded again, is live in the cache; the clean-up
// pass clears what the old one left and keeps the store side of the new
// one (its checkpoints and metadata), so a node that comes back empty
// restores it. An expired counter the cache no longer serves loses every
// row. Both for a deadline set with Expire and for a namespace's TTL.
// Before, the pass deleted the new counter's metadata row; and, now and
// then, a label look-up brought the expired counter's record back (see
// meta.TestDropRacesLookUp), so the new counter was cleared as expired.
//
// The new counter of the namespace with a TTL lives for the TTL: what an
// attempt that outran it (a loaded machine) found of that counter proves
// nothing, and it is run again with a TTL twice as long; what it found of
// the others stands.
func TestCleanupKeepsLiveCounter(t *testing.T) {
	for _, ds := range durStores() {
		t.Run(ds.name, func(t *testing.T) {
			life := 1500 * time.Millisecond
			for attempt := 1; ; attempt++ {
				fails, ttlFails, took := cleanupKeepsLiveCounter(t, ds, life)
				for _, f := range fails {
					t.Error(f)
				}
				if took+time.Millisecond < life { // a deadline is kept to the millisecond
					for _, f := range ttlFails {
						t.Error(f)
					}
					return
				}
				t.Logf("attempt %d with a TTL of %v took %v from the new counters' first writes to the last check: the TTL counter's may have passed; %d findings of it dropped (%q)", attempt, life, took, len(ttlFails), ttlFails)
				if attempt == 5 {
					t.Skipf("every attempt outran its TTL, the last one %v", life)
				}
				life *= 2
			}
		})
	}
}

// cleanupKeepsLiveCounter runs TestCleanupKeepsLiveCounter once on a new
// store, with life as the TTL and the time to the deadline set with
// Expire. It returns what it found wrong, of the counter of the namespace
// with a TTL apart, and how long it took from just before the new
// counters' first writes to the end of the last check: at or past life,
// the TTL counter's new deadline may have passed, and what was found of
// it says nothing.
func cleanupKeepsLiveCounter(t *testing.T, ds durStore, life time.Duration) (fails, ttlFails []string, took time.Duration) {
	t.Helper()
	ctx := context.Background()
	be := ds.open(t, ds.loc(t))
	run := uniqueKey(t)
	tmp := hotcount.Namespace{Prefix: run + ":tmp:", TTL: life}
	c := durClient(t, hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
		Namespaces: []hotcount.Namespace{tmp},
		Meta:       hotcount.MetaConfig{TTL: 20 * time.Millisecond},
		Reads:      hotcount.ReadConfig{NoCache: true},
		Durability: hotcount.DurabilityConfig{Store: be, CheckpointInterval: time.Hour, CleanupInterval: time.Hour},
	})
	again, gone, ttlAgain := run+":again", run+":gone", tmp.Prefix+"again"
	all := []string{again, gone, ttlAgain}
	fail := func(key, format string, args ...any) {
		if key == ttlAgain {
			ttlFails = append(ttlFails, fmt.Sprintf(format, args...))
		} else {
			fails = append(fails, fmt.Sprintf(format, args...))
		}
	}
	t.Cleanup(func() {
		for _, k := range all {
			_ = c.Clear(context.Background(), k)
		}
	})
	grow := func(keys ...string) {
		t.Helper()
		for _, k := range keys {
			if err := c.Incr(ctx, k, 5); err != nil {
				t.Fatal(err)
			}
			if err := c.Resize(ctx, k, 3); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := c.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	grow(all...)
	deadline := time.Now().Add(life)
	for _, k := range []string{again, gone} {
		if _, err := c.Expire(ctx, k, deadline); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Cleanup(ctx); err != nil { // notes the TTL one
		t.Fatal(err)
	}
	time.Sleep(time.Until(deadline.Add(life/2)) + 100*time.Millisecond)
	for _, k := range all {
		if r, err := c.Get(ctx, k); err != nil || r.Value != 0 {
			t.Fatalf("%s after its deadline: %+v %v", k, r, err)
		}
	}
	start := time.Now()   // the new TTL counter lives at least life from here
	grow(again, ttlAgain) // new counters under the old keys
	rep, err := c.Cleanup(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("pass: %+v", rep)
	for _, k := range []string{again, ttlAgain} {
		if cps, meta, _, _ := rowsOf(t, be, []string{k}); cps == 0 || meta != 1 {
			fail(k, "%s, live in the cache, has %d checkpoints and %d metadata rows after the pass", k, cps, meta)
		}
	}
	if cps, meta, _, dl := rowsOf(t, be, []string{gone}); cps+meta+dl != 0 {
		fail(gone, "%s, expired, keeps %d checkpoints, %d metadata rows and %d deadlines", gone, cps, meta, dl)
	}
	if err := cluster.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]int64{again: 5, ttlAgain: 5, gone: 0} {
		if r, err := c.Get(ctx, k); err != nil || r.Value != want {
			fail(k, "%s restored: %+v %v, want %d", k, r, err, want)
		}
	}
	if w, _, err := c.Labels(ctx, again); err != nil || len(w) != 3 {
		fail(again, "%s restored with labels %v %v, want 3", again, w, err)
	}
	return fails, ttlFails, time.Since(start)
}

// TestDeadlineAcrossHeatAndCool: on a Redis Cluster, a cold counter of a
// namespace with a TTL, and one given a deadline with Expire, grow to N
// sub-counters when they heat up and fold back to their one key when
// they cool, and keep their deadline exactly through both; the TTL one
// also through a resize by hand to 4, a fold to 2 and back to one key.
func TestDeadlineAcrossHeatAndCool(t *testing.T) {
	ctx := context.Background()
	run := uniqueKey(t)
	tmp := hotcount.Namespace{Prefix: run + ":ttl:", TTL: time.Hour, N: 6, HotRate: 50}
	c := durClient(t, hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
		Defaults:   hotcount.Namespace{N: 6, HotRate: 50},
		Namespaces: []hotcount.Namespace{tmp},
		Meta:       hotcount.MetaConfig{TTL: 50 * time.Millisecond},
		AutoN:      hotcount.AutoNConfig{Hysteresis: 500 * time.Millisecond},
		Reads:      hotcount.ReadConfig{NoCache: true},
	})
	ttlKey, expKey, sized := tmp.Prefix+"viral", run+":viral", tmp.Prefix+"sized"
	keys := []string{ttlKey, expKey}
	t.Cleanup(func() {
		for _, k := range append(keys, sized) {
			_ = c.Clear(context.Background(), k)
		}
	})
	sent := map[string]int64{}
	incr := func(k string) {
		t.Helper()
		if err := c.Incr(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
		sent[k]++
	}
	n := func(k string) int {
		t.Helper()
		w, _, err := c.Labels(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		return len(w)
	}
	for _, k := range append(keys, sized) {
		incr(k)
	}
	if _, err := c.Expire(ctx, expKey, time.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{}
	for _, k := range append(keys, sized) {
		want[k] = deadlineOf(t, c, k)
	}

	// By hand: grow to 4, fold to 2, back to one key.
	if err := c.Resize(ctx, sized, 4); err != nil {
		t.Fatal(err)
	}
	for range 20 {
		incr(sized)
	}
	sameDeadline(t, c, sized, sent[sized], want[sized], "resized to 4")
	if err := c.Resize(ctx, sized, 2); err != nil {
		t.Fatal(err)
	}
	sameDeadline(t, c, sized, sent[sized], want[sized], "folded to 2")
	if err := c.Resize(ctx, sized, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Unpin(ctx, sized); err != nil {
		t.Fatal(err)
	}
	if rep, err := c.Shards(ctx, sized); err != nil || rep.Epoch != 0 {
		t.Fatalf("back to one key: %+v %v; want no metadata", rep, err)
	}
	sameDeadline(t, c, sized, sent[sized], want[sized], "folded back to one key")

	// Hot: about 1,000 writes/s each until both grew (bounded).
	bound := time.Now().Add(time.Minute)
	for n(ttlKey) != 6 || n(expKey) != 6 {
		for range 10 {
			for _, k := range keys {
				incr(k)
			}
		}
		time.Sleep(10 * time.Millisecond)
		if time.Now().After(bound) {
			t.Fatalf("%d and %d sub-counters after a minute at ~1,000 writes/s", n(ttlKey), n(expKey))
		}
	}
	for _, k := range keys {
		sameDeadline(t, c, k, sent[k], want[k], "grown when hot")
	}
	// Cool: a write now and then, until both are back to one key.
	bound = time.Now().Add(time.Minute)
	for {
		back := 0
		for _, k := range keys {
			incr(k)
			if rep, err := c.Shards(ctx, k); err == nil && rep.Epoch == 0 && n(k) == 1 {
				back++
			}
		}
		if back == len(keys) {
			break
		}
		if time.Now().After(bound) {
			t.Fatalf("%d and %d sub-counters a minute after cooling", n(ttlKey), n(expKey))
		}
		time.Sleep(50 * time.Millisecond)
	}
	for _, k := range keys {
		sameDeadline(t, c, k, sent[k], want[k], "folded back when cool")
	}
}

// TestDeadlineSurvivesHealing: the healer repairs the views of durable-mode
// counters lost with their cache node with their deadline (set with
// Expire, and from a namespace's TTL), and does not write back a counter
// whose deadline passed while its log waits for the clean-up pass. Before,
// the repaired views had no deadline, and the expired counter came back.
func TestDeadlineSurvivesHealing(t *testing.T) {
	ctx := context.Background()
	be := pgStore(t)
	run := uniqueKey(t)
	const heal = 300 * time.Millisecond
	c, ttl := deadlineClient(t, be, run, heal)
	expiring, ended := run+":expiring", run+":ended"
	at := writeExpiring(t, c, expiring, ttl, ended)
	soon := time.Now().Add(time.Second)
	if _, err := c.Expire(ctx, ended, soon); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	want := map[string]time.Time{expiring: at, ttl: deadlineOf(t, c, ttl)}
	time.Sleep(time.Until(soon) + 100*time.Millisecond)
	if err := cluster.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Checkpoint(ctx); err != nil { // finds the nodes empty: a sweep starts
		t.Fatal(err)
	}
	bound := time.Now().Add(durConvergeWait)
	for {
		done := 0
		for _, k := range []string{expiring, ttl} {
			if r, err := c.Get(ctx, k); err == nil && r.Value == 4 {
				done++
			}
		}
		if done == 2 {
			break
		}
		if time.Now().After(bound) {
			t.Fatalf("views not repaired after %v; stats %+v", durConvergeWait, c.Stats().Durability)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for _, k := range []string{expiring, ttl} {
		sameDeadline(t, c, k, 4, want[k], "repaired by the healer")
	}
	time.Sleep(5 * heal) // several sweeps
	if r, err := c.Get(ctx, ended); err != nil || r.Value != 0 {
		t.Errorf("the healer wrote back a counter past its deadline: %+v %v", r, err)
	}
	if _, exists, err := c.Deadline(ctx, ended); err != nil || exists {
		t.Errorf("a counter past its deadline exists again after healing (%v)", err)
	}
}

// TestFoldIntoMissingSubCounterKeepsDeadline: on a Redis Cluster, sharded
// counters of a namespace with a TTL, each written once (one sub-counter
// holds the value, the others were never created), folded to one label:
// the label that receives the value keeps or takes the counter's deadline
// (plus the grace), so no sub-counter outlives the counter.
func TestFoldIntoMissingSubCounterKeepsDeadline(t *testing.T) {
	ctx := context.Background()
	run := uniqueKey(t)
	big := hotcount.Namespace{Prefix: run + ":big:", TTL: time.Hour, NoColdStart: true, N: 4}
	c := durClient(t, hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
		Namespaces: []hotcount.Namespace{big},
		Meta:       hotcount.MetaConfig{TTL: 20 * time.Millisecond},
		Reads:      hotcount.ReadConfig{NoCache: true},
	})
	st := openCluster(t)
	var keys []string
	for i := range 8 {
		keys = append(keys, fmt.Sprintf("%s%d", big.Prefix, i))
	}
	t.Cleanup(func() {
		for _, k := range keys {
			_ = c.Clear(context.Background(), k)
		}
	})
	for _, k := range keys {
		if err := c.Incr(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
		want := deadlineOf(t, c, k)
		if err := c.Resize(ctx, k, 1); err != nil {
			t.Fatal(err)
		}
		sameDeadline(t, c, k, 1, want, "folded to one label")
		subs, err := c.SubKeys(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		ds, err := st.Deadlines(ctx, subs)
		if err != nil {
			t.Fatal(err)
		}
		for i, d := range ds {
			if d.Exists && (d.At.IsZero() || d.At.After(want.Add(2*time.Minute))) {
				t.Errorf("%s after the fold: %s has deadline %v, want at most %v", k, subs[i], d.At, want.Add(time.Minute))
			}
		}
	}
}
