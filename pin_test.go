package hotcount_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
)

// TestManualResizeSticks: a counter resized by hand keeps its N while it
// is cool: the controller that folds cooled counters back leaves it alone
// (and says why) until Unpin, after which cooling folds it back.
func TestManualResizeSticks(t *testing.T) {
	ctx := context.Background()
	st := mustMem(t)
	c := newClient(t, st, hotcount.Config{
		Defaults: hotcount.Namespace{N: 6, HotRate: 50},
		Meta:     hotcount.MetaConfig{TTL: 50 * time.Millisecond},
		AutoN:    hotcount.AutoNConfig{Hysteresis: 300 * time.Millisecond},
		Reads:    hotcount.ReadConfig{NoCache: true},
	})
	const key = "spike:ahead"
	n := func() int {
		w, _, err := c.Labels(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return len(w)
	}
	if err := c.Resize(ctx, key, 4); err != nil {
		t.Fatal(err)
	}
	if rep, err := c.Shards(ctx, key); err != nil || !rep.Pinned || rep.N != 4 {
		t.Fatalf("after Resize: %+v %v; want n 4, pinned", rep, err)
	}
	var sent int64
	incr := func() {
		if err := c.Incr(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
		sent++
	}
	// Cool: a write now and then. The controller sees the counter (it is
	// among the top keys) and leaves it at 4 for several hysteresis
	// periods after it first said so.
	var seen time.Time
	bound := time.Now().Add(time.Minute)
	for seen.IsZero() || time.Since(seen) < 6*300*time.Millisecond {
		incr()
		if got := n(); got != 4 {
			t.Fatalf("a counter resized to 4 by hand has %d sub-counters after cooling", got)
		}
		if seen.IsZero() {
			for _, h := range c.HotKeys(ctx, 10) {
				if h.Key == key && strings.Contains(h.Reason, "pinned") {
					seen = time.Now()
				}
			}
		}
		if time.Now().After(bound) {
			t.Fatal("the controller never looked at the counter")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Unpinned, cooling folds it back to one key.
	if err := c.Unpin(ctx, key); err != nil {
		t.Fatal(err)
	}
	if rep, err := c.Shards(ctx, key); err != nil || rep.Pinned {
		t.Fatalf("after Unpin: %+v %v", rep, err)
	}
	bound = time.Now().Add(time.Minute)
	for n() != 1 {
		incr()
		if time.Now().After(bound) {
			t.Fatalf("still %d sub-counters a minute after Unpin", n())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if r, err := c.Get(ctx, key); err != nil || r.Value != sent {
		t.Fatalf("value %+v %v, want %d", r, err, sent)
	}
}

// TestCreateWithN: Create gives a counter that does not exist yet its N,
// pinned; ShardsN shows what a counter that does not exist would get.
func TestCreateWithN(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, mustMem(t), hotcount.Config{Meta: hotcount.MetaConfig{TTL: 20 * time.Millisecond}})
	rep, err := c.ShardsN(ctx, "new:a", 6)
	if err != nil || rep.Exists || rep.N != 6 || len(rep.Shards) != 6 {
		t.Fatalf("ShardsN of a counter that does not exist: %+v %v; want 6 shards, exists false", rep, err)
	}
	if rep, _ := c.Shards(ctx, "new:a"); rep.Exists || rep.N != 1 || rep.Epoch != 0 {
		t.Fatalf("ShardsN created state: %+v", rep)
	}
	if created, err := c.Create(ctx, "new:a", 8); err != nil || !created {
		t.Fatalf("Create = %v %v", created, err)
	}
	if err := c.Incr(ctx, "new:a", 5); err != nil {
		t.Fatal(err)
	}
	rep, err = c.ShardsN(ctx, "new:a", 2)
	if err != nil || !rep.Exists || !rep.Pinned || rep.N != 8 || rep.Value != 5 {
		t.Fatalf("after Create: %+v %v; want n 8, pinned, value 5", rep, err)
	}
	if created, err := c.Create(ctx, "new:a", 8); err != nil || created {
		t.Fatalf("Create again with the same N = %v %v", created, err)
	}
	if _, err := c.Create(ctx, "new:a", 3); !errors.Is(err, hotcount.ErrExists) {
		t.Fatalf("Create with another N: %v, want ErrExists", err)
	}
	if err := c.Incr(ctx, "old:b", 1); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, "old:b", 4); !errors.Is(err, hotcount.ErrExists) {
		t.Fatalf("Create of a counter that holds a value: %v, want ErrExists", err)
	}
}
