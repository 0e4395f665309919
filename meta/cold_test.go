package meta_test

import (
	"context"
	"slices"
	"testing"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/meta"
)

func coldManager(t *testing.T, cold bool, d meta.Durable) (*meta.Manager, *fakeClock, meta.Backend) {
	t.Helper()
	s := newMem(t, 3)
	clk := newFakeClock()
	m := newManager(t, s, meta.Config{Clock: clk, DefaultN: func(string) int { return 4 },
		Cold: func(string) bool { return cold }, Durable: d})
	return m, clk, s
}

// TestColdCounterNeedsNoRecord: a cold counter has one sub-counter, the
// cold label, and neither writers nor readers create a record for it.
func TestColdCounterNeedsNoRecord(t *testing.T) {
	ctx := context.Background()
	d := &fakeDurable{}
	m, _, s := coldManager(t, true, d)
	w, r, err := m.Labels(ctx, "k")
	if err != nil || !slices.Equal(w, []string{keyspace.ColdLabel}) || !slices.Equal(r, w) {
		t.Fatalf("Labels = %v %v %v", w, r, err)
	}
	if got, subs, _, _, ok := m.Cached("k"); !ok || !slices.Equal(got, w) || subs[0] != keyspace.SubKey("k", w[0]) {
		t.Fatalf("Cached = %v %v", got, ok)
	}
	sets, found, err := m.ReadSets(ctx, []string{"k", "j"})
	if err != nil || found[0] || !slices.Equal(sets[0], w) || !slices.Equal(sets[1], w) {
		t.Fatalf("ReadSets = %v %v %v", sets, found, err)
	}
	if _, ok, _ := s.GetMeta(ctx, "k"); ok || len(d.recs) != 0 {
		t.Fatalf("a cold counter got a record")
	}
}

// TestWarmCounterPinsTheColdLabelFirst: a counter that is not cold gets N
// placed labels, the cold label among them, pinned by its first writer.
func TestWarmCounterPinsTheColdLabelFirst(t *testing.T) {
	ctx := context.Background()
	m, _, s := coldManager(t, false, nil)
	w, _, err := m.Labels(ctx, "k")
	if err != nil || len(w) != 4 || w[0] != keyspace.ColdLabel {
		t.Fatalf("Labels = %v %v", w, err)
	}
	if _, ok, _ := s.GetMeta(ctx, "k"); !ok {
		t.Fatal("the first writer did not pin the labels")
	}
}

// TestHeatAndCool: a cold counter grows to N with its value kept, and
// folds back to the cold label, whose record then goes from the cache and
// the durable store.
func TestHeatAndCool(t *testing.T) {
	ctx := context.Background()
	d := &fakeDurable{}
	m, _, s := coldManager(t, true, d)
	st := s.(interface {
		IncrBy(context.Context, string, int64) (int64, error)
	})
	if _, err := st.IncrBy(ctx, keyspace.SubKey("k", keyspace.ColdLabel), 5); err != nil {
		t.Fatal(err)
	}
	if err := m.Resize(ctx, "k", 4); err != nil {
		t.Fatal(err)
	}
	w, r, _ := m.Labels(ctx, "k")
	if len(w) != 4 || w[0] != keyspace.ColdLabel || len(r) != 4 {
		t.Fatalf("after growing: %v %v", w, r)
	}
	for _, l := range w {
		if _, err := st.IncrBy(ctx, keyspace.SubKey("k", l), 10); err != nil {
			t.Fatal(err)
		}
	}
	if got := sum(t, s, "k", r); got != 45 {
		t.Fatalf("sum %d, want 45", got)
	}
	if _, ok, _ := s.GetMeta(ctx, "k"); !ok || d.recs["k"] == nil {
		t.Fatal("a grown counter has no record")
	}
	if err := m.Resize(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.GetMeta(ctx, "k"); ok || d.recs["k"] != nil {
		t.Fatal("the record of a cooled counter was kept")
	}
	w, r, _ = m.Labels(ctx, "k")
	if !slices.Equal(w, []string{keyspace.ColdLabel}) || sum(t, s, "k", r) != 45 {
		t.Fatalf("after cooling: %v, sum %d", w, sum(t, s, "k", r))
	}
}

// TestOldRecordWithoutColdLabel: a counter pinned before cold counters
// existed keeps its labels; readers also sum the cold label (where a
// writer that did not know the labels sends its increment), and cooling it
// moves everything into the cold label.
func TestOldRecordWithoutColdLabel(t *testing.T) {
	ctx := context.Background()
	m, _, s := coldManager(t, true, nil)
	old := []string{"3", "7"}
	if ok, err := s.CASMeta(ctx, "k", 0, []byte(`{"epoch":1,"write":["3","7"],"read":["3","7"]}`)); !ok || err != nil {
		t.Fatal(ok, err)
	}
	st := s.(interface {
		IncrBy(context.Context, string, int64) (int64, error)
	})
	for _, l := range append(old, keyspace.ColdLabel) {
		if _, err := st.IncrBy(ctx, keyspace.SubKey("k", l), 2); err != nil {
			t.Fatal(err)
		}
	}
	sets, found, err := m.ReadSets(ctx, []string{"k"})
	if err != nil || !found[0] || !slices.Contains(sets[0], keyspace.ColdLabel) || sum(t, s, "k", sets[0]) != 6 {
		t.Fatalf("ReadSets = %v %v %v", sets, found, err)
	}
	if err := m.Resize(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := s.GetMeta(ctx, "k"); ok {
		t.Fatal("record kept after cooling")
	}
	if got := sum(t, s, "k", []string{keyspace.ColdLabel}); got != 6 {
		t.Fatalf("cold label holds %d, want 6", got)
	}
}
