package durabletest

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

func cp(key string, total int64, at time.Time) durable.Checkpoint {
	return durable.Checkpoint{Key: key, Total: total, Epoch: 1, At: at}
}

// wantCheckpoints requires that exactly want of keys have a checkpoint.
func wantCheckpoints(t *testing.T, b durable.Backend, keys []string, want ...string) {
	t.Helper()
	got, err := b.LoadCheckpoints(ctxT(t), keys)
	must(t, err)
	var have []string
	for _, k := range keys {
		if _, ok := got[k]; ok {
			have = append(have, k)
		}
	}
	if fmt.Sprint(have) != fmt.Sprint(want) {
		t.Fatalf("checkpoints of %v: %v, want %v", keys, have, want)
	}
}

// testClear: ClearCounter removes everything of the counter, keeps its
// IDs, and its tombstone makes late checkpoints of its sub-counters
// ignored.
func testClear(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	const key = "likes:1"
	s0, s1 := keyspace.SubKey(key, "0"), keyspace.SubKey(key, "1")
	subs := []string{s0, s1}
	appendOK(t, b, durable.Event{Key: key, Delta: 5, ID: "old", At: clock.Start.Add(-time.Hour)})
	_, err := b.Rollup(ctx, clock.Start)
	must(t, err)
	appendOK(t, b, ev(key, 3, "tail"))
	must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{cp(s0, 4, clock.Start), cp(s1, 4, clock.Start)}))
	must(t, b.SaveMeta(ctx, key, []byte("labels")))
	wantExact(t, b, key, 8)

	at := clock.Start.Add(10 * time.Second)
	must(t, b.ClearCounter(ctx, key, at))
	wantExact(t, b, key, 0)
	if keys, err := b.Keys(ctx, ""); err != nil || len(keys) != 0 {
		t.Fatalf("Keys after clear = %v, %v", keys, err)
	}
	wantCheckpoints(t, b, subs)
	if _, err := b.LoadMeta(ctx, key); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("LoadMeta after clear err = %v", err)
	}
	tomb, err := b.Tombstones(ctx, []string{key, "never"})
	must(t, err)
	if len(tomb) != 1 || !tomb[key].Equal(at) {
		t.Fatalf("Tombstones = %v, want %s at %v", tomb, key, at)
	}
	// IDs are kept: a retry of an increment acknowledged before the clear
	// does not count again.
	wantDup(t, appendOK(t, b, ev(key, 3, "tail"), durable.Event{Key: key, Delta: 5, ID: "old"}), true, true)
	wantExact(t, b, key, 0)
	// A checkpoint read at or before the clear is ignored; a later one is
	// not.
	must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{cp(s0, 9, at), cp(s1, 9, at.Add(-time.Second)),
		{Key: s1, Total: 9, Epoch: 7}}))
	wantCheckpoints(t, b, subs)
	must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{cp(s0, 1, at.Add(time.Nanosecond))}))
	wantCheckpoints(t, b, subs, s0)
	// The counter lives on after the clear.
	appendOK(t, b, ev(key, 2, "new"))
	wantExact(t, b, key, 2)
	// A second, older clear keeps the later tombstone, and removes only
	// what is not newer than it.
	must(t, b.ClearCounter(ctx, key, clock.Start))
	tomb, err = b.Tombstones(ctx, []string{key})
	must(t, err)
	if !tomb[key].Equal(at) {
		t.Fatalf("tombstone after an older clear = %v, want %v", tomb[key], at)
	}
	wantExact(t, b, key, 0)
	wantCheckpoints(t, b, subs, s0) // read after that clear: kept
	if err := b.ClearCounter(ctx, "", at); !errors.Is(err, keyspace.ErrInvalidKey) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("ClearCounter(\"\") err = %v", err)
	}
}

