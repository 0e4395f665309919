package durabletest

import (
	"errors"
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/store"
)

// wantErr requires that err matches target and is permanent (does not
// match store.ErrUnavailable).
func wantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) || errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("%s: err = %v, want %v (and not ErrUnavailable)", what, err, target)
	}
}

// testIDsScoped: the same ID on two keys is two increments.
func testIDsScoped(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	wantDup(t, appendOK(t, b, ev("a", 1, "x"), ev("b", 2, "x")), false, false)
	wantDup(t, appendOK(t, b, ev("b", 2, "x"), ev("c", 5, "x"), ev("a", 1, "x")), true, false, true)
	wantExact(t, b, "a", 1)
	wantExact(t, b, "b", 2)
	wantExact(t, b, "c", 5)
}

// testIDConflict: a re-sent ID with another delta is ErrIDConflict, in a
// later batch, in the same batch, after a rollup and through a Committer.
func testIDConflict(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	appendOK(t, b, durable.Event{Key: "k", Delta: 5, ID: "x", At: clock.Start.Add(-time.Minute)})
	res := appendRes(t, b, ev("k", 6, "x"), ev("j", 1, "y"))
	wantErr(t, "re-sent id with another delta", res[0].Err, durable.ErrIDConflict)
	if res[1].Err != nil || res[1].Dup {
		t.Fatalf("event beside the conflict: %+v", res[1])
	}
	wantDup(t, appendOK(t, b, ev("k", 5, "x")), true)
	res = appendRes(t, b, ev("k", 1, "z"), ev("k", 2, "z"), ev("k", 1, "z"))
	if res[0].Err != nil || res[0].Dup || !res[2].Dup || res[2].Err != nil {
		t.Fatalf("same batch: %+v", res)
	}
	wantErr(t, "same id, other delta, same batch", res[1].Err, durable.ErrIDConflict)
	wantExact(t, b, "k", 6)
	wantExact(t, b, "j", 1)
	_, err := b.Rollup(ctx, clock.Start)
	must(t, err)
	wantErr(t, "conflict after rollup", appendRes(t, b, ev("k", 7, "x"))[0].Err, durable.ErrIDConflict)
	c, err := durable.NewCommitter(b, durable.CommitterConfig{})
	must(t, err)
	defer c.Close(ctx)
	_, err = c.Append(ctx, ev("k", 9, "x"))
	wantErr(t, "conflict through a Committer", err, durable.ErrIDConflict)
	wantExact(t, b, "k", 6)
}

// testOverflowIsolated: an event that would take its key's total out of
// int64 fails alone; the events before and after it, of its key and of
// others, count.
func testOverflowIsolated(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	const max = math.MaxInt64
	appendOK(t, b, ev("a", max-10, "a1"))
	res := appendRes(t, b, ev("a", 5, "a2"), ev("b", 1, "b1"), ev("a", 10, "a3"), ev("a", 4, "a4"), ev("b", 2, "b2"))
	for i, r := range res {
		if i == 2 {
			wantErr(t, "overflowing event", r.Err, store.ErrOverflow)
			continue
		}
		if r.Err != nil || r.Dup {
			t.Fatalf("event %d beside the overflow: %+v", i, r)
		}
	}
	wantExact(t, b, "a", max-1)
	wantExact(t, b, "b", 3)
	// Its ID was not recorded: a retry fails again, it is no duplicate.
	wantErr(t, "retry of the overflowing event", appendRes(t, b, ev("a", 10, "a3"))[0].Err, store.ErrOverflow)
	// The same on the negative side.
	appendOK(t, b, ev("a", -(max-1), "a5"), ev("a", math.MinInt64, "a6"))
	wantExact(t, b, "a", math.MinInt64)
	res = appendRes(t, b, ev("a", -1, "a7"), ev("b", -3, "b3"), ev("a", 1, "a8"))
	wantErr(t, "negative overflow", res[0].Err, store.ErrOverflow)
	if res[1].Err != nil || res[2].Err != nil {
		t.Fatalf("events beside the negative overflow: %+v", res)
	}
	got, err := b.ExactMulti(ctxT(t), []string{"a", "b"})
	must(t, err)
	if got["a"] != math.MinInt64+1 || got["b"] != 0 {
		t.Fatalf("ExactMulti = %v", got)
	}
}

