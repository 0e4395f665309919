package sqlkit_test

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/internal/sqlkit"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

func ev(key string, delta int64, id string) durable.Event {
	return durable.Event{Key: key, Delta: delta, ID: id}
}

// outcome renders a result: ok, dup, or the named error it matches.
func outcome(r durable.Result) string {
	switch {
	case r.Err == nil && r.Dup:
		return "dup"
	case r.Err == nil:
		return "ok"
	case errors.Is(r.Err, durable.ErrIDConflict):
		return "conflict"
	case errors.Is(r.Err, store.ErrOverflow):
		return "overflow"
	case errors.Is(r.Err, durable.ErrInvalidEvent):
		return "invalid"
	}
	return r.Err.Error()
}

func outcomes(rs []durable.Result) string {
	var s []string
	for _, r := range rs {
		s = append(s, outcome(r))
	}
	return fmt.Sprint(s)
}

func TestBatch(t *testing.T) {
	const max = math.MaxInt64
	tests := []struct {
		name    string
		events  []durable.Event
		stored  map[[2]string]int64 // (key, id) → stored delta
		legacy  []string
		settle  map[string]int64 // key → total before the batch
		want    string
		pending int
	}{
		{
			name:    "repeats in the batch",
			events:  []durable.Event{ev("k", 1, "x"), ev("k", 1, "x"), ev("k", 2, "x"), ev("j", 1, "x")},
			want:    "[ok dup conflict ok]",
			pending: 2,
		},
		{
			name:    "invalid events fail alone",
			events:  []durable.Event{ev("", 1, "x"), ev("k", 1, ""), ev("k\x00", 1, "y"), ev("k", 1, "y")},
			want:    "[invalid invalid invalid ok]",
			pending: 1,
		},
		{
			name:    "stored ids",
			events:  []durable.Event{ev("k", 1, "a"), ev("k", 2, "b"), ev("j", 1, "a"), ev("k", 2, "b")},
			stored:  map[[2]string]int64{{"k", "a"}: 1, {"k", "b"}: 3},
			want:    "[dup conflict ok conflict]",
			pending: 1,
		},
		{
			name:    "legacy ids match any key",
			events:  []durable.Event{ev("k", 1, "a"), ev("j", 5, "a"), ev("k", 1, "b")},
			legacy:  []string{"a"},
			want:    "[dup dup ok]",
			pending: 1,
		},
		{
			name:    "overflow fails only the events that leave int64",
			events:  []durable.Event{ev("k", 5, "1"), ev("j", 1, "1"), ev("k", 10, "2"), ev("k", 4, "3"), ev("k", 10, "2")},
			settle:  map[string]int64{"k": max - 10},
			want:    "[ok ok overflow ok overflow]",
			pending: 3,
		},
		{
			name:    "negative side",
			events:  []durable.Event{ev("k", -1, "1"), ev("k", 1, "2"), ev("k", -1, "3")},
			settle:  map[string]int64{"k": math.MinInt64},
			want:    "[overflow ok ok]",
			pending: 2,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := sqlkit.NewBatch(tc.events, 1)
			for k, d := range tc.stored {
				if i, ok := b.Find(k[0], k[1]); ok {
					b.Stored(i, d)
				}
			}
			for _, id := range tc.legacy {
				b.StoredLegacy(id)
			}
			for k, v := range tc.settle {
				b.Settle(k, big.NewInt(v))
			}
			if n := len(b.Pending()); n != tc.pending {
				t.Errorf("pending %d, want %d", n, tc.pending)
			}
			if got := outcomes(b.Finish()); got != tc.want {
				t.Errorf("results %s, want %s", got, tc.want)
			}
		})
	}
}

func TestBatchFindAndKeys(t *testing.T) {
	b := sqlkit.NewBatch([]durable.Event{ev("b", -3, "2"), ev("a", 1, "1"), ev("b", math.MinInt64, "1"), ev("b", 4, "2")}, 1)
	if i, ok := b.Find("b", "1"); !ok || i != 2 {
		t.Fatalf("Find(b, 1) = %d, %v", i, ok)
	}
	if _, ok := b.Find("c", "1"); ok {
		t.Fatal("Find of a missing pair")
	}
	if got := fmt.Sprint(b.Keys()); got != "[{a 1} {b 9223372036854775807}]" {
		t.Fatalf("Keys = %s", got)
	}
	if got := fmt.Sprint(b.Pending()); got != "[1 2 0]" {
		t.Fatalf("Pending = %s (sorted by key and id)", got)
	}
	if _, ok := sqlkit.NewBatch(nil, 0).Find("a", "b"); ok {
		t.Fatal("Find in an empty batch")
	}
}