// testClearEnded: ClearEnded removes what a counter that ended at a time
// left (older checkpoints and events, its rollup total) and records the
// tombstone, but keeps the metadata and the deadline record of the
// counter that lives on under the key, and its newer checkpoints.
func testClearEnded(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	const key = "k"
	end := clock.Start.Add(time.Minute)
	old, live := keyspace.SubKey(key, "0"), keyspace.SubKey(key, "1")
	must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{cp(old, 4, end.Add(-time.Second)), cp(live, 6, end.Add(time.Second))}))
	appendOK(t, b, durable.Event{Key: key, Delta: 5, ID: "old", At: end.Add(-time.Second)})
	must(t, b.SaveMeta(ctx, key, []byte("living")))
	later := end.Add(time.Hour)
	must(t, b.SetDeadlines(ctx, map[string]time.Time{key: later}, false))
	must(t, b.ClearEnded(ctx, key, end))
	wantCheckpoints(t, b, []string{old, live}, live)
	wantExact(t, b, key, 0)
	if m, err := b.LoadMeta(ctx, key); err != nil || string(m) != "living" {
		t.Fatalf("LoadMeta after ClearEnded = %q, %v; want the living counter's", m, err)
	}
	if d, err := b.LoadDeadlines(ctx, []string{key}); err != nil || !d[key].Equal(later) {
		t.Fatalf("LoadDeadlines after ClearEnded = %v, %v; want %v", d, err, later)
	}
	tomb, err := b.Tombstones(ctx, []string{key})
	must(t, err)
	if !tomb[key].Equal(end) {
		t.Fatalf("tombstone after ClearEnded = %v, want %v", tomb[key], end)
	}
}

// testClearOthers: clearing "a" leaves "a#b" (whose sub-keys start like
// a's), "ab" and the rest alone.
func testClearOthers(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	mine := []string{keyspace.SubKey("a", "0"), keyspace.SubKey("a", "b"), "a"}
	theirs := []string{keyspace.SubKey("a#b", "0"), keyspace.SubKey("ab", "0"), keyspace.SubKey("a:x", "0"), "a#b"}
	all := append(append([]string(nil), mine...), theirs...)
	var cps []durable.Checkpoint
	for _, k := range all {
		cps = append(cps, cp(k, 1, clock.Start))
	}
	must(t, b.SaveCheckpoints(ctx, cps))
	for _, k := range []string{"a", "a#b", "ab"} {
		appendOK(t, b, ev(k, 1, "x"))
		must(t, b.SaveMeta(ctx, k, []byte(k)))
	}
	must(t, b.ClearCounter(ctx, "a", clock.Start.Add(time.Minute)))
	wantCheckpoints(t, b, all, theirs...)
	wantExact(t, b, "a", 0)
	wantExact(t, b, "a#b", 1)
	wantExact(t, b, "ab", 1)
	for _, k := range []string{"a#b", "ab"} {
		if m, err := b.LoadMeta(ctx, k); err != nil || string(m) != k {
			t.Fatalf("LoadMeta(%s) = %q, %v", k, m, err)
		}
	}
	// a's tombstone does not hide a#b's checkpoints.
	must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{cp(keyspace.SubKey("a#b", "1"), 1, clock.Start)}))
	wantCheckpoints(t, b, []string{keyspace.SubKey("a#b", "1")}, keyspace.SubKey("a#b", "1"))
}

// testTombstonePrune: a tombstone goes after TombstoneRetention.
func testTombstonePrune(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	clk := Clock(t)
	sub := keyspace.SubKey("k", "0")
	must(t, b.ClearCounter(ctx, "k", clock.Start))
	clk.Advance(TombstoneRetention - time.Second)
	rep, err := b.Prune(ctx)
	must(t, err)
	tomb, err := b.Tombstones(ctx, []string{"k"})
	must(t, err)
	if rep.Tombstones != 0 || len(tomb) != 1 {
		t.Fatalf("within the retention: pruned %+v, tombstones %v", rep, tomb)
	}
	clk.Advance(2 * time.Second)
	rep, err = b.Prune(ctx)
	must(t, err)
	tomb, err = b.Tombstones(ctx, []string{"k"})
	must(t, err)
	if rep.Tombstones != 1 || len(tomb) != 0 {
		t.Fatalf("after the retention: pruned %+v, tombstones %v", rep, tomb)
	}
	must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{cp(sub, 1, clock.Start)}))
	wantCheckpoints(t, b, []string{sub}, sub)
}

