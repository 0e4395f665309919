package hotcount_test

import (
	"context"
	"errors"
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

// TestExpiryDuringFold: a sharded counter expires while it is being folded
// to fewer sub-counters. Readers see it gone from the deadline on, the fold
// stops (or finishes) without the folded value landing in the counter that
// starts after the deadline, and that new counter counts from zero.
func TestExpiryDuringFold(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, openCluster(t), hotcount.Config{
		Defaults: hotcount.Namespace{N: 8, NoColdStart: true},
		Meta:     hotcount.MetaConfig{TTL: 300 * time.Millisecond},
		Reads:    hotcount.ReadConfig{NoCache: true},
	})
	key := uniqueKey(t)
	for range 80 {
		if err := c.Incr(ctx, key, 5); err != nil {
			t.Fatal(err)
		}
	}
	deadline := time.Now().Add(400 * time.Millisecond) // inside the fold's wait (TTL + margin)
	if _, err := c.Expire(ctx, key, deadline); err != nil {
		t.Fatal(err)
	}
	folded := make(chan error, 1)
	go func() { folded <- c.Resize(ctx, key, 2) }()
	time.Sleep(time.Until(deadline) + 20*time.Millisecond)
	if r, err := c.Get(ctx, key); err != nil || r.Value != 0 {
		t.Fatalf("after the deadline, during the fold: %+v %v", r, err)
	}
	if err := <-folded; err != nil && !errors.Is(err, hotcount.ErrConflict) {
		t.Fatalf("fold across the deadline: %v", err)
	}
	if err := c.Incr(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	if r, err := c.Get(ctx, key); err != nil || r.Value != 1 {
		t.Fatalf("the counter after the deadline: %+v %v, want 1 (nothing of the old one)", r, err)
	}
}

// TestExpiryDuringBufferedFlushing: increments keep arriving, buffered,
// across a counter's deadline, while readers read. The value after the
// deadline counts the increments made after it (and those buffered before
// it but flushed after it: documented), never the old counter's.
func TestExpiryDuringBufferedFlushing(t *testing.T) {
	ctx := context.Background()
	const ttl = 3 * time.Second
	c := newClient(t, openCluster(t), hotcount.Config{
		Defaults: hotcount.Namespace{Buffered: true, FlushInterval: 50 * time.Millisecond, TTL: ttl},
		Reads:    hotcount.ReadConfig{NoCache: true},
	})
	key := uniqueKey(t)
	if err := c.Incr(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	deadline, _, err := c.Deadline(ctx, key)
	if err != nil || deadline.IsZero() {
		t.Fatalf("deadline %v %v", deadline, err)
	}
	sent := atomic.Int64{}
	sent.Store(1)
	var sentAfter atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				if err := c.Incr(ctx, key, 1); err != nil {
					t.Error(err)
					return
				}
				sent.Add(1)
				if time.Now().After(deadline.Add(200 * time.Millisecond)) {
					sentAfter.Add(1)
				}
				time.Sleep(time.Millisecond)
			}
		})
	}
	for time.Now().Before(deadline.Add(time.Second)) { // readers across the deadline
		if _, err := c.Get(ctx, key); err != nil {
			t.Fatal(err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if time.Now().After(deadline.Add(ttl)) {
		t.Skip("the new counter expired too before the check: the machine is too slow for this run")
	}
	if r.Value < sentAfter.Load() || r.Value >= sent.Load() {
		t.Fatalf("after the deadline: %d; sent %d in all, %d after the deadline", r.Value, sent.Load(), sentAfter.Load())
	}
	t.Logf("sent %d (%d after the deadline), value now %d", sent.Load(), sentAfter.Load(), r.Value)
}

// TestClearUnderBufferedLoad: Clear while buffered increments keep
// arriving: this process's deltas buffered before the Clear are sent
// before it and go with it; the value afterwards counts only increments
// made after the Clear returned (plus, at most, those racing with it).
func TestClearUnderBufferedLoad(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, openCluster(t), hotcount.Config{
		Defaults: hotcount.Namespace{Buffered: true, FlushInterval: 20 * time.Millisecond, N: 4, NoColdStart: true},
		Reads:    hotcount.ReadConfig{NoCache: true},
	})
	key := uniqueKey(t)
	var before, during, after atomic.Int64
	var phase atomic.Int32 // 0 before, 1 clearing, 2 after
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				p := phase.Load()
				if err := c.Incr(ctx, key, 1); err != nil {
					t.Error(err)
					return
				}
				switch {
				case p == 0 && phase.Load() == 0:
					before.Add(1)
				case p == 2:
					after.Add(1)
				default:
					during.Add(1)
				}
			}
		})
	}
	time.Sleep(300 * time.Millisecond)
	phase.Store(1)
	if err := c.Clear(ctx, key); err != nil {
		t.Fatal(err)
	}
	phase.Store(2)
	time.Sleep(300 * time.Millisecond)
	close(stop)
	wg.Wait()
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	r, err := c.Get(ctx, key)
	if err != nil {
		t.Fatal(err)
	}
	if r.Value < after.Load() || r.Value > after.Load()+during.Load() {
		t.Fatalf("after Clear: %d; %d increments before it, %d racing with it, %d after it", r.Value, before.Load(), during.Load(), after.Load())
	}
	t.Logf("%d before, %d racing, %d after the Clear; value %d", before.Load(), during.Load(), after.Load(), r.Value)
}
