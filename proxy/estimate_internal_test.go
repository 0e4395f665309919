package proxy

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
)

var t0 = time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)

// TestEstimateBasics: a read re-bases the estimate; until the TTL ends it
// is the read plus this proxy's increments since, with no further read.
func TestEstimateBasics(t *testing.T) {
	e := newEstimates()
	const ttl = time.Second
	if _, ok, a0 := e.added("k", 1, t0, ttl, false); ok || a0 != 1 {
		t.Fatalf("first increment: ok=%v a0=%d, want a read with a0=1", ok, a0)
	}
	// The read (which saw the increment and 99 from elsewhere) lands.
	if v, exists := e.read("k", hotcount.Reading{Key: "k", Value: 100}, true, 1, t0); v != 100 || !exists {
		t.Fatalf("after the read: %d %v", v, exists)
	}
	for i := 1; i <= 5; i++ {
		v, ok, _ := e.added("k", 2, t0.Add(time.Duration(i)*100*time.Millisecond), ttl, false)
		if !ok || v != int64(100+2*i) {
			t.Fatalf("increment %d: %d ok=%v", i, v, ok)
		}
	}
	if v, exists, ok, _ := e.cached("k", t0.Add(900*time.Millisecond), ttl); !ok || v != 110 || !exists {
		t.Fatalf("cached: %d %v %v", v, exists, ok)
	}
	// Past the TTL the next increment asks for a read.
	_, ok, a0 := e.added("k", 1, t0.Add(ttl), ttl, false)
	if ok || a0 != 12 {
		t.Fatalf("past the TTL: ok=%v a0=%d", ok, a0)
	}
	// The reading's age dates the entry: a cached reading 600 ms old
	// expires 400 ms later.
	e.read("k", hotcount.Reading{Key: "k", Value: 500, Stale: 600 * time.Millisecond}, true, a0, t0.Add(ttl))
	if _, _, ok, _ := e.cached("k", t0.Add(ttl+399*time.Millisecond), ttl); !ok {
		t.Fatal("expired too early")
	}
	if _, _, ok, _ := e.cached("k", t0.Add(ttl+400*time.Millisecond), ttl); ok {
		t.Fatal("not expired with the reading's age")
	}
	// ReplyExact: a read every time.
	if _, ok, _ := e.added("k", 1, t0.Add(ttl), ttl, true); ok {
		t.Fatal("read=true answered without a read")
	}
}

// TestEstimateNeverBelowOwnAdds: whatever the reads say — reads that land
// late, out of order, seeing none or some of the increments made while
// they were in flight, or that fail — every answer is at least the first
// read's value plus this proxy's increments since, as long as nothing
// else decrements.
func TestEstimateNeverBelowOwnAdds(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	e := newEstimates()
	const ttl = 50 * time.Millisecond
	var own int64 // the counter's value: only this proxy adds
	now := t0
	check := func(what string, v int64) {
		t.Helper()
		if v < own {
			t.Fatalf("%s: estimate %d below the %d this proxy added", what, v, own)
		}
	}
	type read struct{ a0, seen, land int64 }
	var inflight []read
	for step := int64(0); step < 20000; step++ {
		now = now.Add(time.Millisecond)
		v, ok, a0 := e.added("k", 3, now, ttl, false)
		own += 3
		if ok {
			check(fmt.Sprintf("step %d", step), v)
		} else {
			// A read starts: it sees everything added so far, and may
			// also see what is added while it is in flight.
			inflight = append(inflight, read{a0: a0, seen: own, land: step + 1 + rng.Int64N(8)})
		}
		rng.Shuffle(len(inflight), func(i, j int) { inflight[i], inflight[j] = inflight[j], inflight[i] })
		kept := inflight[:0]
		for _, r := range inflight {
			if r.land > step {
				kept = append(kept, r)
				continue
			}
			if rng.IntN(10) == 0 {
				check("failed read", e.failed("k"))
				continue
			}
			seen := r.seen + rng.Int64N(own-r.seen+1) // some of what came meanwhile
			v, _ := e.read("k", hotcount.Reading{Value: seen}, seen != 0, r.a0, now)
			check("read", v)
		}
		inflight = kept
	}
}

// TestEstimateRefreshing: while one read is in flight, other increments
// answer from the old estimate (plus their own adds) rather than piling up
// reads.
func TestEstimateRefreshing(t *testing.T) {
	e := newEstimates()
	const ttl = time.Second
	_, _, a0 := e.added("k", 1, t0, ttl, false)
	e.read("k", hotcount.Reading{Value: 10}, true, a0, t0)
	later := t0.Add(2 * ttl)
	if _, ok, _ := e.added("k", 1, later, ttl, false); ok {
		t.Fatal("expired estimate answered without a read")
	}
	v, ok, _ := e.added("k", 1, later, ttl, false)
	if !ok || v != 12 {
		t.Fatalf("during the read: %d ok=%v, want the old estimate 12", v, ok)
	}
	if got := e.failed("k"); got != 12 {
		t.Fatalf("failed read keeps %d, want 12", got)
	}
}

// TestEstimateBounded: the map is swept, so keys read once do not pile up.
func TestEstimateBounded(t *testing.T) {
	e := newEstimates()
	const ttl = time.Millisecond
	now := t0
	for i := 0; i < 20*estimateShards*estimateSweepAt/10; i++ {
		now = now.Add(time.Microsecond)
		key := fmt.Sprintf("k%d", i)
		_, _, a0 := e.added(key, 1, now, ttl, false)
		e.read(key, hotcount.Reading{Value: 1}, true, a0, now)
	}
	if n := e.size(); n > estimateShards*estimateSweepAt {
		t.Fatalf("%d entries held", n)
	}
}

func TestSatAdd(t *testing.T) {
	for _, c := range []struct{ a, b, want int64 }{
		{1, 2, 3}, {math.MaxInt64, 1, math.MaxInt64}, {math.MinInt64, -1, math.MinInt64}, {-5, 3, -2},
	} {
		if got := satAdd(c.a, c.b); got != c.want {
			t.Errorf("satAdd(%d, %d) = %d", c.a, c.b, got)
		}
	}
}
