// Package durabletest is the conformance suite every durable.Backend runs.
//
// Run calls open once or more per subtest. The open function must:
//   - give the backend Clock(t) as its clock, DedupWindow as its dedup
//     window and TombstoneRetention as its tombstone retention;
//   - reach the same storage when called again within the same test (use
//     Memo), so that reopening can be tested, and fresh storage otherwise;
//   - close nothing itself: the suite closes what it opened.
//
// Some tests need a store as the previous release wrote it (schema version
// 1: unscoped IDs, and sums that may leave int64); the backend provides it
// as an Old.
package durabletest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/store"
)

// Settings the suite expects the backend to use.
const (
	// DedupWindow is the dedup window.
	DedupWindow = time.Hour
	// TombstoneRetention is the tombstone retention.
	TombstoneRetention = 2 * time.Hour
)

// Old writes a store in the layout of the previous release (schema
// version 1), in the storage open reaches for the same test.
type Old interface {
	// Create makes the schema of the previous release, with its
	// schema_version row, exactly as that release's migration did.
	Create(t *testing.T)
	// AddID records an acknowledged idempotency id (unscoped).
	AddID(t *testing.T, id string, seenNs int64)
	// AddEvent adds a log row.
	AddEvent(t *testing.T, key string, delta, atNs, n int64)
	// AddTotal sets a rolled-up total.
	AddTotal(t *testing.T, key string, total int64)
}

// Run runs the conformance suite against the backends open returns; old
// writes stores of the previous release in the same storage.
func Run(t *testing.T, open func(t *testing.T) durable.Backend, old func(t *testing.T) Old) {
	tests := []struct {
		name string
		fn   func(t *testing.T, open func(t *testing.T) durable.Backend)
	}{
		{"CheckpointUpsert", testCheckpointUpsert},
		{"AppendExact", testAppendExact},
		{"DuplicateSameBatch", testDupSameBatch},
		{"DuplicateLaterBatch", testDupLaterBatch},
		{"DuplicateAfterRollup", testDupAfterRollup},
		{"LargeBatch", testLargeBatch},
		{"RollupPreservesExact", testRollup},
		{"DedupWindowExpiry", testDedupExpiry},
		{"Meta", testMeta},
		{"ConcurrentAppenders", testConcurrent},
		{"Reopen", testReopen},
		{"InvalidAndClosed", testInvalidAndClosed},
		{"IDsScopedToKey", testIDsScoped},
		{"IDConflict", testIDConflict},
		{"OverflowFailsOnlyItsEvents", testOverflowIsolated},
		{"OverflowThroughRollupTotal", testOverflowRollupTotal},
		{"OverflowThroughCommitter", testOverflowCommitter},
		{"LargeValuesStayExact", testLargeValues},
		{"ClearCounter", testClear},
		{"ClearKeepsOtherCounters", testClearOthers},
		{"ClearEndedKeepsTheLivingCounter", testClearEnded},
		{"TombstonePruning", testTombstonePrune},
		{"StatsAndStoreID", testStats},
		{"MetaBatchAndDelete", testMetaBatch},
		{"Deadlines", testDeadlines},
		{"ClearKeepsLaterEvents", testClearKeepsLater},
		{"KeysInPages", testKeysAfter},
		{"CheckpointsInPages", testCheckpointsAfter},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, open) })
	}
	t.Run("UpgradeFromV1", func(t *testing.T) { testUpgrade(t, open, old(t)) })
	t.Run("RollupSkipsOverflowingKey", func(t *testing.T) { testRollupPerKey(t, open, old(t)) })
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openT(t *testing.T, open func(t *testing.T) durable.Backend) durable.Backend {
	t.Helper()
	b := open(t)
	t.Cleanup(func() { b.Close() })
	return b
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func wantExact(t *testing.T, b durable.Backend, key string, want int64) {
	t.Helper()
	got, err := b.Exact(ctxT(t), key)
	must(t, err)
	if got != want {
		t.Fatalf("Exact(%q) = %d, want %d", key, got, want)
	}
}

// appendRes appends evs and returns their results.
func appendRes(t *testing.T, b durable.Backend, evs ...durable.Event) []durable.Result {
	t.Helper()
	res, err := b.AppendEvents(ctxT(t), evs)
	must(t, err)
	if len(res) != len(evs) {
		t.Fatalf("AppendEvents returned %d results for %d events", len(res), len(evs))
	}
	return res
}

// appendOK appends evs, requires that none failed and returns their Dup
// flags.
func appendOK(t *testing.T, b durable.Backend, evs ...durable.Event) []bool {
	t.Helper()
	dup := make([]bool, len(evs))
	for i, r := range appendRes(t, b, evs...) {
		if r.Err != nil {
			t.Fatalf("event %d (%+v) failed: %v", i, evs[i], r.Err)
		}
		dup[i] = r.Dup
	}
	return dup
}

func wantDup(t *testing.T, got []bool, want ...bool) {
	t.Helper()
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("dup = %v, want %v", got, want)
	}
}

