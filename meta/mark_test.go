package meta_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/meta"
	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/mem"
)

// markLog is a backend that checks, at every write of a record, that the
// record's mark is there, and at every write of a mark or a record logs
// it; during, when set, runs once right after a record is deleted.
type markLog struct {
	*mem.Store
	t      testing.TB
	mu     sync.Mutex
	log    []string
	during func()
}

func (b *markLog) add(s string) {
	b.mu.Lock()
	b.log = append(b.log, s)
	b.mu.Unlock()
}

func (b *markLog) SetMarks(ctx context.Context, marks []store.Mark, onlyNew bool) ([]bool, error) {
	for _, m := range marks {
		if onlyNew {
			b.add("heal " + m.Key)
		} else {
			b.add("mark " + m.Key)
		}
	}
	return b.Store.SetMarks(ctx, marks, onlyNew)
}

func (b *markLog) DelMark(ctx context.Context, key string, v int64) error {
	b.add("unmark " + key)
	return b.Store.DelMark(ctx, key, v)
}

func (b *markLog) CASMeta(ctx context.Context, key string, epoch uint64, data []byte) (bool, error) {
	if data != nil && !marked(b.t, b.Store, key) {
		b.t.Errorf("record of %q written without its mark", key)
	}
	ok, err := b.Store.CASMeta(ctx, key, epoch, data)
	switch {
	case !ok || err != nil:
	case data == nil:
		b.add("drop " + key)
		if f := b.during; f != nil {
			b.during = nil
			f()
		}
	default:
		b.add("save " + key)
	}
	return ok, err
}

// marked reports whether key's record mark exists.
func marked(t testing.TB, s *mem.Store, key string) bool {
	t.Helper()
	v, err := s.Get(context.Background(), []string{keyspace.MarkKey(key)})
	if err != nil {
		t.Fatal(err)
	}
	return v[0] != 0
}

// recorded reports whether key has a record in the cache.
func recorded(t testing.TB, s *mem.Store, key string) bool {
	t.Helper()
	_, ok, err := s.GetMeta(context.Background(), key)
	if err != nil {
		t.Fatal(err)
	}
	return ok
}