func TestRows(t *testing.T) {
	t0 := clock.Start
	now := t0.Add(time.Minute).UnixNano()
	evs := []durable.Event{
		{Key: "a", Delta: 1, ID: "1", At: t0},
		{Key: "b", Delta: 5, ID: "2"},
		{Key: "a", Delta: 2, ID: "3", At: t0.Add(time.Second)},
		{Key: "a", Delta: math.MaxInt64, ID: "5", At: t0}, // overflows a's row
	}
	got := fmt.Sprint(sqlkit.NewBatch(evs, now).Rows())
	want := fmt.Sprint([]sqlkit.Row{
		{Key: "a", Delta: 3, At: t0.Add(time.Second).UnixNano(), N: 2},
		{Key: "a", Delta: math.MaxInt64, At: t0.UnixNano(), N: 1},
		{Key: "b", Delta: 5, At: now, N: 1},
	})
	if got != want {
		t.Fatalf("Rows =\n%s\nwant\n%s", got, want)
	}
}

func TestFast(t *testing.T) {
	tests := []struct {
		total, mag, abs int64
		want            bool
	}{
		{0, 0, 1, true},
		{0, 0, sqlkit.FastDelta, true},
		{0, 0, sqlkit.FastDelta + 1, false},
		{sqlkit.FastBound - 10, 5, 5, true},
		{sqlkit.FastBound - 10, 5, 6, false},
		{-sqlkit.FastBound, 0, 0, true},
		{math.MinInt64, 0, 0, false},
		{0, math.MaxInt64, 1, false},
	}
	for _, tc := range tests {
		if got := sqlkit.Fast(tc.total, tc.mag, tc.abs); got != tc.want {
			t.Errorf("Fast(%d, %d, %d) = %v, want %v", tc.total, tc.mag, tc.abs, got, tc.want)
		}
	}
}

func TestCounterOfAndRange(t *testing.T) {
	for _, tc := range []struct{ key, counter string }{
		{keyspace.SubKey("a", "0"), "a"},
		{keyspace.SubKey("a#b", "0"), "a#b"},
		{"{a#b}", "a"},
		{"plain", "plain"},
		{"{nohash}", "{nohash}"},
	} {
		if got := sqlkit.CounterOf(tc.key); got != tc.counter {
			t.Errorf("CounterOf(%q) = %q, want %q", tc.key, got, tc.counter)
		}
	}
	lo, hi := sqlkit.SubKeyRange("a")
	for _, k := range []string{keyspace.SubKey("a", "0"), keyspace.SubKey("a", "zz"), keyspace.SubKey("a#b", "0")} {
		if k < lo || k >= hi {
			t.Errorf("%q outside [%q, %q)", k, lo, hi)
		}
	}
	for _, k := range []string{keyspace.SubKey("ab", "0"), "a", keyspace.SubKey("a$", "0")} {
		if k >= lo && k < hi {
			t.Errorf("%q inside [%q, %q)", k, lo, hi)
		}
	}
}

func TestNanosRoundTrip(t *testing.T) {
	for _, tm := range []time.Time{{}, clock.Start, time.Unix(0, 1)} {
		if got := sqlkit.FromNanos(sqlkit.Nanos(tm)); !got.Equal(tm) {
			t.Errorf("round trip of %v gave %v", tm, got)
		}
	}
}

func TestAddAbsClamp(t *testing.T) {
	if _, ok := sqlkit.Add(math.MaxInt64, 1); ok {
		t.Error("Add overflow not seen")
	}
	if s, ok := sqlkit.Add(math.MinInt64, math.MaxInt64); !ok || s != -1 {
		t.Error("Add")
	}
	if sqlkit.Abs(math.MinInt64) != math.MaxInt64 || sqlkit.Abs(-3) != 3 {
		t.Error("Abs")
	}
	if sqlkit.AddSat(math.MaxInt64-1, 5) != math.MaxInt64 {
		t.Error("AddSat")
	}
	big2 := new(big.Int).Lsh(big.NewInt(1), 70)
	if sqlkit.Clamp(big2) != math.MaxInt64 || sqlkit.Clamp(big.NewInt(-4)) != 0 || sqlkit.Clamp(big.NewInt(9)) != 9 {
		t.Error("Clamp")
	}
}