func ev(key string, delta int64, id string) durable.Event {
	return durable.Event{Key: key, Delta: delta, ID: id}
}

func testCheckpointUpsert(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	t1 := clock.Start.Add(time.Second)
	a := durable.Checkpoint{Key: "likes:a", Total: 5, Epoch: 1, At: t1}
	must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{a}))
	must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{a})) // again: no change
	steps := []struct {
		name string
		save durable.Checkpoint
		want durable.Checkpoint
	}{
		{"same again", a, a},
		{"older At loses", durable.Checkpoint{Key: "likes:a", Total: 3, Epoch: 1, At: clock.Start}, a},
		{"lower epoch loses", durable.Checkpoint{Key: "likes:a", Total: 9, Epoch: 0, At: t1.Add(time.Hour)}, a},
		{"later At wins", durable.Checkpoint{Key: "likes:a", Total: 7, Epoch: 1, At: t1.Add(time.Nanosecond)},
			durable.Checkpoint{Key: "likes:a", Total: 7, Epoch: 1, At: t1.Add(time.Nanosecond)}},
		{"higher epoch wins with older At", durable.Checkpoint{Key: "likes:a", Total: -2, Epoch: 2, At: clock.Start},
			durable.Checkpoint{Key: "likes:a", Total: -2, Epoch: 2, At: clock.Start}},
	}
	for _, s := range steps {
		must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{s.save}))
		got, err := b.LoadCheckpoints(ctx, []string{"likes:a", "likes:missing"})
		must(t, err)
		if _, ok := got["likes:missing"]; ok || len(got) != 1 {
			t.Fatalf("%s: loaded %v, want only likes:a", s.name, got)
		}
		if g := got["likes:a"]; g.Total != s.want.Total || g.Epoch != s.want.Epoch || !g.At.Equal(s.want.At) {
			t.Fatalf("%s: loaded %+v, want %+v", s.name, g, s.want)
		}
	}
	// One call naming a key twice keeps the newest; zero At round-trips.
	must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{
		{Key: "likes:b", Total: 1, Epoch: 3, At: t1},
		{Key: "likes:b", Total: 2, Epoch: 4, At: clock.Start},
		{Key: "likes:b", Total: 3, Epoch: 3, At: t1.Add(time.Hour)},
		{Key: "views:c", Total: 10},
	}))
	list, err := b.ListCheckpoints(ctx, "likes:")
	must(t, err)
	if len(list) != 2 || list[0].Key != "likes:a" || list[1].Key != "likes:b" || list[1].Total != 2 {
		t.Fatalf("ListCheckpoints(likes:) = %+v", list)
	}
	got, err := b.LoadCheckpoints(ctx, []string{"views:c"})
	must(t, err)
	if c := got["views:c"]; c.Total != 10 || !c.At.IsZero() || c.Epoch != 0 {
		t.Fatalf("views:c = %+v", c)
	}
	all, err := b.ListCheckpoints(ctx, "")
	must(t, err)
	if len(all) != 3 {
		t.Fatalf("ListCheckpoints(\"\") has %d entries, want 3", len(all))
	}
	none, err := b.LoadCheckpoints(ctx, nil)
	must(t, err)
	if len(none) != 0 {
		t.Fatalf("LoadCheckpoints(nil) = %v", none)
	}
}

