package hotcount_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// TestTTLColdCounter: a namespace TTL gives a new counter a deadline at
// its first write, on its one cache key; Deadline, Persist, Expire and
// Exists behave as Redis's TTL, PERSIST, EXPIRE and EXISTS; the counter is
// gone after its deadline and starts anew on the next write. On the
// cluster, unbuffered and buffered.
func TestTTLColdCounter(t *testing.T) {
	for _, buffered := range []bool{false, true} {
		t.Run(map[bool]string{false: "unbuffered", true: "buffered"}[buffered], func(t *testing.T) {
			ctx := context.Background()
			st := openCluster(t)
			c := newClient(t, st, hotcount.Config{
				Defaults: hotcount.Namespace{TTL: time.Hour, Buffered: buffered, FlushInterval: 50 * time.Millisecond},
				Reads:    hotcount.ReadConfig{NoCache: true},
			})
			key := uniqueKey(t)
			if n, err := c.Exists(ctx, key); err != nil || n != 0 {
				t.Fatalf("Exists before the first write: %d %v", n, err)
			}
			start := time.Now()
			if err := c.Incr(ctx, key, 5); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			at, exists, err := c.Deadline(ctx, key)
			if err != nil || !exists || at.Before(start.Add(time.Hour-time.Minute)) || at.After(time.Now().Add(time.Hour)) {
				t.Fatalf("Deadline = %v %v %v, want about an hour from now", at, exists, err)
			}
			subs, _ := c.SubKeys(ctx, key)
			if len(subs) != 1 || subs[0] != keyspace.SubKey(key, keyspace.ColdLabel) {
				t.Fatalf("a cold counter has sub-keys %v", subs)
			}
			if had, err := c.Persist(ctx, key); err != nil || !had {
				t.Fatalf("Persist = %v %v", had, err)
			}
			if at, exists, _ := c.Deadline(ctx, key); !at.IsZero() || !exists {
				t.Fatalf("after Persist: %v %v", at, exists)
			}
			deadline := time.Now().Add(1500 * time.Millisecond)
			if existed, err := c.Expire(ctx, key, deadline); err != nil || !existed {
				t.Fatalf("Expire = %v %v", existed, err)
			}
			if r, err := c.Get(ctx, key); err != nil || r.Value != 5 {
				t.Fatalf("before the deadline: %+v %v", r, err)
			}
			time.Sleep(time.Until(deadline) + 100*time.Millisecond) // Redis's own clock expires it
			if r, err := c.Get(ctx, key); err != nil || r.Value != 0 {
				t.Fatalf("after the deadline: %+v %v", r, err)
			}
			if n, _ := c.Exists(ctx, key); n != 0 {
				t.Fatal("an expired counter exists")
			}
			if existed, err := c.Expire(ctx, key, time.Now().Add(time.Hour)); err != nil || existed {
				t.Fatalf("Expire of a gone counter = %v %v", existed, err)
			}
			if err := c.Incr(ctx, key, 2); err != nil {
				t.Fatal(err)
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if r, err := c.Get(ctx, key); err != nil || r.Value != 2 {
				t.Fatalf("a new counter after expiry: %+v %v", r, err)
			}
			if _, exists, _ := c.Deadline(ctx, key); !exists {
				t.Fatal("the new counter does not exist")
			}
		})
	}
}

// TestTTLShardedCounter: a sharded counter's deadline is in its record;
// every sub-counter takes it (the cold one exactly, the others a grace
// period later, the record later still); readers see it gone at the
// deadline; the next increment starts a new counter and removes the rest.
func TestTTLShardedCounter(t *testing.T) {
	ctx := context.Background()
	st := openCluster(t)
	c := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{N: 8, NoColdStart: true}, Reads: hotcount.ReadConfig{NoCache: true}})
	key := uniqueKey(t)
	for range 40 {
		if err := c.Incr(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(1500 * time.Millisecond)
	if existed, err := c.Expire(ctx, key, deadline); err != nil || !existed {
		t.Fatalf("Expire = %v %v", existed, err)
	}
	subs, _ := c.SubKeys(ctx, key)
	ds, err := st.Deadlines(ctx, append(subs, keyspace.MetaKey(key)))
	if err != nil {
		t.Fatal(err)
	}
	for i, d := range ds[:len(subs)] {
		want := deadline
		if subs[i] != keyspace.SubKey(key, keyspace.ColdLabel) {
			want = deadline.Add(store.DeadlineGrace)
		}
		if d.Exists && d.At.Sub(want).Abs() > 10*time.Millisecond {
			t.Errorf("%s expires at %v, want %v", subs[i], d.At, want)
		}
	}
	if rec := ds[len(subs)]; !rec.Exists || rec.At.Sub(deadline.Add(2*store.DeadlineGrace)).Abs() > 10*time.Millisecond {
		t.Errorf("the record expires at %v, want %v", rec.At, deadline.Add(2*store.DeadlineGrace))
	}
	if r, err := c.Get(ctx, key); err != nil || r.Value != 40 {
		t.Fatalf("before the deadline: %+v %v", r, err)
	}
	time.Sleep(time.Until(deadline) + 50*time.Millisecond)
	if r, err := c.Get(ctx, key); err != nil || r.Value != 0 {
		t.Fatalf("after the deadline: %+v %v (the rest is still in the cache for the grace period)", r, err)
	}
	if n, _ := c.Exists(ctx, key); n != 0 {
		t.Fatal("an expired counter exists")
	}
	if err := c.Incr(ctx, key, 3); err != nil {
		t.Fatal(err)
	}
	if r, err := c.Get(ctx, key); err != nil || r.Value != 3 {
		t.Fatalf("a new counter after expiry: %+v %v", r, err)
	}
	left, _ := st.Get(ctx, subs)
	var sum int64
	for _, v := range left {
		sum += v
	}
	if sum != 3 {
		t.Fatalf("the old sub-counters still hold %d (want only the new 3)", sum-3)
	}
}

// TestNoHalfExpiredRead: 16 readers read a sharded counter while, past its
// deadline, a test hook removes its sub-counters one by one (as nodes
// whose clocks differ would): every reading is the whole value or 0.
func TestNoHalfExpiredRead(t *testing.T) {
	ctx := context.Background()
	st := openCluster(t)
	c := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{N: 8, NoColdStart: true}, Reads: hotcount.ReadConfig{NoCache: true}})
	key := uniqueKey(t)
	const whole = 800
	for range whole / 10 {
		if err := c.Incr(ctx, key, 10); err != nil {
			t.Fatal(err)
		}
	}
	subs, _ := c.SubKeys(ctx, key)
	deadline := time.Now().Add(time.Second)
	if _, err := c.Expire(ctx, key, deadline); err != nil {
		t.Fatal(err)
	}
	var wrong, reads, zeros atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 16 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				r, err := c.Get(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				reads.Add(1)
				switch r.Value {
				case whole:
				case 0:
					zeros.Add(1)
				default:
					wrong.Add(1)
					t.Errorf("half-expired read: %d", r.Value)
				}
			}
		})
	}
	time.Sleep(time.Until(deadline))
	primaries, _ := cluster.Primaries(ctx)
	topo, _ := st.Topology(ctx)
	for _, sub := range subs { // the hook: one sub-counter at a time
		for _, p := range primaries {
			if topo.NodeOf(sub) == p {
				if _, err := testenv.Do(ctx, p, "DEL", sub); err != nil {
					t.Fatal(err)
				}
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond)
	close(stop)
	wg.Wait()
	if wrong.Load() > 0 || zeros.Load() == 0 {
		t.Fatalf("%d reads, %d half-expired, %d zero", reads.Load(), wrong.Load(), zeros.Load())
	}
	t.Logf("%d reads across the deadline, %d after it, none half-expired", reads.Load(), zeros.Load())
}

// TestClearAndRecreate: a cleared counter reads 0 and a new write starts
// it again, cold or sharded.
func TestClearAndRecreate(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, openCluster(t), hotcount.Config{
		Namespaces: []hotcount.Namespace{{Prefix: "sharded:", N: 8, NoColdStart: true}},
		Reads:      hotcount.ReadConfig{NoCache: true},
	})
	for _, key := range []string{"cold:" + uniqueKey(t), "sharded:" + uniqueKey(t)} {
		for range 16 {
			if err := c.Incr(ctx, key, 2); err != nil {
				t.Fatal(err)
			}
		}
		if err := c.Clear(ctx, key); err != nil {
			t.Fatal(err)
		}
		if r, _ := c.Get(ctx, key); r.Value != 0 {
			t.Fatalf("%s after Clear: %d", key, r.Value)
		}
		if err := c.Incr(ctx, key, 7); err != nil {
			t.Fatal(err)
		}
		if r, _ := c.Get(ctx, key); r.Value != 7 {
			t.Fatalf("%s re-created: %d", key, r.Value)
		}
	}
}
