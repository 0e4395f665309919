package hotcount_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/internal/testenv"
)

func durRandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// durStore is a durable backend the tests run against; open may be called
// again with the same location to reopen the same data.
type durStore struct {
	name string
	// loc returns a fresh location (a schema or a file path).
	loc  func(t testing.TB) string
	open func(t testing.TB, loc string) durable.Backend
}

func durStores() []durStore {
	return []durStore{
		{
			name: "sqlite",
			loc:  func(t testing.TB) string { return t.TempDir() + "/hotcount.db" },
			open: func(t testing.TB, loc string) durable.Backend {
				db, err := sqlite.Open(context.Background(), sqlite.Config{Path: loc})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return db
			},
		},
		{
			name: "postgres",
			loc:  func(t testing.TB) string { return testenv.PostgresSchema(t) },
			open: func(t testing.TB, loc string) durable.Backend {
				db, err := postgres.Open(context.Background(), postgres.Config{URL: testenv.PostgresURL(), Schema: loc, MaxConns: 8})
				if err != nil {
					t.Fatalf("open postgres (is it running at %s?): %v", testenv.PostgresURL(), err)
				}
				t.Cleanup(func() { _ = db.Close() })
				return db
			},
		},
	}
}

func durClient(t testing.TB, cfg hotcount.Config) *hotcount.Client {
	t.Helper()
	c, err := hotcount.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

// durLoadSize is the number of increments of the durable acceptance test:
// 20,000 by default, the full 200,000 with HOTCOUNT_TEST_FULL=1.
func durLoadSize() int {
	if os.Getenv("HOTCOUNT_TEST_FULL") != "" {
		return 200_000
	}
	return 20_000
}

// TestDurableRetriesAndRebuild sends increments with ids from 32
// goroutines, re-sends 1% of them as retries, and checks that the exact
// read counts each id once; then it flushes every Redis primary and
// checks that Rebuild makes the cached view equal the exact value again.
func TestDurableRetriesAndRebuild(t *testing.T) {
	for _, ds := range durStores() {
		t.Run(ds.name, func(t *testing.T) {
			ctx := context.Background()
			be := ds.open(t, ds.loc(t))
			c := durClient(t, hotcount.Config{
				Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
				Defaults:   hotcount.Namespace{Mode: hotcount.ModeDurable, FlushInterval: 20 * time.Millisecond},
				Reads:      hotcount.ReadConfig{NoCache: true},
				Durability: hotcount.DurabilityConfig{Store: be},
			})
			prefix := "dur:" + durRandHex(4) + ":"
			keys := []string{prefix + "a", prefix + "b", prefix + "c"}
			const workers = 32
			total := durLoadSize()
			var want [3]atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			start := time.Now()
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for i := w; i < total; i += workers {
						k, delta, id := i%3, int64(1+i%7), fmt.Sprintf("%sid-%d", prefix, i)
						send := 1
						if i%100 == 0 {
							send = 2 // the retry of an increment whose reply was lost
						}
						for range send {
							if err := c.IncrID(ctx, keys[k], delta, id); err != nil {
								errs <- err
								return
							}
						}
						want[k].Add(delta)
					}
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			t.Logf("%d increments (+%d retries) from %d goroutines in %v; %+v",
				total, total/100, workers, time.Since(start).Round(time.Millisecond), c.Stats().Durability)
			// A retry long after the first send is still a duplicate.
			if err := c.IncrID(ctx, keys[0], 1, prefix+"id-0"); err != nil { // same delta as the first send
				t.Fatal(err)
			}
			check := func(stage string) {
				t.Helper()
				for i, k := range keys {
					ex, err := c.GetExact(ctx, k)
					if err != nil {
						t.Fatal(err)
					}
					got, err := c.Get(ctx, k)
					if err != nil {
						t.Fatal(err)
					}
					if ex.Value != want[i].Load() || got.Value != ex.Value {
						t.Fatalf("%s: %s: exact %d, cached view %d, want %d", stage, k, ex.Value, got.Value, want[i].Load())
					}
				}
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			check("after load")

			// Fold the log into totals: the exact read is unchanged.
			if _, err := be.Rollup(ctx, time.Now().Add(time.Hour)); err != nil {
				t.Fatal(err)
			}
			check("after rollup")

			if err := cluster.FlushAll(ctx); err != nil {
				t.Fatal(err)
			}
			if got, _ := c.Get(ctx, keys[0]); got.Value == want[0].Load() {
				t.Fatalf("FLUSHALL left the view at %d", got.Value)
			}
			rep, err := c.Rebuild(ctx, prefix)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Keys != 3 || rep.Corrected != 3 || rep.Skipped != 0 {
				t.Fatalf("rebuild report %+v, want 3 keys corrected", rep)
			}
			check("after FLUSHALL and Rebuild")
			rep, err = c.Rebuild(ctx, prefix)
			if err != nil || rep.Corrected != 0 {
				t.Fatalf("second rebuild: %+v, %v; want nothing to correct", rep, err)
			}
		})
	}
}

func TestDurableModeErrors(t *testing.T) {
	ctx := context.Background()
	be := durStores()[0]
	c := durClient(t, hotcount.Config{
		Namespaces: []hotcount.Namespace{{Prefix: "d:", Mode: hotcount.ModeDurable}},
		Durability: hotcount.DurabilityConfig{Store: be.open(t, be.loc(t))},
	})
	if c.Mode("d:x") != hotcount.ModeDurable || c.Mode("x") != hotcount.ModeFast {
		t.Fatalf("modes %q %q", c.Mode("d:x"), c.Mode("x"))
	}
	if err := c.IncrID(ctx, "x", 1, "id"); !errors.Is(err, hotcount.ErrNotDurable) {
		t.Fatalf("IncrID of a fast key: %v", err)
	}
	if _, err := c.GetExact(ctx, "x"); !errors.Is(err, hotcount.ErrNotDurable) {
		t.Fatalf("GetExact of a fast key: %v", err)
	}
	if err := c.IncrID(ctx, "d:x", 1, ""); !errors.Is(err, durable.ErrInvalidEvent) {
		t.Fatalf("empty id: %v", err)
	}
	if err := c.IncrID(ctx, "d:x", 0, "id"); !errors.Is(err, hotcount.ErrZeroDelta) {
		t.Fatalf("zero delta: %v", err)
	}
	// Incr of a durable key commits with a fresh id each time.
	for range 3 {
		if err := c.Incr(ctx, "d:x", 2); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := c.GetExact(ctx, "d:x"); err != nil || r.Value != 6 {
		t.Fatalf("exact %+v %v, want 6", r, err)
	}
	if _, err := hotcount.New(ctx, hotcount.Config{Defaults: hotcount.Namespace{Mode: hotcount.ModeDurable}}); !errors.Is(err, hotcount.ErrConfig) {
		t.Fatalf("durable mode without a store: %v", err)
	}
	if _, err := hotcount.New(ctx, hotcount.Config{Durability: hotcount.DurabilityConfig{Store: be.open(t, be.loc(t)), RollupAge: -1}}); !errors.Is(err, hotcount.ErrConfig) {
		t.Fatalf("negative RollupAge: %v", err)
	}
	if err := (hotcount.Config{Durability: hotcount.DurabilityConfig{CleanupInterval: -time.Second}}).Validate(); !errors.Is(err, hotcount.ErrConfig) {
		t.Fatalf("negative CleanupInterval: %v", err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.IncrID(ctx, "d:x", 1, "id2"); !errors.Is(err, hotcount.ErrClosed) {
		t.Fatalf("after Close: %v", err)
	}
}

// TestDurableCloseDrains checks that every increment acknowledged before
// Close reaches the cache view: Close drains the committer, then the
// buffer.
func TestDurableCloseDrains(t *testing.T) {
	ctx := context.Background()
	ds := durStores()[0]
	loc := ds.loc(t)
	st := mustMem(t)
	c := durClient(t, hotcount.Config{Store: st, Defaults: hotcount.Namespace{Mode: hotcount.ModeDurable, FlushInterval: time.Hour}, Durability: hotcount.DurabilityConfig{Store: ds.open(t, loc)}})
	var wg sync.WaitGroup
	var acked atomic.Int64
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				if err := c.IncrID(ctx, "k", 1, fmt.Sprintf("%d-%d", w, i)); err != nil {
					return // closed under us
				}
				acked.Add(1)
			}
		}()
	}
	for acked.Load() < 100 { // let some increments in before Close
		runtime.Gosched()
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	c2 := durClient(t, hotcount.Config{Store: st, Defaults: hotcount.Namespace{Mode: hotcount.ModeDurable}, Reads: hotcount.ReadConfig{NoCache: true}, Durability: hotcount.DurabilityConfig{Store: ds.open(t, loc)}})
	got, err := c2.Get(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	ex, err := c2.GetExact(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	if got.Value != acked.Load() || ex.Value != acked.Load() {
		t.Fatalf("after Close: view %d, exact %d, acknowledged %d", got.Value, ex.Value, acked.Load())
	}
}

// TestDurabilityNoLeak checks that Close stops the committer, the rollup
// and checkpoint loops and every goroutine they started.
func TestDurabilityNoLeak(t *testing.T) {
	opts := goleak.IgnoreCurrent()
	ctx := context.Background()
	ds := durStores()[0]
	be := ds.open(t, ds.loc(t))
	c, err := hotcount.New(ctx, hotcount.Config{
		Store:      mustMem(t),
		Namespaces: []hotcount.Namespace{{Prefix: "d:", Mode: hotcount.ModeDurable}},
		Durability: hotcount.DurabilityConfig{Store: be, CheckpointInterval: time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 20 {
		if err := c.Incr(ctx, "fast", 1); err != nil {
			t.Fatal(err)
		}
		if err := c.IncrID(ctx, "d:x", 1, strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Rollup(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := be.Close(); err != nil {
		t.Fatal(err)
	}
	goleak.VerifyNone(t, opts)
}
