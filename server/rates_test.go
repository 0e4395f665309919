package server

import (
	"fmt"
	"math"
	"sync"
	"testing"
	"time"
)

// fakeClock is a manually advanced clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }

func (c *fakeClock) advance(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }

func newTestTracker(k int) (*rateTracker, *fakeClock) {
	clk := &fakeClock{t: time.Unix(1000, 0)}
	return newRateTracker(rateConfig{width: time.Second, buckets: 10, k: k, now: clk.now}), clk
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func TestRatesWindow(t *testing.T) {
	tr, clk := newTestTracker(16)
	nodes := []string{"a", "a", "b", "c"} // N=4: a gets half of each write
	for s := 0; s < 10; s++ {
		for i := 0; i < 20; i++ {
			tr.add("hot", nodes)
		}
		tr.add("cold", nil)
		clk.advance(time.Second)
	}
	// Ten full buckets behind us, the current one empty: 200 hot writes
	// over (9 full + 0 s of the current) = 9 s covered.
	hk := tr.hotKeys(10)
	if len(hk) != 2 || hk[0].Key != "hot" || hk[0].N != 4 || hk[1].Key != "cold" || hk[1].N != 0 {
		t.Fatalf("hot keys %+v", hk)
	}
	// The oldest bucket fell out: 9 buckets of 20 over 9 s.
	if !near(hk[0].Rate, 20) || !near(hk[1].Rate, 1) {
		t.Fatalf("rates %+v", hk)
	}
	nr := tr.nodeRates([]string{"d"})
	want := map[string]float64{"a": 10, "b": 5, "c": 5, "d": 0}
	if len(nr) != 4 {
		t.Fatalf("node rates %+v", nr)
	}
	for _, n := range nr {
		if !near(n.Rate, want[n.Node]) {
			t.Fatalf("node %s rate %v, want %v (%+v)", n.Node, n.Rate, want[n.Node], nr)
		}
	}
	clk.advance(20 * time.Second) // everything expires
	if hk := tr.hotKeys(10); len(hk) != 0 {
		t.Fatalf("expired keys still reported: %+v", hk)
	}
	if nr := tr.nodeRates(nil); len(nr) != 0 {
		t.Fatalf("expired nodes still reported: %+v", nr)
	}
}

func TestRatesYoungWindow(t *testing.T) {
	tr, clk := newTestTracker(16)
	clk.advance(2500 * time.Millisecond)
	for i := 0; i < 5; i++ {
		tr.add("k", nil)
	}
	if hk := tr.hotKeys(1); len(hk) != 1 || !near(hk[0].Rate, 2) { // 5 over 2.5 s
		t.Fatalf("%+v", hk)
	}
	tr2, _ := newTestTracker(16)
	tr2.add("k", nil) // at once: the window is at least one bucket
	if hk := tr2.hotKeys(1); !near(hk[0].Rate, 1) {
		t.Fatalf("%+v", hk)
	}
}

// TestRatesBoundedMemory: many distinct keys never grow a bucket beyond K,
// and a heavy hitter survives the churn with its count intact.
func TestRatesBoundedMemory(t *testing.T) {
	tr, _ := newTestTracker(8)
	for i := 0; i < 10000; i++ {
		tr.add(fmt.Sprintf("noise-%d", i), nil)
		if i%4 == 0 {
			tr.add("viral", nil)
		}
	}
	for _, b := range tr.ring {
		if len(b.keys) > 8 {
			t.Fatalf("bucket holds %d keys", len(b.keys))
		}
	}
	hk := tr.hotKeys(1)
	if hk[0].Key != "viral" || hk[0].Rate < 2500 {
		t.Fatalf("heavy hitter lost: %+v", hk)
	}
}
