package hotcount_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store/mem"
)

// heldReadStore reads the values of its first Get at once, then holds the
// reply until release is closed: a read whose values were taken before
// increments that land while its reply is on the way.
type heldReadStore struct {
	*mem.Store
	held    atomic.Bool
	read    chan struct{} // closed when the held Get has read its values
	release chan struct{}
}

func (s *heldReadStore) Get(ctx context.Context, keys []string) ([]int64, error) {
	vals, err := s.Store.Get(ctx, keys)
	if s.held.CompareAndSwap(false, true) {
		close(s.read)
		<-s.release
	}
	return vals, err
}

// TestReadsKeepOwnWrites: an increment this process applied while a read
// of the counter was in flight is never missing from what it reads next,
// whether it shares that read (single-flight) or finds its sum cached, in
// an unbuffered namespace (Incr) and a buffered one (IncrValue, whose cold
// keys are written at once).
func TestReadsKeepOwnWrites(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		name := "unbuffered"
		if buffered {
			name = "buffered"
		}
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := &heldReadStore{Store: mustMem(t), read: make(chan struct{}), release: make(chan struct{})}
			c := newClient(t, st, hotcount.Config{
				Defaults: hotcount.Namespace{Buffered: buffered, ReadCacheTTL: time.Minute},
				Buffer:   hotcount.BufferConfig{HotAt: 100}, // the key stays cold: written at once
			})
			const key = "views:1"
			incr := func() {
				t.Helper()
				var err error
				if buffered {
					var v int64
					if v, _, err = c.IncrValue(ctx, key, 1); err == nil {
						// Written at once, not buffered: its sub-counter holds it.
						sub, gerr := st.Store.Get(ctx, []string{keyspace.SubKey(key, keyspace.ColdLabel)})
						if gerr != nil || sub[0] != v || v == 0 {
							t.Fatalf("IncrValue answered %d, its cold sub-counter holds %v (%v): the key was buffered", v, sub, gerr)
						}
					}
				} else {
					err = c.Incr(ctx, key, 1)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			incr()
			var wg sync.WaitGroup
			first := make(chan int64, 1)
			wg.Go(func() {
				r, err := c.Get(ctx, key)
				if err != nil {
					t.Error(err)
				}
				first <- r.Value
			})
			<-st.read // the read holds the value 1
			incr()
			// This read starts after the second increment returned and
			// shares the read in flight.
			second := make(chan int64, 1)
			wg.Go(func() {
				r, err := c.Get(ctx, key)
				if err != nil {
					t.Error(err)
				}
				second <- r.Value
			})
			time.Sleep(50 * time.Millisecond) // let it join the flight
			close(st.release)
			wg.Wait()
			if v := <-first; v < 1 {
				t.Errorf("the first read = %d, below the increment made before it", v)
			}
			if v := <-second; v < 2 {
				t.Errorf("a read after two increments = %d (it shared a read whose values were taken before the second)", v)
			}
			r, err := c.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if r.Value != 2 {
				t.Errorf("the cached read = %d, want 2", r.Value)
			}
		})
	}
}
