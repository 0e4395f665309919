package hotcount_test

import (
	"context"
	"sync"
	"testing"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store/mem"
)

// hookOnDrop is an embedded store that runs after once, right after a
// counter's metadata record was deleted.
type hookOnDrop struct {
	*mem.Store
	mu    sync.Mutex
	after func()
}

func (s *hookOnDrop) CASMeta(ctx context.Context, key string, epoch uint64, data []byte) (bool, error) {
	ok, err := s.Store.CASMeta(ctx, key, epoch, data)
	if ok && err == nil && data == nil {
		s.mu.Lock()
		f := s.after
		s.after = nil
		s.mu.Unlock()
		if f != nil {
			f()
		}
	}
	return ok, err
}

// TestClearGivenUpAfterDrop: a Clear whose caller gives up (its context
// ends) once the counter's record is deleted still deletes the record's
// mark and every sub-counter the record named. Before, both deletions
// failed with the ended context, and nothing removed them later: a
// Clear tried again finds no record, so it deletes the cold sub-counter
// alone, and the mark stayed for good.
func TestClearGivenUpAfterDrop(t *testing.T) {
	ctx := context.Background()
	ms, err := mem.New(mem.Config{Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ms.Close() })
	st := &hookOnDrop{Store: ms}
	c := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 4}})
	key := uniqueKey(t)
	for range 40 {
		if err := c.Incr(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
	}
	subs, err := c.SubKeys(ctx, key)
	if err != nil || len(subs) != 4 {
		t.Fatalf("SubKeys = %v %v, want 4", subs, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st.mu.Lock()
	st.after = cancel
	st.mu.Unlock()
	_ = c.Clear(cctx, key) // may report the ended context
	st.mu.Lock()
	fired := st.after == nil
	st.mu.Unlock()
	if !fired {
		t.Fatal("the record was never deleted")
	}
	vals, err := ms.Get(ctx, append(subs, keyspace.MarkKey(key)))
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v != 0 {
			t.Errorf("%s still holds %d", append(subs, keyspace.MarkKey(key))[i], v)
		}
	}
	if _, ok, _ := ms.GetMeta(ctx, key); ok {
		t.Error("the record is still there")
	}
}
