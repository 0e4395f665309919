package hotcount_test

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// TestOverflowBound: an unbuffered increment that would take its
// sub-counter past ±store.MaxValue, or whose delta alone passes it,
// answers ErrOverflow and changes nothing, on both backends.
func TestOverflowBound(t *testing.T) {
	const m = store.MaxValue
	for _, b := range allBackends() {
		t.Run(b.name, func(t *testing.T) {
			c := newClient(t, b.open(t), hotcount.Config{Defaults: hotcount.Namespace{N: 1}, Reads: hotcount.ReadConfig{NoCache: true}})
			ctx := context.Background()
			key := uniqueKey(t)
			steps := []struct {
				delta int64
				err   error
				want  int64
			}{
				{m, nil, m},
				{1, hotcount.ErrOverflow, m},
				{math.MaxInt64, hotcount.ErrOverflow, m},
				{-m, nil, 0},
				{-m, nil, -m},
				{-1, hotcount.ErrOverflow, -m},
				{math.MinInt64, hotcount.ErrOverflow, -m},
				// A delta past the bound is refused even where the
				// sub-counter holds room for it.
				{m + 1, hotcount.ErrOverflow, -m},
				{2 * m, hotcount.ErrOverflow, -m},
				{m, nil, 0},
			}
			for i, s := range steps {
				err := c.Incr(ctx, key, s.delta)
				if !errors.Is(err, s.err) || (s.err == nil && err != nil) {
					t.Fatalf("step %d: Incr(%d) = %v, want %v", i, s.delta, err, s.err)
				}
				r, err := c.Get(ctx, key)
				if err != nil || r.Value != s.want {
					t.Fatalf("step %d: value %+v %v, want %d", i, r, err, s.want)
				}
			}
		})
	}
}

// TestNoAcceptedWriteMakesACounterUnreadable: the largest increments,
// accepted or refused, never leave a counter whose sum cannot be read.
// Before the bound, two increments of math.MaxInt64 that landed on two
// sub-counters were both accepted, and the counter answered ErrOverflow
// to every read from then on.
func TestNoAcceptedWriteMakesACounterUnreadable(t *testing.T) {
	for _, b := range allBackends() {
		t.Run(b.name, func(t *testing.T) {
			c := newClient(t, b.open(t), hotcount.Config{Defaults: hotcount.Namespace{N: 8}, Reads: hotcount.ReadConfig{NoCache: true}})
			ctx := context.Background()
			key := uniqueKey(t)
			var accepted int64
			for _, d := range []int64{math.MaxInt64, math.MaxInt64, store.MaxValue, store.MaxValue, store.MaxValue} {
				switch err := c.Incr(ctx, key, d); {
				case err == nil:
					accepted += d
				case !errors.Is(err, hotcount.ErrOverflow):
					t.Fatalf("Incr(%d): %v", d, err)
				}
				r, err := c.Get(ctx, key)
				if err != nil || r.Value != accepted {
					t.Fatalf("after Incr(%d): %+v %v, want %d", d, r, err, accepted)
				}
			}
			// Every sub-counter at the bound: the largest sum still fits.
			if err := c.Resize(ctx, key, keyspace.MaxN); err != nil {
				t.Fatal(err)
			}
			m, err := c.GetMulti(ctx, []string{key, "other"})
			if err != nil || m[key].Value != accepted {
				t.Fatalf("batch read: %+v %v", m, err)
			}
		})
	}
}

// TestBufferedOverflow: a buffered increment is checked against the bound
// locally, and a flush the cache refuses for the bound is dropped and
// counted; Close does not wait on it.
func TestBufferedOverflow(t *testing.T) {
	st := mustMem(t)
	c := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{N: 1, Buffered: true}, Reads: hotcount.ReadConfig{NoCache: true}})
	ctx := context.Background()
	if err := c.Incr(ctx, "a", store.MaxValue+1); !errors.Is(err, hotcount.ErrOverflow) {
		t.Fatalf("Incr past the bound: %v", err)
	}
	if err := c.Incr(ctx, "a", store.MaxValue); err != nil {
		t.Fatal(err)
	}
	if err := c.Incr(ctx, "a", 1); !errors.Is(err, hotcount.ErrOverflow) {
		t.Fatalf("local delta past the bound: %v", err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	// The cache holds the bound; one more is refused by the cache.
	if err := c.Incr(ctx, "a", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatalf("a refused flush is dropped, not an error: %v", err)
	}
	if s := c.Stats().Buffer; s.Dropped != 1 || s.DroppedDelta != 1 || s.Unflushed != 0 {
		t.Fatalf("buffer stats %+v", s)
	}
	if r, err := c.Get(ctx, "a"); err != nil || r.Value != store.MaxValue {
		t.Fatalf("value %+v %v", r, err)
	}
	if err := c.Incr(ctx, "a", -5); err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := c.Close(cctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
}