// TestMarkOrder: every record is written after its mark (markLog checks
// it at each write), and a record's mark goes only after the record: a
// counter grown to 3 sub-counters has its record and mark, and one folded
// back to its cold sub-counter loses both, the record first; Drop
// likewise.
func TestMarkOrder(t *testing.T) {
	ctx := context.Background()
	b := &markLog{Store: newMem(t, 3), t: t}
	m := newManager(t, b, meta.Config{Clock: newFakeClock(), Durable: &fakeDurable{},
		DefaultN: func(string) int { return 4 }, Cold: func(string) bool { return true }})
	if marked(t, b.Store, "k") {
		t.Fatal("a counter without a record has a mark")
	}
	if err := m.Resize(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	if !recorded(t, b.Store, "k") || !marked(t, b.Store, "k") {
		t.Fatal("grown counter: want its record and its mark")
	}
	b.mu.Lock()
	b.log = nil
	b.mu.Unlock()
	if err := m.Resize(ctx, "k", 1); err != nil {
		t.Fatal(err)
	}
	if recorded(t, b.Store, "k") || marked(t, b.Store, "k") {
		t.Fatal("counter folded back to cold: want neither record nor mark")
	}
	b.mu.Lock()
	log := strings.Join(b.log, "; ")
	b.mu.Unlock()
	if d, u := strings.Index(log, "drop k"), strings.Index(log, "unmark k"); d < 0 || u < d {
		t.Fatalf("fold back to cold: %s, want the record dropped, then the mark", log)
	}

	if err := m.Resize(ctx, "k", 2); err != nil {
		t.Fatal(err)
	}
	if ok, err := m.Drop(ctx, "k"); err != nil || !ok {
		t.Fatalf("Drop = %v %v", ok, err)
	}
	if recorded(t, b.Store, "k") || marked(t, b.Store, "k") {
		t.Fatal("dropped counter: want neither record nor mark")
	}
}

// TestMarkDropKeepsNewRecord: a record written (by another process) right
// after an older one of the same counter was deleted, before the deleter
// removes the old mark, keeps its mark: marks are deleted only if they
// hold the deleted record's value.
func TestMarkDropKeepsNewRecord(t *testing.T) {
	ctx := context.Background()
	b := &markLog{Store: newMem(t, 3), t: t}
	cfg := meta.Config{Clock: newFakeClock(), DefaultN: func(string) int { return 4 }, Cold: func(string) bool { return true }}
	m, other := newManager(t, b, cfg), newManager(t, b, cfg)
	if err := m.Resize(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	b.during = func() {
		other.Forget("k")
		if err := other.Resize(ctx, "k", 2); err != nil {
			t.Error(err)
		}
	}
	if ok, err := m.Drop(ctx, "k"); err != nil || !ok {
		t.Fatalf("Drop = %v %v", ok, err)
	}
	if b.during != nil {
		t.Fatal("the record was never deleted")
	}
	if !recorded(t, b.Store, "k") || !marked(t, b.Store, "k") {
		t.Fatal("the record written after the drop lost its mark")
	}
}

// TestMarkHeal: a record whose mark is missing (written by a version
// without marks, or the mark lost with a node) gets it back from the next
// look-up that finds it: a writer's (Meta, Labels), or a reader's, whose
// ReadSets writes nothing and whose caller, having read the mark with the
// values, calls HealMarks. A record restored from the durable store is marked before
// it is written (markLog checks it).
func TestMarkHeal(t *testing.T) {
	ctx := context.Background()
	b := &markLog{Store: newMem(t, 3), t: t}
	d := &fakeDurable{}
	cfg := meta.Config{Clock: newFakeClock(), Durable: d, DefaultN: func(string) int { return 4 }, Cold: func(string) bool { return true }}
	if err := newManager(t, b, cfg).Resize(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name   string
		lookUp func(m *meta.Manager) error
	}{
		{"Meta", func(m *meta.Manager) error { _, err := m.Meta(ctx, "k"); return err }},
		{"Labels", func(m *meta.Manager) error { _, _, err := m.Labels(ctx, "k"); return err }},
		{"ReadSets, HealMarks", func(m *meta.Manager) error {
			if _, found, err := m.ReadSets(ctx, []string{"k"}); err != nil || !found[0] {
				return fmt.Errorf("ReadSets: found %v, %v", found, err)
			}
			if marked(t, b.Store, "k") {
				return errors.New("ReadSets wrote the mark: a read must not write")
			}
			return m.HealMarks(ctx, []string{"k"})
		}},
	} {
		if err := b.Del(ctx, []string{keyspace.MarkKey("k")}); err != nil {
			t.Fatal(err)
		}
		if err := c.lookUp(newManager(t, b, cfg)); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if !marked(t, b.Store, "k") {
			t.Errorf("%s found the record without its mark and left it so", c.name)
		}
	}

	// The cache loses both; the look-up restores the record from the
	// durable store, marked first.
	mt, err := newManager(t, b, cfg).Meta(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Store.CASMeta(ctx, "k", mt.Epoch, nil); err != nil || !ok {
		t.Fatalf("delete the record: %v %v", ok, err)
	}
	if err := b.Del(ctx, []string{keyspace.MarkKey("k")}); err != nil {
		t.Fatal(err)
	}
	if got, err := newManager(t, b, cfg).Meta(ctx, "k"); err != nil || got.Epoch != mt.Epoch {
		t.Fatalf("restored %+v %v, want epoch %d", got, err, mt.Epoch)
	}
	if !recorded(t, b.Store, "k") || !marked(t, b.Store, "k") {
		t.Fatal("restored record: want it and its mark")
	}
}

// TestMarkExpires: the mark of a record with a deadline expires after the
// record does, and a mark of a record without one never expires.
func TestMarkExpires(t *testing.T) {
	ctx := context.Background()
	clk := newFakeClock()
	s, err := mem.New(mem.Config{Nodes: 3, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	m := newManager(t, s, meta.Config{Clock: clk, DefaultN: func(string) int { return 4 }, Cold: func(string) bool { return true }})
	if err := m.Resize(ctx, "k", 2); err != nil {
		t.Fatal(err)
	}
	dl := clk.Now().Add(time.Hour)
	if ok, err := m.SetDeadline(ctx, "k", dl); err != nil || !ok {
		t.Fatalf("SetDeadline = %v %v", ok, err)
	}
	clk.Advance(time.Hour + 2*store.DeadlineGrace - time.Second)
	if !recorded(t, s, "k") || !marked(t, s, "k") {
		t.Fatal("before the record's end: want it and its mark")
	}
	clk.Advance(2 * time.Second)
	if recorded(t, s, "k") || !marked(t, s, "k") {
		t.Fatal("between the record's end and the mark's: want the mark alone")
	}
	clk.Advance(store.DeadlineGrace)
	if marked(t, s, "k") {
		t.Fatal("the mark outlived its record by more than DeadlineGrace")
	}

	if err := m.Resize(ctx, "n", 2); err != nil {
		t.Fatal(err)
	}
	clk.Advance(1000 * time.Hour)
	if !recorded(t, s, "n") || !marked(t, s, "n") {
		t.Fatal("a record without a deadline: want it and its mark for good")
	}
}

// TestRemark: Remark marks again the counters of keys that have a record
// (a node that held their marks came back empty) and no others.
func TestRemark(t *testing.T) {
	ctx := context.Background()
	b := &markLog{Store: newMem(t, 3), t: t}
	m := newManager(t, b, meta.Config{Clock: newFakeClock(), DefaultN: func(string) int { return 4 }, Cold: func(string) bool { return true }})
	if err := m.Resize(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	if err := b.Del(ctx, []string{keyspace.MarkKey("k")}); err != nil {
		t.Fatal(err)
	}
	if err := m.Remark(ctx, []string{"k", "cold"}); err != nil {
		t.Fatal(err)
	}
	if !marked(t, b.Store, "k") || marked(t, b.Store, "cold") {
		t.Fatal("Remark: want the mark of the counter with a record, and no other")
	}
}
