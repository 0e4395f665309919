package hotcount_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/store/mem"
)

// overlapStore holds each Get and each metadata look-up until the other
// kind has started too, or gives up after a bound: a reader that looks the
// metadata up before it reads values never gets both started at once.
type overlapStore struct {
	*mem.Store
	getStarted, metaStarted chan struct{}
	overlapped              atomic.Bool
}

func (s *overlapStore) wait(mine, other chan struct{}) {
	select {
	case <-mine:
	default:
		close(mine)
	}
	select {
	case <-other:
		s.overlapped.Store(true)
	case <-time.After(5 * time.Second): // only a bound against a hang
	}
}

func (s *overlapStore) Get(ctx context.Context, keys []string) ([]int64, error) {
	s.wait(s.getStarted, s.metaStarted)
	return s.Store.Get(ctx, keys)
}

func (s *overlapStore) GetMetas(ctx context.Context, keys []string) ([][]byte, error) {
	s.wait(s.metaStarted, s.getStarted)
	return s.Store.GetMetas(ctx, keys)
}

// TestColdReadOneRoundTrip: reading a counter whose labels this process
// does not know sends the metadata look-up and the read of its cold
// sub-counter at once, so a cold counter costs one round trip.
func TestColdReadOneRoundTrip(t *testing.T) {
	ctx := context.Background()
	base := mustMem(t)
	writer := newClient(t, base, hotcount.Config{})
	if err := writer.Incr(ctx, "likes:1", 3); err != nil {
		t.Fatal(err)
	}
	st := &overlapStore{Store: base, getStarted: make(chan struct{}), metaStarted: make(chan struct{})}
	c := newClient(t, st, hotcount.Config{})
	r, err := c.Get(ctx, "likes:1")
	if err != nil || r.Value != 3 || r.N != 1 {
		t.Fatalf("Get = %+v %v", r, err)
	}
	if !st.overlapped.Load() {
		t.Fatal("the metadata look-up and the value read did not overlap: two round trips")
	}
}

// TestColdToHotAndBack: a counter starts with one cache key; when its
// cache writes pass the hot rate it grows to its namespace's N, and when it
// cools it folds back to one key and its metadata goes. The total is exact
// throughout.
func TestColdToHotAndBack(t *testing.T) {
	ctx := context.Background()
	st := mustMem(t)
	c := newClient(t, st, hotcount.Config{
		Defaults: hotcount.Namespace{N: 6, HotRate: 50},
		Meta:     hotcount.MetaConfig{TTL: 50 * time.Millisecond},
		AutoN:    hotcount.AutoNConfig{Hysteresis: 500 * time.Millisecond},
		Reads:    hotcount.ReadConfig{NoCache: true},
	})
	const key = "views:viral"
	var sent int64
	n := func() int {
		w, _, err := c.Labels(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return len(w)
	}
	if err := c.Incr(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	sent++
	if got := n(); got != 1 {
		t.Fatalf("a new counter has %d sub-counters, want 1", got)
	}
	if _, ok, _ := st.GetMeta(ctx, key); ok {
		t.Fatal("a cold counter has metadata")
	}
	// Hot: about 1,000 writes/s until it grows (bounded).
	bound := time.Now().Add(time.Minute)
	for n() != 6 {
		for range 10 {
			if err := c.Incr(ctx, key, 1); err != nil {
				t.Fatal(err)
			}
			sent++
		}
		time.Sleep(10 * time.Millisecond)
		if time.Now().After(bound) {
			t.Fatalf("still %d sub-counters after a minute at ~1,000 writes/s", n())
		}
	}
	if _, ok, _ := st.GetMeta(ctx, key); !ok {
		t.Fatal("a hot counter has no metadata")
	}
	// Cool: a write now and then, until it is back to one key.
	bound = time.Now().Add(time.Minute)
	for {
		if err := c.Incr(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
		sent++
		if _, ok, _ := st.GetMeta(ctx, key); !ok && n() == 1 {
			break
		}
		if time.Now().After(bound) {
			t.Fatalf("still %d sub-counters a minute after cooling", n())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r, err := c.Get(ctx, key); err != nil || r.Value != sent {
		t.Fatalf("value %+v %v, want %d", r, err, sent)
	}
	var decisions []string
	for _, d := range c.Decisions() {
		decisions = append(decisions, string(d.Action)+": "+d.Reason)
	}
	t.Logf("decisions: %q", decisions)
}
