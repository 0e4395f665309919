package hotcount_test

import (
	"context"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/redis"
)

// TestDurableViewHealsHonestly cuts 40 from the cache view of a durable
// counter behind the Client's back while a writer keeps writing: reads
// report a non-zero stale_ms from the sweep that finds the view off until
// the repair; the view then equals the exact value and Stale is 0 again.
// A counter cleared in the log and the cache is not brought back.
func TestDurableViewHealsHonestly(t *testing.T) {
	ctx := context.Background()
	ds := durStores()[1]
	be := ds.open(t, testenv.PostgresSchema(t))
	c := durClient(t, hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
		Defaults:   hotcount.Namespace{Mode: hotcount.ModeDurable, FlushInterval: 20 * time.Millisecond},
		Reads:      hotcount.ReadConfig{NoCache: true},
		Durability: hotcount.DurabilityConfig{Store: be, HealInterval: 300 * time.Millisecond},
	})
	key, gone := uniqueKey(t), uniqueKey(t)+":cleared"
	for range 10 {
		if err := c.Incr(ctx, key, 10); err != nil {
			t.Fatal(err)
		}
		if err := c.Incr(ctx, gone, 5); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := redis.New(ctx, redis.Config{Addrs: cluster.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	subs, err := c.SubKeys(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.IncrMulti(ctx, []store.IncrOp{{Key: subs[0], Delta: -40}}); err != nil {
		t.Fatal(err)
	}
	// Clear "gone" in the log (with its tombstone) and in the cache.
	if err := be.ClearCounter(ctx, gone, time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := c.Clear(ctx, gone); err != nil {
		t.Fatal(err)
	}
	// A writer keeps writing meanwhile.
	stop, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-stop:
				return
			default:
			}
			_ = c.Incr(ctx, key, 1)
			time.Sleep(5 * time.Millisecond)
		}
	}()
	var sawStale bool
	deadline := time.Now().Add(durConvergeWait)
	for c.Stats().Durability.Repairs == 0 {
		r, err := c.Get(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if r.Stale > 0 {
			sawStale = true
		}
		if time.Now().After(deadline) {
			close(stop)
			t.Fatalf("no repair after %v; stats %+v", durConvergeWait, c.Stats().Durability)
		}
		time.Sleep(10 * time.Millisecond)
	}
	close(stop)
	<-done
	if !sawStale {
		t.Error("no reading reported a non-zero Stale while the view was known to be behind")
	}
	exact, err := c.GetExact(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	durConverge(t, c, map[string]int64{key: exact.Value}, time.Now())
	r, err := c.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if r.Stale != 0 {
		t.Errorf("Stale %v after the repair", r.Stale)
	}
	if s := c.Stats().Durability; s.RepairedAmount != 40 {
		t.Errorf("repaired %+d in all, want +40", s.RepairedAmount)
	}
	// Several sweeps later the cleared counter is still 0 everywhere.
	time.Sleep(5 * 300 * time.Millisecond)
	if r, err := c.Get(ctx, gone); err != nil || r.Value != 0 {
		t.Errorf("cleared counter reads %d, %v", r.Value, err)
	}
	if n, err := st.Get(ctx, []string{keyspace.SubKey(gone, keyspace.ColdLabel)}); err != nil || n[0] != 0 {
		t.Errorf("cleared counter's sub-counter holds %v, %v", n, err)
	}
}
