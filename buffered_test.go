package hotcount_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
)

func TestBufferedExactAndReadYourWrites(t *testing.T) {
	for _, b := range allBackends() {
		t.Run(b.name, func(t *testing.T) {
			ctx := context.Background()
			st := b.open(t)
			c, err := hotcount.New(ctx, hotcount.Config{Store: st, Defaults: hotcount.Namespace{NoColdStart: true, N: 4, Buffered: true, FlushInterval: time.Hour}, Reads: hotcount.ReadConfig{NoCache: true}})
			if err != nil {
				t.Fatal(err)
			}
			key := uniqueKey(t)
			var wg sync.WaitGroup
			for range 16 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range 1000 {
						if err := c.Incr(ctx, key, 2); err != nil {
							t.Error(err)
							return
						}
					}
				}()
			}
			wg.Wait()
			// Nothing flushed yet (the interval is an hour), yet this
			// process reads its own writes.
			sub, _ := c.SubKeys(context.Background(), key)
			var raw int64
			for _, v := range b.raw(t, sub) {
				raw += v
			}
			if raw != 0 {
				t.Fatalf("cache holds %d before any flush", raw)
			}
			if r, err := c.Get(ctx, key); err != nil || r.Value != 32000 {
				t.Fatalf("Get = %+v, %v; want 32000 from the local delta", r, err)
			}
			if s := c.Stats().Buffer; s.Unflushed != 32000 || s.PendingKeys != 1 {
				t.Fatalf("stats before Close: %+v", s)
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			raw = 0
			for _, v := range b.raw(t, sub) {
				raw += v
			}
			if raw != 32000 {
				t.Fatalf("after Close the cache holds %d, want 32000", raw)
			}
			if err := c.Incr(ctx, key, 1); err != hotcount.ErrClosed {
				t.Fatalf("Incr after Close: %v", err)
			}
		})
	}
}

func TestBufferedNamespaceOnly(t *testing.T) {
	ctx := context.Background()
	st := mustMem(t)
	c := newClient(t, st, hotcount.Config{
		Defaults:   hotcount.Namespace{NoColdStart: true, N: 2, FlushInterval: time.Hour},
		Namespaces: []hotcount.Namespace{{Prefix: "views:", Buffered: true}},
		Reads:      hotcount.ReadConfig{NoCache: true},
	})
	if err := c.Incr(ctx, "views:1", 5); err != nil {
		t.Fatal(err)
	}
	if err := c.Incr(ctx, "likes:1", 5); err != nil {
		t.Fatal(err)
	}
	raw := func(key string) int64 {
		sub, _ := c.SubKeys(context.Background(), key)
		v, _ := st.Get(ctx, sub)
		var sum int64
		for _, x := range v {
			sum += x
		}
		return sum
	}
	if raw("views:1") != 0 || raw("likes:1") != 5 {
		t.Fatalf("views (buffered) %d, likes (direct) %d", raw("views:1"), raw("likes:1"))
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if raw("views:1") != 5 {
		t.Fatalf("after Flush views holds %d", raw("views:1"))
	}
	// Clear flushes first, so a buffered delta cannot land after it.
	_ = c.Incr(ctx, "views:1", 7)
	if err := c.Clear(ctx, "views:1"); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.Get(ctx, "views:1"); r.Value != 0 || raw("views:1") != 0 {
		t.Fatalf("after Clear: read %d, raw %d", r.Value, raw("views:1"))
	}
}

// TestReadYourWritesAcrossAFlush: a process reads its own buffered
// increments before and after they are flushed, with the summed read
// cached. Before, the cached sum missed a flushed delta until it expired.
func TestReadYourWritesAcrossAFlush(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, mustMem(t), hotcount.Config{Defaults: hotcount.Namespace{Buffered: true, ReadCacheTTL: time.Hour, FlushInterval: time.Hour}})
	if _, err := c.Get(ctx, "k"); err != nil { // caches 0
		t.Fatal(err)
	}
	if err := c.Incr(ctx, "k", 5); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.Get(ctx, "k"); r.Value != 5 {
		t.Fatalf("before the flush: %d", r.Value)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := c.Get(ctx, "k"); r.Value != 5 {
		t.Fatalf("after the flush: %d, want 5", r.Value)
	}
}
