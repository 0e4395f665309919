package hotcount_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
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

// lookUpStore counts metadata look-ups.
type lookUpStore struct {
	*mem.Store
	lookUps atomic.Int64
}

func (s *lookUpStore) GetMeta(ctx context.Context, key string) ([]byte, bool, error) {
	s.lookUps.Add(1)
	return s.Store.GetMeta(ctx, key)
}

func (s *lookUpStore) GetMetas(ctx context.Context, keys []string) ([][]byte, error) {
	s.lookUps.Add(1)
	return s.Store.GetMetas(ctx, keys)
}

// TestColdIncrNoLookUp: the first increment of a cold counter checks its
// record mark in the same round trip as its INCRBY and looks nothing up:
// IncrValue (buffered namespace, the proxy's INCR) answers the exact
// value, and Incr (unbuffered) starts no background look-up. A counter
// sharded by another process has its mark: its IncrValue looks the labels
// up and answers the estimate, and Incr looks them up in the background.
func TestColdIncrNoLookUp(t *testing.T) {
	ctx := context.Background()
	st := &lookUpStore{Store: mustMem(t)}
	c := newClient(t, st, hotcount.Config{
		Defaults:   hotcount.Namespace{N: 4},
		Namespaces: []hotcount.Namespace{{Prefix: "b:", N: 4, Buffered: true}},
	})
	other := newClient(t, st.Store, hotcount.Config{Defaults: hotcount.Namespace{N: 4}})
	for i := range 20 {
		bk, uk := fmt.Sprintf("b:%d", i), fmt.Sprintf("u:%d", i)
		if v, exact, err := c.IncrValue(ctx, bk, 3); err != nil || v != 3 || !exact {
			t.Fatalf("IncrValue(%s) = %d %v %v, want 3, exact", bk, v, exact, err)
		}
		if err := c.Incr(ctx, uk, 2); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Close(ctx); err != nil { // waits for background look-ups
		t.Fatal(err)
	}
	if n := st.lookUps.Load(); n != 0 {
		t.Fatalf("cold increments made %d metadata look-ups, want 0", n)
	}

	c = newClient(t, st, hotcount.Config{
		Defaults:   hotcount.Namespace{N: 4},
		Namespaces: []hotcount.Namespace{{Prefix: "b:", N: 4, Buffered: true}},
	})
	for _, k := range []string{"b:sharded", "u:sharded"} {
		if err := other.Incr(ctx, k, 5); err != nil {
			t.Fatal(err)
		}
		if err := other.Resize(ctx, k, 3); err != nil {
			t.Fatal(err)
		}
	}
	if v, exact, err := c.IncrValue(ctx, "b:sharded", 1); err != nil || exact {
		t.Fatalf("IncrValue(b:sharded) = %d %v %v, want not exact", v, exact, err)
	}
	if n := st.lookUps.Load(); n == 0 {
		t.Fatal("IncrValue of a sharded counter looked nothing up")
	}
	before := st.lookUps.Load()
	if err := c.Incr(ctx, "u:sharded", 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if st.lookUps.Load() == before {
		t.Fatal("Incr of a sharded counter started no look-up")
	}
	for k, want := range map[string]int64{"b:sharded": 6, "u:sharded": 6} {
		if r, err := other.GetFresh(ctx, k); err != nil || r.Value != want {
			t.Fatalf("%s = %+v %v, want %d", k, r, err, want)
		}
	}
}

// TestReadHealsMark: a record found without its mark (written by a
// version without marks, or the mark lost with a node) gets it back from
// a reader: the mark is read with the values, in the same round, and
// written again only when it is missing. Before, a cold increment would
// take such a counter for cold and cache it so.
func TestReadHealsMark(t *testing.T) {
	ctx := context.Background()
	st := mustMem(t)
	w := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{N: 4}})
	for _, k := range []string{"a", "b"} {
		if err := w.Incr(ctx, k, 5); err != nil {
			t.Fatal(err)
		}
		if err := w.Resize(ctx, k, 3); err != nil {
			t.Fatal(err)
		}
	}
	mark := func(k string) int64 {
		v, err := st.Get(ctx, []string{keyspace.MarkKey(k)})
		if err != nil {
			t.Fatal(err)
		}
		return v[0]
	}
	for _, c := range []struct {
		name string
		read func(c *hotcount.Client) error
	}{
		{"Get", func(c *hotcount.Client) error { _, err := c.Get(ctx, "a"); return err }},
		{"GetMulti", func(c *hotcount.Client) error { _, err := c.GetMulti(ctx, []string{"a", "b"}); return err }},
	} {
		if mark("a") == 0 {
			t.Fatalf("%s: the resized counter has no mark to start with", c.name)
		}
		if err := st.Del(ctx, []string{keyspace.MarkKey("a")}); err != nil {
			t.Fatal(err)
		}
		r := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{N: 4}, Reads: hotcount.ReadConfig{NoCache: true}})
		if err := c.read(r); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if mark("a") == 0 {
			t.Errorf("%s found the record of a without its mark and left it so", c.name)
		}
	}
	// A mark that is there is read, not written again.
	before := st.Stats()
	r := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{N: 4}, Reads: hotcount.ReadConfig{NoCache: true}})
	if _, err := r.GetMulti(ctx, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	for n, s := range st.Stats() {
		if d := s.Commands["set"] - before[n].Commands["set"]; d != 0 {
			t.Errorf("node %s: %d SETs for a read of marked records, want 0", n, d)
		}
	}
}
