package meta_test

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/hotcount/hotcount/meta"
	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/mem"
)

// markHook is a backend over a shared store whose hooks each run once:
// afterGet right after a GetMeta found a record, beforeMark right before
// a mark is written over whatever is there (SetMarks without onlyNew),
// afterDelete right after a record was deleted. With lostReply the next
// such SetMarks writes its marks and then fails, as a write whose reply
// was lost.
type markHook struct {
	*mem.Store
	mu          sync.Mutex
	afterGet    func()
	beforeMark  func()
	afterDelete func()
	lostReply   bool
}

var errLostReply = errors.New("reply lost")

func (b *markHook) CASMeta(ctx context.Context, key string, epoch uint64, data []byte) (bool, error) {
	ok, err := b.Store.CASMeta(ctx, key, epoch, data)
	if ok && err == nil && data == nil {
		if f := b.take(&b.afterDelete); f != nil {
			f()
		}
	}
	return ok, err
}

// take returns the hook *f and clears it, under the lock.
func (b *markHook) take(f *func()) func() {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := *f
	*f = nil
	return g
}

func (b *markHook) GetMeta(ctx context.Context, key string) ([]byte, bool, error) {
	data, ok, err := b.Store.GetMeta(ctx, key)
	if ok && err == nil {
		if f := b.take(&b.afterGet); f != nil {
			f()
		}
	}
	return data, ok, err
}

func (b *markHook) SetMarks(ctx context.Context, marks []store.Mark, onlyNew bool) ([]bool, error) {
	if !onlyNew {
		if f := b.take(&b.beforeMark); f != nil {
			f()
		}
	}
	w, err := b.Store.SetMarks(ctx, marks, onlyNew)
	b.mu.Lock()
	lost := b.lostReply && !onlyNew && err == nil
	if lost {
		b.lostReply = false
	}
	b.mu.Unlock()
	if lost {
		return nil, errLostReply
	}
	return w, err
}

// pending reports whether a hook has not run yet.
func (b *markHook) pending() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.afterGet != nil || b.beforeMark != nil || b.afterDelete != nil || b.lostReply
}

// TestMarkNotLeftByRace: a record's mark goes with the record whatever
// another process of the counter does meanwhile, and whenever the caller
// gives up. The process under test (m) writes a mark in the first cases
// on what it read just before another process (other) dropped or
// replaced the record, or loses the reply of its write of a mark, or
// gives up (its context ends) once it deleted a record: without a check
// afterwards, the mark outlived its record for good (no deadline), so
// that every writer of the counter looked its record up once per TTL,
// and a cleared counter left a key behind.
func TestMarkNotLeftByRace(t *testing.T) {
	ctx := context.Background()
	cfg := meta.Config{Clock: newFakeClock(), DefaultN: func(string) int { return 4 }, Cold: func(string) bool { return true }}
	cases := []struct {
		name string
		// run sets up the race on b (m's backend) and runs m's part.
		run func(t *testing.T, b *markHook, m, other *meta.Manager)
	}{
		{"look-up heals a record dropped after it read it", func(t *testing.T, b *markHook, m, other *meta.Manager) {
			b.afterGet = func() { dropOK(t, other) }
			if _, err := m.Meta(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}},
		{"drop of a record another drop deleted after the read", func(t *testing.T, b *markHook, m, other *meta.Manager) {
			b.afterGet = func() { dropOK(t, other) }
			if _, err := m.Drop(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}},
		{"reader heals a record dropped after it read it", func(t *testing.T, b *markHook, m, other *meta.Manager) {
			if _, found, err := m.ReadSets(ctx, []string{"k"}); err != nil || !found[0] {
				t.Fatalf("ReadSets: found %v, %v", found, err)
			}
			dropOK(t, other)
			// The reader found the mark missing (the drop deleted it
			// after the reader's look-up read the record).
			if err := m.HealMarks(ctx, []string{"k"}); err != nil {
				t.Fatal(err)
			}
		}},
		{"change of a record dropped before its compare-and-set", func(t *testing.T, b *markHook, m, other *meta.Manager) {
			if err := other.Pin(ctx, "k", 3); err != nil {
				t.Fatal(err)
			}
			b.beforeMark = func() { dropOK(t, other) }
			if err := m.Unpin(ctx, "k"); err != nil {
				t.Fatal(err)
			}
		}},
		{"first record that lost to another process's", func(t *testing.T, b *markHook, m, other *meta.Manager) {
			dropOK(t, other) // start with no record
			b.beforeMark = func() {
				if err := other.Resize(ctx, "k", 3); err != nil {
					t.Error(err)
				}
			}
			if err := m.Resize(ctx, "k", 2); err != nil && !errors.Is(err, meta.ErrConflict) {
				t.Fatal(err)
			}
			if !recorded(t, b.Store, "k") || !marked(t, b.Store, "k") {
				t.Fatal("the record another process wrote lost its mark")
			}
			dropOK(t, other) // its mark must go with it
		}},
		{"mark whose reply was lost", func(t *testing.T, b *markHook, m, other *meta.Manager) {
			dropOK(t, other) // start with no record
			b.lostReply = true
			if err := m.Resize(ctx, "k", 3); !errors.Is(err, errLostReply) {
				t.Fatalf("Resize = %v, want the lost reply", err)
			}
		}},
		{"drop whose caller gives up once the record is deleted", func(t *testing.T, b *markHook, m, other *meta.Manager) {
			cctx, cancel := context.WithCancel(ctx)
			defer cancel()
			b.afterDelete = cancel
			if ok, err := m.Drop(cctx, "k"); err != nil || !ok {
				t.Fatalf("Drop = %v %v, want a record dropped", ok, err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := newMem(t, 3)
			b := &markHook{Store: s}
			m, other := newManager(t, b, cfg), newManager(t, s, cfg)
			if err := other.Resize(ctx, "k", 3); err != nil {
				t.Fatal(err)
			}
			c.run(t, b, m, other)
			if b.pending() {
				t.Fatal("the race was not run: a hook never fired")
			}
			if rec, mk := recorded(t, s, "k"), marked(t, s, "k"); !rec && mk {
				t.Fatal("the record is gone and its mark is left behind")
			} else if rec && !mk {
				t.Fatal("the record is there without its mark")
			}
		})
	}
}

// dropOK drops the record of "k" through m, which must find one.
func dropOK(t *testing.T, m *meta.Manager) {
	t.Helper()
	m.Forget("k")
	if ok, err := m.Drop(context.Background(), "k"); err != nil || !ok {
		t.Errorf("Drop = %v %v, want a record dropped", ok, err)
	}
}