// testStats: row counts follow the writes; bytes and the store id are
// there, and the id survives a reopen.
func testStats(t *testing.T, open func(t *testing.T) durable.Backend) {
	ctx := ctxT(t)
	b := open(t)
	want := func(stage string, rows map[string]int64) {
		t.Helper()
		st, err := b.Stats(ctx)
		must(t, err)
		if st.Bytes <= 0 {
			t.Fatalf("%s: Bytes = %d", stage, st.Bytes)
		}
		for table, n := range rows {
			if st.Rows[table] != n {
				t.Fatalf("%s: %s has %d rows, want %d (all: %v)", stage, table, st.Rows[table], n, st.Rows)
			}
		}
	}
	want("empty", map[string]int64{"ids": 0, "events": 0, "totals": 0, "checkpoints": 0, "meta": 0, "clears": 0})
	appendOK(t, b, ev("a", 1, "1"), ev("a", 1, "2"), ev("b", 1, "1"))
	must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{cp(keyspace.SubKey("a", "0"), 1, clock.Start)}))
	must(t, b.SaveMeta(ctx, "a", []byte("m")))
	want("written", map[string]int64{"ids": 3, "events": 2, "totals": 0, "checkpoints": 1, "meta": 1, "clears": 0})
	_, err := b.Rollup(ctx, clock.Start.Add(time.Hour))
	must(t, err)
	want("rolled up", map[string]int64{"ids": 3, "events": 0, "totals": 2})
	must(t, b.ClearCounter(ctx, "a", clock.Start))
	want("cleared", map[string]int64{"ids": 3, "totals": 1, "checkpoints": 0, "meta": 0, "clears": 1})
	id := b.StoreID()
	if len(id) < 16 {
		t.Fatalf("StoreID = %q", id)
	}
	must(t, b.Close())
	b = openT(t, open)
	if b.StoreID() != id {
		t.Fatalf("StoreID after reopen = %q, want %q", b.StoreID(), id)
	}
}

// testUpgrade opens a store of the previous release: its unscoped IDs are
// still duplicates, on their key, until they leave the window; new IDs are
// scoped; totals, events and a sum that left int64 there come along.
func testUpgrade(t *testing.T, open func(t *testing.T) durable.Backend, old Old) {
	ctx := ctxT(t)
	clk := Clock(t)
	seen := clock.Start.Add(-10 * time.Minute).UnixNano()
	old.Create(t)
	old.AddID(t, "old-1", seen)
	old.AddID(t, "old-2", seen)
	old.AddEvent(t, "k", 7, seen, 2) // old-1 (3) and old-2 (4)
	old.AddTotal(t, "k", 100)
	old.AddID(t, "big-1", seen)
	old.AddEvent(t, "big", math.MaxInt64, seen, 1)
	old.AddEvent(t, "big", 5, seen, 1)
	b := openT(t, open)
	if b.StoreID() == "" {
		t.Fatal("no StoreID after the upgrade")
	}
	wantExact(t, b, "k", 107)
	// Retries across the upgrade are duplicates (unscoped IDs match any
	// key); new IDs are scoped.
	wantDup(t, appendOK(t, b, ev("k", 3, "old-1"), ev("k", 4, "old-2")), true, true)
	wantDup(t, appendOK(t, b, ev("k", 1, "n1"), ev("j", 1, "n1")), false, false)
	wantDup(t, appendOK(t, b, ev("k", 1, "n1")), true)
	wantErr(t, "new id re-sent with another delta", appendRes(t, b, ev("k", 2, "n1"))[0].Err, durable.ErrIDConflict)
	wantExact(t, b, "k", 108)
	wantExact(t, b, "j", 1)
	// The sum the old code let leave int64: reads and increments that keep
	// it out fail with ErrOverflow; one that brings it back counts.
	_, err := b.Exact(ctx, "big")
	wantErr(t, "Exact of a total outside int64", err, store.ErrOverflow)
	got, err := b.ExactMulti(ctx, []string{"big", "k"})
	wantErr(t, "ExactMulti with a total outside int64", err, store.ErrOverflow)
	if got["k"] != 108 {
		t.Fatalf("ExactMulti beside the overflowing key: %v", got)
	}
	res := appendRes(t, b, ev("big", 1, "b1"), ev("big", -10, "b2"), ev("k", 1, "n2"))
	wantErr(t, "increment of a total outside int64", res[0].Err, store.ErrOverflow)
	if res[1].Err != nil || res[2].Err != nil {
		t.Fatalf("increments beside it: %+v", res)
	}
	wantExact(t, b, "big", math.MaxInt64-5)
	// After the window the unscoped IDs are forgotten: a retry counts again.
	clk.Advance(DedupWindow)
	rep, err := b.Prune(ctx)
	must(t, err)
	if rep.IDs != 3 {
		t.Fatalf("Prune after the window = %+v, want the 3 unscoped IDs", rep)
	}
	wantDup(t, appendOK(t, b, ev("k", 3, "old-1"), ev("k", 1, "n1")), false, true)
	wantExact(t, b, "k", 112)
}

