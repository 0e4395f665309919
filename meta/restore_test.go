package meta_test

import (
	"slices"
	"testing"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/meta"
)

// TestRestoreRecord checks, on the Redis Cluster, how a label-set record
// lost with a cache node is restored: from the durable store when it holds
// one, else from the labels that hold values (and mirrored); never over a
// record the cache holds; not for a cold counter; not at all in a dry
// run. PeekReadSet writes nothing.
func TestRestoreRecord(t *testing.T) {
	ctx := ctxT(t)
	s := newRedis(t)
	dur := &fakeDurable{}
	clk := newFakeClock()
	m := newManager(t, s, meta.Config{Clock: clk, Durable: dur, DefaultN: func(string) int { return 4 }})

	// From the durable store: the record as it was (16 labels).
	if err := m.Resize(ctx, "rr:a", 16); err != nil {
		t.Fatal(err)
	}
	want, err := m.Meta(ctx, "rr:a")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.CASMeta(ctx, "rr:a", want.Epoch, nil); err != nil || !ok {
		t.Fatalf("delete record: %v %v", ok, err)
	}
	m.Forget("rr:a")
	read, err := m.PeekReadSet(ctx, "rr:a")
	if err != nil || !slices.Contains(read, keyspace.ColdLabel) || slices.ContainsFunc(want.Read, func(l string) bool { return !slices.Contains(read, l) }) {
		t.Fatalf("PeekReadSet = %v %v, want the durable record's labels %v and the cold one", read, err, want.Read)
	}
	if _, ok, _ := s.GetMeta(ctx, "rr:a"); ok {
		t.Fatal("PeekReadSet wrote a record")
	}
	if ok, err := m.RestoreRecord(ctx, "rr:a", want.Read[:2], time.Time{}, true); err != nil || !ok {
		t.Fatalf("dry RestoreRecord = %v %v, want true", ok, err)
	}
	if _, ok, _ := s.GetMeta(ctx, "rr:a"); ok {
		t.Fatal("dry RestoreRecord wrote a record")
	}
	if ok, err := m.RestoreRecord(ctx, "rr:a", want.Read[:2], time.Time{}, false); err != nil || !ok {
		t.Fatalf("RestoreRecord = %v %v, want true", ok, err)
	}
	got, err := m.Meta(ctx, "rr:a")
	if err != nil || got.Epoch != want.Epoch || !slices.Equal(got.Read, want.Read) || got.Gen != want.Gen {
		t.Fatalf("restored %+v %v, want %+v", got, err, want)
	}
	// A record in the cache is left alone.
	if ok, err := m.RestoreRecord(ctx, "rr:a", []string{"zz"}, time.Time{}, false); err != nil || ok {
		t.Fatalf("RestoreRecord over a record = %v %v, want false", ok, err)
	}

	// No durable record: written from the labels that hold values, and
	// mirrored.
	labels := []string{"c", "a", "b", keyspace.ColdLabel, "a"}
	if ok, err := m.RestoreRecord(ctx, "rr:b", labels, time.Time{}, false); err != nil || !ok {
		t.Fatalf("RestoreRecord(rr:b) = %v %v, want true", ok, err)
	}
	got, err = m.Meta(ctx, "rr:b")
	if err != nil || got.Epoch != 1 || !slices.Equal(got.Read, []string{"a", "b", "c"}) || !slices.Equal(got.Write, got.Read) {
		t.Fatalf("rr:b record %+v %v, want epoch 1, labels a b c", got, err)
	}
	if data, _ := dur.LoadMeta(ctx, "rr:b"); data == nil {
		t.Fatal("rr:b record not mirrored")
	}

	// A record written from the labels keeps the counter's deadline.
	dl := time.Now().Add(time.Hour).Truncate(time.Millisecond)
	if ok, err := m.RestoreRecord(ctx, "rr:d", []string{"a", "b"}, dl, false); err != nil || !ok {
		t.Fatalf("RestoreRecord(rr:d) = %v %v, want true", ok, err)
	}
	if got, err = m.Meta(ctx, "rr:d"); err != nil || got.Deadline != dl.UnixMilli() {
		t.Fatalf("rr:d record %+v %v, want the deadline %v", got, err, dl)
	}

	// A cold counter has no record: nothing to restore.
	if ok, err := m.RestoreRecord(ctx, "rr:c", []string{keyspace.ColdLabel}, time.Time{}, false); err != nil || ok {
		t.Fatalf("RestoreRecord(cold) = %v %v, want false", ok, err)
	}
	if _, ok, _ := s.GetMeta(ctx, "rr:c"); ok {
		t.Fatal("a record was written for a cold counter")
	}
}
