package redis

import (
	"testing"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// TestMarks: IncrByMarked reports the mark and increments in one round;
// SetMarks writes marks (NX leaves an existing one, PXAT gives a
// deadline) and reports which it wrote; DelMark deletes a mark only if it holds the given value.
func TestMarks(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := ctxT(t)
		sub := keyspace.SubKey("mk", keyspace.ColdLabel)
		mark := keyspace.MarkKey("mk")
		if v, marked, err := s.IncrByMarked(ctx, sub, mark, 2, time.Time{}); err != nil || v != 2 || marked {
			t.Fatalf("IncrByMarked without a mark = %d %v %v, want 2 false", v, marked, err)
		}
		if w, err := s.SetMarks(ctx, []store.Mark{{Key: "mk", Value: 7}}, false); err != nil || len(w) != 1 || !w[0] {
			t.Fatalf("SetMarks = %v %v, want [true]", w, err)
		}
		at := time.Now().Add(time.Hour)
		if v, marked, err := s.IncrByMarked(ctx, sub, mark, 3, at); err != nil || v != 5 || !marked {
			t.Fatalf("IncrByMarked with a mark = %d %v %v, want 5 true", v, marked, err)
		}
		if ds, err := s.Deadlines(ctx, []string{sub, mark}); err != nil || !ds[0].At.Equal(at.Truncate(time.Millisecond)) || !ds[1].Exists || !ds[1].At.IsZero() {
			t.Fatalf("deadlines of the sub-counter and the mark = %+v %v", ds, err)
		}
		// NX leaves the mark (its value and its lack of deadline) alone.
		if w, err := s.SetMarks(ctx, []store.Mark{{Key: "mk", Value: 8, ExpireAt: at}}, true); err != nil || len(w) != 1 || w[0] {
			t.Fatalf("SetMarks NX of a mark that exists = %v %v, want [false]", w, err)
		}
		if err := s.DelMark(ctx, "mk", 8); err != nil {
			t.Fatal(err)
		}
		if got, err := s.Get(ctx, []string{mark}); err != nil || got[0] != 7 {
			t.Fatalf("mark after SET NX and a DelMark of another value = %v %v, want 7", got, err)
		}
		if err := s.DelMark(ctx, "mk", 7); err != nil {
			t.Fatal(err)
		}
		if _, marked, err := s.IncrByMarked(ctx, sub, mark, 1, time.Time{}); err != nil || marked {
			t.Fatalf("after DelMark of its value: marked %v %v, want false", marked, err)
		}
		if w, err := s.SetMarks(ctx, []store.Mark{{Key: "mk", Value: 9, ExpireAt: at}, {Key: "mk2", Value: 1}}, true); err != nil || len(w) != 2 || !w[0] || !w[1] {
			t.Fatalf("SetMarks NX of marks that do not exist = %v %v, want [true true]", w, err)
		}
		if ds, err := s.Deadlines(ctx, []string{mark}); err != nil || !ds[0].At.Equal(at.Truncate(time.Millisecond)) {
			t.Fatalf("new mark's deadline = %+v %v, want %v", ds, err, at)
		}
	})
}