// testRollupPerKey: a key whose old events sum past int64 (as the previous
// release allowed) is skipped and reported; every other key is folded and
// IDs are pruned all the same.
func testRollupPerKey(t *testing.T, open func(t *testing.T) durable.Backend, old Old) {
	ctx := ctxT(t)
	seen := clock.Start.Add(-2 * DedupWindow).UnixNano()
	old.Create(t)
	old.AddID(t, "x", seen)
	old.AddEvent(t, "big", math.MaxInt64, seen, 1)
	old.AddEvent(t, "big", math.MaxInt64, seen, 1)
	old.AddEvent(t, "j", 4, seen, 2)
	old.AddTotal(t, "j", 10)
	old.AddEvent(t, "m", -3, seen, 1)
	b := openT(t, open)
	rep, err := b.Rollup(ctx, clock.Start)
	must(t, err)
	if rep.Keys != 2 || rep.Folded != 3 || rep.Pruned.IDs != 1 || len(rep.Failed) != 1 || rep.Failed[0].Key != "big" {
		t.Fatalf("Rollup = %+v; want j and m folded (3 events), big failed, 1 id pruned", rep)
	}
	wantErr(t, "the failed key's error", rep.Failed[0].Err, store.ErrOverflow)
	wantExact(t, b, "j", 14)
	wantExact(t, b, "m", -3)
	st, err := b.Stats(ctx)
	must(t, err)
	if st.Rows["events"] != 2 || st.Rows["totals"] != 2 || st.Rows["ids"] != 0 {
		t.Fatalf("rows after the rollup: %v", st.Rows)
	}
	// A later rollup still folds new events of other keys.
	appendOK(t, b, durable.Event{Key: "j", Delta: 1, ID: "y", At: clock.Start.Add(-time.Second)})
	rep, err = b.Rollup(ctx, clock.Start)
	must(t, err)
	if rep.Keys != 1 || len(rep.Failed) != 1 {
		t.Fatalf("second Rollup = %+v", rep)
	}
	wantExact(t, b, "j", 15)
}

// testMetaBatch: LoadMetas reads many records in one call and DeleteMeta
// removes a record for good (LoadMeta: ErrNotFound, not an empty record).
func testMetaBatch(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	must(t, b.SaveMeta(ctx, "a", []byte("A")))
	must(t, b.SaveMeta(ctx, "b", []byte("B")))
	must(t, b.SaveMeta(ctx, "e", []byte{}))
	got, err := b.LoadMetas(ctx, []string{"a", "b", "c", "e"})
	must(t, err)
	if fmt.Sprint(got) != fmt.Sprint(map[string][]byte{"a": []byte("A"), "b": []byte("B"), "e": {}}) {
		t.Fatalf("LoadMetas = %q", got)
	}
	must(t, b.DeleteMeta(ctx, "a"))
	must(t, b.DeleteMeta(ctx, "never"))
	if _, err := b.LoadMeta(ctx, "a"); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("LoadMeta after DeleteMeta err = %v, want ErrNotFound", err)
	}
	st, err := b.Stats(ctx)
	must(t, err)
	if st.Rows["meta"] != 2 {
		t.Fatalf("meta rows after DeleteMeta = %d, want 2", st.Rows["meta"])
	}
}