func testAppendExact(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	wantExact(t, b, "likes:1", 0)
	wantDup(t, appendOK(t, b, ev("likes:1", 5, "a"), ev("likes:2", 7, "b"), ev("likes:1", -2, "c")), false, false, false)
	wantDup(t, appendOK(t, b), []bool{}...)
	wantExact(t, b, "likes:1", 3)
	wantExact(t, b, "likes:2", 7)
	got, err := b.ExactMulti(ctx, []string{"likes:1", "likes:2", "likes:none", "likes:1"})
	must(t, err)
	if len(got) != 3 || got["likes:1"] != 3 || got["likes:2"] != 7 || got["likes:none"] != 0 {
		t.Fatalf("ExactMulti = %v", got)
	}
	appendOK(t, b, ev("views:1", 1, "d"), ev("lik", 1, "e"))
	keys, err := b.Keys(ctx, "likes:")
	must(t, err)
	if fmt.Sprint(keys) != "[likes:1 likes:2]" {
		t.Fatalf("Keys(likes:) = %v", keys)
	}
	keys, err = b.Keys(ctx, "")
	must(t, err)
	if fmt.Sprint(keys) != "[lik likes:1 likes:2 views:1]" {
		t.Fatalf("Keys(\"\") = %v", keys)
	}
}

func testDupSameBatch(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	wantDup(t, appendOK(t, b, ev("k", 1, "x"), ev("k", 1, "x"), ev("k", 10, "y"), ev("k", 1, "x")),
		false, true, false, true)
	wantExact(t, b, "k", 11)
}

func testDupLaterBatch(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	wantDup(t, appendOK(t, b, ev("k", 1, "x"), ev("k", 2, "y")), false, false)
	wantDup(t, appendOK(t, b, ev("k", 100, "z"), ev("k", 1, "x"), ev("k", 2, "y")), false, true, true)
	wantExact(t, b, "k", 103)
}

// testLargeBatch appends batches larger than any statement chunk, over
// many keys, repeating IDs of an earlier batch and of the same batch.
func testLargeBatch(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	const keys, n = 700, 2100
	key := func(i int) string { return fmt.Sprint("k", i%keys) }
	var first []durable.Event
	for i := range n {
		first = append(first, ev(key(i), int64(i), fmt.Sprint("id", i)))
	}
	appendOK(t, b, first...)
	var second []durable.Event
	var fresh int
	for i := range n {
		e := ev(key(i/2), 1, fmt.Sprint("new", i/2)) // pairs within the batch
		if i%3 == 0 {
			e = first[i] // every third repeats the first batch
		}
		second = append(second, e)
	}
	for i, d := range appendOK(t, b, second...) {
		wantDupHere := i%3 == 0 || (i%2 == 1 && (i-1)%3 != 0)
		if d != wantDupHere {
			t.Fatalf("second batch: dup[%d] = %v, want %v", i, d, wantDupHere)
		}
		if !d {
			fresh++
		}
	}
	all := make([]string, keys)
	for i := range all {
		all[i] = key(i)
	}
	got, err := b.ExactMulti(ctx, all)
	must(t, err)
	var sum int64
	for _, v := range got {
		sum += v
	}
	if want := int64(n*(n-1)/2 + fresh); sum != want || len(got) != keys {
		t.Fatalf("sum of %d keys = %d, want %d over %d", len(got), sum, want, keys)
	}
}

func testDupAfterRollup(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	at := clock.Start.Add(-time.Minute)
	appendOK(t, b, durable.Event{Key: "k", Delta: 4, ID: "x", At: at})
	rep, err := b.Rollup(ctx, clock.Start)
	must(t, err)
	if rep.Folded != 1 || rep.Keys != 1 {
		t.Fatalf("Rollup = %+v, want 1 event of 1 key folded", rep)
	}
	wantDup(t, appendOK(t, b, durable.Event{Key: "k", Delta: 4, ID: "x", At: at}), true)
	wantExact(t, b, "k", 4)
	if rep, err := b.Rollup(ctx, clock.Start); err != nil || rep.Folded != 0 {
		t.Fatalf("second Rollup = %+v, %v; want 0 (nothing left to fold)", rep, err)
	}
	keys, err := b.Keys(ctx, "")
	must(t, err)
	if fmt.Sprint(keys) != "[k]" {
		t.Fatalf("Keys after rollup = %v", keys)
	}
}

