package hotcount_test

import (
	"context"
	"math"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/hotkeys"
)

// TestAutoNHeatAndCool drives one key at 100/s, then 40,000/s, then 100/s
// again, through a Client with automatic N: N grows soon after the rate
// crosses the budget, folds back after the key cools, and the total is
// exact.
func TestAutoNHeatAndCool(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, mustMem(t), hotcount.Config{
		// The budget is low so that the test holds where -race and a busy
		// machine keep the achieved rate below 40,000/s: N targets
		// rate × 1.5 / budget, capped at AutoNMaxN.
		Defaults: hotcount.Namespace{N: 2},
		Reads:    hotcount.ReadConfig{NoCache: true},
		Meta:     hotcount.MetaConfig{TTL: 100 * time.Millisecond},
		AutoN:    hotcount.AutoNConfig{Enabled: true, Budget: 2000, MaxN: 16, Hysteresis: 1500 * time.Millisecond},
	})
	key := "likes:post:viral"
	var sent atomic.Int64
	n := func() int {
		w, _, err := c.Labels(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		return len(w)
	}
	// drive sends rate increments/s for d, paced per millisecond by 8
	// workers.
	drive := func(rate int, d time.Duration, watch func(time.Duration) bool) {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		const workers = 8
		for range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				start := time.Now()
				var done int
				tick := time.NewTicker(time.Millisecond)
				defer tick.Stop()
				for {
					select {
					case <-stop:
						return
					case <-tick.C:
					}
					want := int(time.Since(start).Seconds() * float64(rate) / workers)
					for ; done < want && done%256 != 255 || done < want && !closed(stop); done++ {
						if err := c.Incr(ctx, key, 1); err != nil {
							t.Error(err)
							return
						}
						sent.Add(1)
					}
				}
			}()
		}
		start := time.Now()
		for time.Since(start) < d {
			if watch != nil && watch(time.Since(start)) {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		close(stop)
		wg.Wait()
	}
	closedRate := func(before int64, d time.Duration) float64 { return float64(sent.Load()-before) / d.Seconds() }
	drive(100, time.Second, nil)
	if got := n(); got != 1 {
		t.Fatalf("cool key has N %d, want 1 (cold: 100/s is under the hot rate)", got)
	}
	var grewAfter time.Duration
	before, hotStart := sent.Load(), time.Now()
	drive(40000, 4*time.Second, func(el time.Duration) bool {
		if grewAfter == 0 && n() > 1 {
			grewAfter = el
		}
		return false
	})
	achieved := closedRate(before, time.Since(hotStart))
	hot := n()
	if grewAfter == 0 || hot < 4 {
		t.Fatalf("at %.0f/s N is %d (grew after %v), want ≥ 4", achieved, hot, grewAfter)
	}
	var shrankAfter time.Duration
	drive(100, 8*time.Second, func(el time.Duration) bool {
		if n() < hot {
			shrankAfter = el
			return true
		}
		return false
	})
	if shrankAfter == 0 {
		t.Fatalf("N stayed %d after cooling", n())
	}
	if err := c.Resume(ctx, key); err != nil {
		t.Fatal(err)
	}
	time.Sleep(500 * time.Millisecond) // let an in-flight fold finish
	r, err := c.Get(ctx, key)
	if err != nil || r.Value != sent.Load() {
		t.Fatalf("total %+v %v, want %d", r, err, sent.Load())
	}
	t.Logf("hot phase achieved %.0f/s; N 2 → %d seen %v after the hot phase began, folded back %v after cooling began; decisions: %+v",
		achieved, hot, grewAfter, shrankAfter, c.Decisions())
}

func closed(ch chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// TestHotKeyRatesOfIncrements: the hot-key sketches count a counter's
// first 64 unbuffered increments exactly and, past them, a sample of a
// sharded counter's increments weighted so that its rates stay close to
// the true ones; a counter with one sub-counter is counted exactly, and
// so is every node's write total.
func TestHotKeyRatesOfIncrements(t *testing.T) {
	ctx := context.Background()
	c := newClient(t, mustMem(t), hotcount.Config{
		Defaults:   hotcount.Namespace{N: 8, NoColdStart: true},
		Namespaces: []hotcount.Namespace{{Prefix: "cold:", N: 1}},
		Clock:      clock.NewFake(), // still: a rate is the writes of one bucket over its width
	})
	counts := map[string]int{"likes:hot": 4000, "likes:few": 40, "cold:1": 3}
	for key, n := range counts {
		for range n {
			if err := c.Incr(ctx, key, 1); err != nil {
				t.Fatal(err)
			}
		}
	}
	rates := map[string]hotcount.HotKey{}
	for _, h := range c.HotKeys(ctx, 10) {
		rates[h.Key] = h
	}
	bucket := (hotkeys.DefaultWindow / hotkeys.DefaultBuckets).Seconds()
	// Past the first 64, the count is 8 × Binomial(3936, 1/8): its
	// standard deviation is under 4% of 4000, and 20% is five of them.
	want := 4000 / bucket
	if h := rates["likes:hot"]; math.Abs(h.Arrivals-want) > 0.2*want || math.Abs(h.Writes-want) > 0.2*want {
		t.Errorf("hot sharded counter: %+v, want arrivals and writes %.0f/s ± 20%%", h, want)
	}
	for _, key := range []string{"likes:few", "cold:1"} {
		if h, want := rates[key], float64(counts[key])/bucket; h.Arrivals != want || h.Writes != want {
			t.Errorf("%s: %+v, want arrivals and writes exactly %.0f/s", key, h, want)
		}
	}
	var total uint64
	for _, n := range c.Nodes(ctx) {
		total += n.Total
	}
	if total != 4000+40+3 {
		t.Errorf("node totals add up to %d, want %d", total, 4000+40+3)
	}
}