// testDeadlines: SetDeadlines records, replaces (unless onlyNew) and
// removes deadlines; DueDeadlines returns the passed ones, oldest first up
// to the limit; LoadDeadlines returns those of given keys; ClearCounter
// removes the record.
func testDeadlines(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	t0 := clock.Start
	set := func(onlyNew bool, kv ...any) {
		t.Helper()
		m := map[string]time.Time{}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i].(string)] = kv[i+1].(time.Time)
		}
		must(t, b.SetDeadlines(ctx, m, onlyNew))
	}
	set(false, "a", t0.Add(time.Second), "b", t0.Add(2*time.Second), "c", t0.Add(time.Hour), "d", t0.Add(time.Second))
	set(true, "b", t0.Add(3*time.Second), "e", t0.Add(4*time.Second)) // b kept at 2 s; e new
	set(false, "d", time.Time{}, "e", time.Time{})                    // removed
	due := func(now time.Time, limit int) string {
		t.Helper()
		m, err := b.DueDeadlines(ctx, now, limit)
		must(t, err)
		out := ""
		for _, k := range []string{"a", "b", "c", "d", "e"} {
			if at, ok := m[k]; ok {
				out += fmt.Sprintf("%s@%v ", k, at.Sub(t0))
			}
		}
		return out
	}
	if got := due(t0.Add(time.Minute), 10); got != "a@1s b@2s " {
		t.Fatalf("due = %q", got)
	}
	if m, err := b.LoadDeadlines(ctx, []string{"a", "b", "c", "d", "zz"}); err != nil || len(m) != 3 ||
		!m["a"].Equal(t0.Add(time.Second)) || !m["b"].Equal(t0.Add(2*time.Second)) || !m["c"].Equal(t0.Add(time.Hour)) {
		t.Fatalf("LoadDeadlines = %v %v", m, err)
	}
	if m, err := b.LoadDeadlines(ctx, nil); err != nil || len(m) != 0 {
		t.Fatalf("LoadDeadlines of no key = %v %v", m, err)
	}
	if got := due(t0.Add(time.Minute), 1); got != "a@1s " {
		t.Fatalf("due, limit 1 = %q", got)
	}
	set(false, "a", t0.Add(2*time.Hour)) // replaced
	must(t, b.ClearCounter(ctx, "b", t0.Add(2*time.Second)))
	if got := due(t0.Add(3*time.Hour), 10); got != "a@2h0m0s c@1h0m0s " {
		t.Fatalf("due after replace and clear = %q", got)
	}
	st, err := b.Stats(ctx)
	must(t, err)
	if st.Rows["deadlines"] != 2 {
		t.Fatalf("deadlines rows = %d, want 2", st.Rows["deadlines"])
	}
}

// testClearKeepsLater: a clear as of a past moment (an expiry cleaned up
// late) keeps the events appended after it, and their key still gets its
// overflow checks.
func testClearKeepsLater(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	t0 := clock.Start
	appendOK(t, b, durable.Event{Key: "k", Delta: 5, ID: "1", At: t0.Add(-time.Minute)})
	appendOK(t, b, durable.Event{Key: "k", Delta: 7, ID: "2", At: t0.Add(time.Minute)})
	must(t, b.ClearCounter(ctx, "k", t0))
	wantExact(t, b, "k", 7)
	appendOK(t, b, durable.Event{Key: "k", Delta: math.MaxInt64 - 7, ID: "3", At: t0.Add(2 * time.Minute)})
	res := appendRes(t, b, durable.Event{Key: "k", Delta: 1, ID: "4", At: t0.Add(3 * time.Minute)})
	if !errors.Is(res[0].Err, store.ErrOverflow) {
		t.Fatalf("increment past int64 after a partial clear: %v, want ErrOverflow", res[0].Err)
	}
	wantExact(t, b, "k", math.MaxInt64)
}