func testRollup(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	var want int64
	for i := range 100 { // one call each: a call's events may fold together
		d := int64(i%7 - 2)
		want += d
		appendOK(t, b, durable.Event{Key: "k", Delta: d, ID: fmt.Sprint("r", i), At: clock.Start.Add(time.Duration(i) * time.Second)})
	}
	appendOK(t, b, durable.Event{Key: "j", Delta: 1000, ID: "j1", At: clock.Start})
	wantExact(t, b, "k", want)
	cuts := []struct {
		before time.Time
		folded int
	}{
		{clock.Start, 0},                        // strictly before: nothing
		{clock.Start.Add(40 * time.Second), 41}, // k's 0..39 and j
		{clock.Start.Add(40 * time.Second), 0},  // again: idempotent
		{clock.Start.Add(time.Hour), 60},
	}
	for _, c := range cuts {
		rep, err := b.Rollup(ctx, c.before)
		must(t, err)
		if rep.Folded != c.folded || len(rep.Failed) != 0 {
			t.Fatalf("Rollup(%v) = %+v, want %d folded", c.before.Sub(clock.Start), rep, c.folded)
		}
		wantExact(t, b, "k", want)
		wantExact(t, b, "j", 1000)
	}
	appendOK(t, b, ev("k", 5, "late"))
	wantExact(t, b, "k", want+5)
	got, err := b.ExactMulti(ctx, []string{"k", "j"})
	must(t, err)
	if got["k"] != want+5 || got["j"] != 1000 {
		t.Fatalf("ExactMulti after rollup = %v", got)
	}
}

func testDedupExpiry(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	clk := Clock(t)
	appendOK(t, b, ev("k", 1, "x"))
	clk.Advance(DedupWindow - time.Second)
	rep, err := b.Prune(ctx)
	must(t, err)
	if rep.IDs != 0 {
		t.Fatalf("Prune within the window = %+v", rep)
	}
	wantDup(t, appendOK(t, b, ev("k", 1, "x")), true) // still within the window
	wantExact(t, b, "k", 1)
	clk.Advance(2 * time.Second)
	rr, err := b.Rollup(ctx, clk.Now()) // prunes x
	must(t, err)
	if rr.Pruned.IDs != 1 {
		t.Fatalf("Rollup after the window pruned %+v, want 1 id", rr.Pruned)
	}
	wantDup(t, appendOK(t, b, ev("k", 1, "x")), false) // forgotten: counts again
	wantExact(t, b, "k", 2)
	wantDup(t, appendOK(t, b, ev("k", 1, "x")), true) // and is remembered anew
	wantExact(t, b, "k", 2)
}

func testMeta(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	if _, err := b.LoadMeta(ctx, "likes:1"); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("LoadMeta(missing) err = %v, want ErrNotFound", err)
	}
	for _, data := range [][]byte{[]byte(`{"labels":["a","b"]}`), {0, 1, 2, 255}, {}} {
		must(t, b.SaveMeta(ctx, "likes:1", data))
		got, err := b.LoadMeta(ctx, "likes:1")
		must(t, err)
		if string(got) != string(data) || got == nil {
			t.Fatalf("LoadMeta = %q, want %q", got, data)
		}
	}
	if _, err := b.LoadMeta(ctx, "likes:2"); !errors.Is(err, durable.ErrNotFound) {
		t.Fatalf("LoadMeta(other) err = %v, want ErrNotFound", err)
	}
}

