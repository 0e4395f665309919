package meta_test

import (
	"context"
	"testing"

	"github.com/hotcount/hotcount/meta"
	"github.com/hotcount/hotcount/store/mem"
)

// dropHook is a backend that runs during once, right after a record is
// deleted (CASMeta with nil data), before the caller goes on.
type dropHook struct {
	*mem.Store
	during func()
}

func (b *dropHook) CASMeta(ctx context.Context, key string, epoch uint64, data []byte) (bool, error) {
	ok, err := b.Store.CASMeta(ctx, key, epoch, data)
	if ok && err == nil && data == nil && b.during != nil {
		f := b.during
		b.during = nil
		f()
	}
	return ok, err
}

// TestDropRacesLookUp: a look-up that reads the cache right after a
// record was dropped there does not restore it from the durable store
// (the durable copy goes first). Before, the durable copy was deleted
// after the cache's, and a look-up in between (a background refresh of an
// expiring counter's labels) wrote the dropped record back: the counter's
// next record kept the old, passed deadline, and the counter was taken
// for expired. Both for Drop (a counter that expired) and for the drop of
// a cold counter's record when it is resized back to one sub-counter.
func TestDropRacesLookUp(t *testing.T) {
	for _, c := range []struct {
		name string
		drop func(ctx context.Context, m *meta.Manager) error
	}{
		{"drop", func(ctx context.Context, m *meta.Manager) error {
			ok, err := m.Drop(ctx, "k")
			if err == nil && !ok {
				t.Error("Drop found no record")
			}
			return err
		}},
		{"cold again", func(ctx context.Context, m *meta.Manager) error {
			return m.Resize(ctx, "k", 1)
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			d := &fakeDurable{}
			b := &dropHook{Store: newMem(t, 3)}
			m := newManager(t, b, meta.Config{Clock: newFakeClock(), Durable: d,
				DefaultN: func(string) int { return 4 }, Cold: func(string) bool { return true }})
			if err := m.Resize(ctx, "k", 3); err != nil {
				t.Fatal(err)
			}
			if data, _ := d.LoadMeta(ctx, "k"); data == nil {
				t.Fatal("record not mirrored")
			}
			b.during = func() {
				if _, err := m.Meta(ctx, "k"); err != nil {
					t.Error(err)
				}
			}
			if err := c.drop(ctx, m); err != nil {
				t.Fatal(err)
			}
			if b.during != nil {
				t.Fatal("the record was never deleted")
			}
			if data, ok, _ := b.GetMeta(ctx, "k"); ok {
				t.Errorf("the cache holds the dropped record again: %s", data)
			}
			if data, _ := d.LoadMeta(ctx, "k"); data != nil {
				t.Errorf("the durable store holds the dropped record: %s", data)
			}
			if mt, err := m.Meta(ctx, "k"); err != nil || mt.Epoch != 0 {
				t.Errorf("after the drop: %+v %v, want no record", mt, err)
			}
		})
	}
}

// loadHook is a durable store that runs during once, right after a
// LoadMeta that found a record.
type loadHook struct {
	*fakeDurable
	during func()
}

func (d *loadHook) LoadMeta(ctx context.Context, key string) ([]byte, error) {
	data, err := d.fakeDurable.LoadMeta(ctx, key)
	if data != nil && d.during != nil {
		f := d.during
		d.during = nil
		f()
	}
	return data, err
}

// TestRestoreRacesDrop: a record the cache lost, read from the durable
// store to be restored, and dropped (in both stores) before the restore
// lands, stays dropped. Before, the restore wrote it back to the cache.
func TestRestoreRacesDrop(t *testing.T) {
	ctx := context.Background()
	d := &loadHook{fakeDurable: &fakeDurable{}}
	s := newMem(t, 3)
	m := newManager(t, s, meta.Config{Clock: newFakeClock(), Durable: d, DefaultN: func(string) int { return 4 }})
	if err := m.Resize(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	mt, err := m.Meta(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := s.CASMeta(ctx, "k", mt.Epoch, nil); err != nil || !ok { // the cache lost it
		t.Fatalf("delete the record: %v %v", ok, err)
	}
	m.Forget("k")
	d.during = func() {
		if ok, err := m.Drop(ctx, "k"); err != nil || !ok {
			t.Errorf("Drop = %v %v, want true", ok, err)
		}
	}
	got, err := m.Meta(ctx, "k") // restores from the durable copy
	if err != nil {
		t.Fatal(err)
	}
	if d.during != nil {
		t.Fatal("no restore")
	}
	if data, ok, _ := s.GetMeta(ctx, "k"); ok {
		t.Errorf("the cache holds the dropped record again: %s", data)
	}
	if got.Epoch != 0 {
		t.Errorf("look-up = %+v, want no record", got)
	}
}