// testOverflowRollupTotal: the check counts the rollup total, the log tail
// and the batch.
func testOverflowRollupTotal(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	old := clock.Start.Add(-time.Minute)
	appendOK(t, b, durable.Event{Key: "k", Delta: math.MaxInt64 - 3, ID: "1", At: old})
	rep, err := b.Rollup(ctx, clock.Start)
	must(t, err)
	if rep.Keys != 1 || len(rep.Failed) != 0 {
		t.Fatalf("Rollup = %+v", rep)
	}
	appendOK(t, b, ev("k", 2, "2"))
	res := appendRes(t, b, ev("k", 2, "3"), ev("k", 1, "4"))
	wantErr(t, "total + tail + batch", res[0].Err, store.ErrOverflow)
	if res[1].Err != nil {
		t.Fatal(res[1].Err)
	}
	wantExact(t, b, "k", math.MaxInt64)
	rep, err = b.Rollup(ctx, clock.Start.Add(time.Hour))
	must(t, err)
	if rep.Keys != 1 || len(rep.Failed) != 0 {
		t.Fatalf("second Rollup = %+v", rep)
	}
	wantExact(t, b, "k", math.MaxInt64)
}

// testOverflowCommitter: callers of one Committer push key "atk" past
// int64 with large deltas, or one by one at the edge, while others
// increment "vic": every increment of "vic" counts, and "atk" takes exactly
// what fits.
func testOverflowCommitter(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	c, err := durable.NewCommitter(b, durable.CommitterConfig{MaxBatch: 32, MaxDelay: 200 * time.Microsecond})
	must(t, err)
	const attackers, victims, each = 8, 16, 20
	var seq atomic.Int64
	var okAtk, okEdge atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, attackers+victims)
	run := func(n int, fn func(i int) error) {
		for range n {
			wg.Go(func() {
				for i := range each {
					if err := fn(i); err != nil {
						errs <- err
						return
					}
				}
			})
		}
	}
	// Phase 1: deltas of MaxInt64/4: four fit.
	run(attackers, func(int) error {
		_, err := c.Append(ctx, ev("atk", math.MaxInt64/4, fmt.Sprint("a", seq.Add(1))))
		switch {
		case err == nil:
			okAtk.Add(1)
		case !errors.Is(err, store.ErrOverflow) || errors.Is(err, store.ErrUnavailable):
			return fmt.Errorf("attacker: %w", err)
		}
		return nil
	})
	run(victims, func(int) error {
		if d, err := c.Append(ctx, ev("vic", 1, fmt.Sprint("v", seq.Add(1)))); err != nil || d {
			return fmt.Errorf("victim: dup %v, %w", d, err)
		}
		return nil
	})
	wg.Wait()
	// Phase 2: +1 at the very edge, with many in flight.
	edge := int64(math.MaxInt64 - 4*(math.MaxInt64/4) - 25)
	if d, err := c.Append(ctx, ev("atk", edge, "edge")); err != nil || d {
		t.Fatalf("edge: %v %v", d, err)
	}
	run(attackers, func(int) error {
		_, err := c.Append(ctx, ev("atk", 1, fmt.Sprint("e", seq.Add(1))))
		switch {
		case err == nil:
			okEdge.Add(1)
		case !errors.Is(err, store.ErrOverflow) || errors.Is(err, store.ErrUnavailable):
			return fmt.Errorf("edge attacker: %w", err)
		}
		return nil
	})
	wg.Wait()
	must(t, c.Close(ctx))
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if okAtk.Load() != 4 || okEdge.Load() != 25 {
		t.Fatalf("attacks accepted: %d large (want 4), %d at the edge (want 25)", okAtk.Load(), okEdge.Load())
	}
	wantExact(t, b, "vic", victims*each)
	wantExact(t, b, "atk", math.MaxInt64)
	if st := c.Stats(); st.Failed != 0 || st.Rejected != attackers*each*2-4-25 {
		t.Fatalf("committer stats %+v", st)
	}
}

// testLargeValues: keys that swing across most of int64, in and out of
// the exact check, keep exact totals.
func testLargeValues(t *testing.T, open func(t *testing.T) durable.Backend) {
	b := openT(t, open)
	ctx := ctxT(t)
	model := map[string]int64{}
	deltas := []int64{1 << 61, 1 << 61, 1 << 61, -(1 << 62), 1, -(1 << 62), -(1 << 61), 3, 1 << 40, -(1 << 40), 7}
	for round, d := range deltas {
		var evs []durable.Event
		for k := range 3 {
			key := fmt.Sprint("big", k)
			dd := d
			if k == 1 {
				dd = -d
			}
			evs = append(evs, ev(key, dd, fmt.Sprint(round)), ev(key, 1, fmt.Sprint(round, "+")))
			model[key] += dd + 1
		}
		evs = append(evs, ev("small", 1, fmt.Sprint(round)))
		model["small"]++
		appendOK(t, b, evs...)
		if round == 5 {
			_, err := b.Rollup(ctx, clock.Start.Add(time.Hour))
			must(t, err)
		}
		keys := []string{"big0", "big1", "big2", "small"}
		got, err := b.ExactMulti(ctx, keys)
		must(t, err)
		for _, k := range keys {
			if got[k] != model[k] {
				t.Fatalf("round %d: %s = %d, want %d", round, k, got[k], model[k])
			}
		}
	}
}