// testConcurrent has 32 goroutines append through one Committer (and some
// straight to the backend), each retrying some of its own IDs and racing
// another goroutine's IDs, while rollups run; every ID must count exactly
// once.
func testConcurrent(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	c, err := durable.NewCommitter(b, durable.CommitterConfig{MaxBatch: 64, MaxDelay: 200 * time.Microsecond})
	must(t, err)
	const workers, each = 32, 40
	// Rollups run throughout and must neither lose nor double an event.
	stop := make(chan struct{})
	rolled := make(chan error, 1)
	go func() {
		defer close(rolled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			if _, err := b.Rollup(ctx, clock.Start.Add(time.Second)); err != nil {
				rolled <- err
				return
			}
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	var dupMu sync.Mutex
	fresh := map[string]int{}
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				// Worker w and w^1 share IDs; every third is sent twice.
				id := fmt.Sprintf("w%d-%d", w/2, i)
				var d bool
				var err error
				if w%4 == 3 && i%5 == 0 {
					var rs []durable.Result
					rs, err = b.AppendEvents(ctx, []durable.Event{ev("hot", 1, id)})
					if err == nil {
						d, err = rs[0].Dup, rs[0].Err
					}
				} else {
					d, err = c.Append(ctx, ev("hot", 1, id))
				}
				if err == nil && i%3 == 0 {
					var d2 bool
					d2, err = c.Append(ctx, ev("hot", 1, id))
					if err == nil && !d2 {
						err = fmt.Errorf("retry of %s was not a duplicate", id)
					}
				}
				if err != nil {
					errs <- err
					return
				}
				if !d {
					dupMu.Lock()
					fresh[id]++
					dupMu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	must(t, c.Close(ctx))
	close(stop)
	must(t, <-rolled)
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(fresh) != workers/2*each {
		t.Fatalf("%d distinct IDs acknowledged as new, want %d", len(fresh), workers/2*each)
	}
	for id, n := range fresh {
		if n != 1 {
			t.Fatalf("ID %s acknowledged as new %d times", id, n)
		}
	}
	wantExact(t, b, "hot", workers/2*each)
	if _, err := c.Append(ctx, ev("hot", 1, "late")); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Append after Close err = %v, want ErrClosed", err)
	}
	must(t, c.Close(ctx)) // idempotent
}

func testReopen(t *testing.T, open func(t *testing.T) durable.Backend) {
	ctx := ctxT(t)
	b := open(t)
	appendOK(t, b, ev("k", 3, "x"))
	must(t, b.SaveMeta(ctx, "k", []byte("m")))
	must(t, b.SaveCheckpoints(ctx, []durable.Checkpoint{{Key: "f", Total: 9, Epoch: 1, At: clock.Start}}))
	must(t, b.Close())
	for range 2 { // migrations are applied once; reopening changes nothing
		b = open(t)
		wantExact(t, b, "k", 3)
		wantDup(t, appendOK(t, b, ev("k", 3, "x")), true)
		m, err := b.LoadMeta(ctx, "k")
		must(t, err)
		cps, err := b.LoadCheckpoints(ctx, []string{"f"})
		must(t, err)
		if string(m) != "m" || cps["f"].Total != 9 {
			t.Fatalf("after reopen: meta %q, checkpoint %+v", m, cps["f"])
		}
		must(t, b.Close())
	}
}

func testInvalidAndClosed(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := open(t)
	ctx := ctxT(t)
	for i, e := range []durable.Event{ev("k", 1, ""), ev("", 1, "x"), ev("k\x00", 1, "x"), ev("k", 1, "\xff")} {
		// An invalid event fails alone; the valid one beside it counts.
		res := appendRes(t, b, ev("k", 1, fmt.Sprint("ok", i)), e)
		if res[0].Err != nil || res[0].Dup {
			t.Fatalf("valid event beside %+v: %+v", e, res[0])
		}
		if err := res[1].Err; !errors.Is(err, durable.ErrInvalidEvent) || errors.Is(err, store.ErrUnavailable) {
			t.Fatalf("AppendEvents(%+v) err = %v, want ErrInvalidEvent (permanent)", e, err)
		}
	}
	wantExact(t, b, "k", 4)
	if err := b.SaveCheckpoints(ctx, []durable.Checkpoint{{Key: ""}}); !errors.Is(err, durable.ErrInvalidCheckpoint) {
		t.Fatalf("SaveCheckpoints(empty key) err = %v", err)
	}
	if err := b.SaveCheckpoints(ctx, []durable.Checkpoint{{Key: "k", Epoch: 1 << 63}}); !errors.Is(err, durable.ErrInvalidCheckpoint) {
		t.Fatalf("SaveCheckpoints(huge epoch) err = %v", err)
	}
	must(t, b.Close())
	must(t, b.Close())
	if _, err := b.AppendEvents(ctx, []durable.Event{ev("k", 1, "y")}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("AppendEvents after Close err = %v, want ErrClosed", err)
	}
	if _, err := b.Exact(ctx, "k"); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Exact after Close err = %v, want ErrClosed", err)
	}
}
