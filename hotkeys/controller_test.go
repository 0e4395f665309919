package hotkeys

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"
)

// rig is a Controller on a fake clock fed by a simulated write stream.
type rig struct {
	t     *testing.T
	clk   *clock.Fake
	sk    *Sketch
	rs    *fakeResizer
	c     *Controller
	start time.Time
}

func newRig(t *testing.T, edit func(*ControllerConfig)) *rig {
	t.Helper()
	clk := newFakeClock()
	sk, err := NewSketch(SketchConfig{Now: clk.Now, ClockEvery: 1})
	if err != nil {
		t.Fatal(err)
	}
	rs := newFakeResizer()
	cfg := ControllerConfig{
		Sketch:   sk,
		Resizer:  rs,
		Policy:   Policy{Budget: 2000, Headroom: 1.5, MaxN: 64, Hysteresis: 30 * time.Second},
		BaseN:    func(string) int { return 8 },
		Interval: time.Hour, // the tests call Evaluate themselves
		Clock:    clk,
	}
	if edit != nil {
		edit(&cfg)
	}
	c, err := NewController(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := c.Close(context.Background()); err != nil {
			t.Errorf("Close: %v", err)
		}
	})
	return &rig{t: t, clk: clk, sk: sk, rs: rs, c: c, start: clk.Now()}
}

// run writes rates (key → writes/s) for d in 10 ms steps, evaluating every
// 500 ms, and returns the decisions taken with their times since start.
func (r *rig) run(d time.Duration, rates map[string]float64) []Decision {
	r.t.Helper()
	var out []Decision
	for el := time.Duration(0); el < d; el += 10 * time.Millisecond {
		r.clk.Advance(10 * time.Millisecond)
		for k, rate := range rates {
			if n := int64(rate / 100); n > 0 {
				r.sk.Observe(k, n)
			}
		}
		if r.clk.Now().Sub(r.start)%(500*time.Millisecond) == 0 {
			out = append(out, r.c.Evaluate(context.Background())...)
			settle(r.t, r.c)
		}
	}
	return out
}

func (r *rig) elapsed(d Decision) time.Duration { return d.At.Sub(r.start) }

func (r *rig) n(key string) int {
	if n := r.c.lastN(key); n != 0 {
		return n
	}
	return 8
}

// TestControllerHeatUpAndCoolDown: a key goes from 100/s to 40,000/s and
// back. N must grow within 2 s of the crossing, settle without
// oscillating, and shrink back only after the 30 s hysteresis.
func TestControllerHeatUpAndCoolDown(t *testing.T) {
	r := newRig(t, nil)
	const hot = "likes:post:42"
	bg := map[string]float64{"views:a": 300, "views:b": 200}
	with := func(rate float64) map[string]float64 {
		m := map[string]float64{hot: rate}
		for k, v := range bg {
			m[k] = v
		}
		return m
	}
	if ds := r.run(5*time.Second, with(100)); len(ds) != 0 {
		t.Fatalf("decisions at 100/s: %v", ds)
	}
	// The budget is 2000/s per sub-counter: 16,000/s for N=8. The rate
	// steps to 40,000/s, over the budget from this instant.
	crossing := r.clk.Now().Sub(r.start)
	ds := r.run(3*time.Second, with(40000))
	if len(ds) == 0 || ds[0].Action != ActionGrow || r.elapsed(ds[0])-crossing > 2*time.Second {
		t.Fatalf("no grow within 2 s of the crossing at %v: %v", crossing, ds)
	}
	for _, d := range ds {
		if d.Key != hot || d.Action != ActionGrow {
			t.Fatalf("unexpected decision %+v", d)
		}
	}
	if n := r.n(hot); 40000/float64(n) > 2000 {
		t.Fatalf("3 s after heating N is %d: %.0f/s per sub-counter", n, 40000/float64(n))
	}
	grown := r.n(hot)
	t.Logf("grew %d times to N=%d; first after %v", len(ds), grown, r.elapsed(ds[0])-crossing)
	if ds := r.run(20*time.Second, with(40000)); len(ds) != 0 {
		t.Fatalf("decisions while steadily hot: %v", ds)
	}
	if hk := r.c.Hot(); len(hk) == 0 || hk[0].Key != hot || hk[0].N != grown || hk[0].Reason == "" {
		t.Fatalf("Hot = %+v", hk)
	}
	cooled := r.clk.Now().Sub(r.start)
	ds = r.run(40*time.Second, with(100))
	if len(ds) != 1 || ds[0].Action != ActionShrink || ds[0].To != 8 || ds[0].From != grown {
		t.Fatalf("cooling decisions: %v, want one shrink %d→8", ds, grown)
	}
	if after := r.elapsed(ds[0]) - cooled; after < 30*time.Second || after > 33*time.Second {
		t.Fatalf("shrank %v after cooling, want just after the 30 s hysteresis", after)
	}
	if n := r.n(hot); n != 8 {
		t.Fatalf("after cooling N = %d, want 8", n)
	}
	if ds := r.run(10*time.Second, with(100)); len(ds) != 0 {
		t.Fatalf("decisions after settling: %v", ds)
	}
	hist := r.c.Decisions()
	if len(hist) == 0 || hist[len(hist)-1].Action != ActionShrink || hist[0].Action != ActionGrow {
		t.Fatalf("Decisions = %v", hist)
	}
	calls := r.rs.Calls()
	if len(calls) != len(hist) || calls[len(calls)-1] != (resizeCall{hot, 8}) {
		t.Fatalf("resizer calls %v for decisions %v", calls, hist)
	}
}

// TestControllerShrinksSilentKey: a key that stops being written drops out
// of the sketch's Top but is still shrunk back to its base N.
func TestControllerShrinksSilentKey(t *testing.T) {
	r := newRig(t, nil)
	r.run(3*time.Second, map[string]float64{"k": 40000})
	if r.n("k") <= 8 {
		t.Fatalf("did not grow: N=%d", r.n("k"))
	}
	ds := r.run(35*time.Second, nil)
	if len(ds) != 1 || ds[0].Action != ActionShrink || ds[0].To != 8 {
		t.Fatalf("decisions for a silent key: %v", ds)
	}
	r.run(time.Second, nil)
	if len(r.c.states) != 0 {
		t.Fatalf("state kept for settled keys: %v", r.c.states)
	}
}

// TestControllerUsesSize: with a Size function the Controller believes it
// over its own record, so a key grown elsewhere is shrunk when cool.
func TestControllerUsesSize(t *testing.T) {
	sizes := map[string]int{"k": 40}
	r := newRig(t, func(c *ControllerConfig) {
		c.Size = func(_ context.Context, key string) (int, error) {
			if n, ok := sizes[key]; ok {
				return n, nil
			}
			return 8, nil
		}
	})
	ds := r.run(32*time.Second, map[string]float64{"k": 3000})
	if len(ds) != 1 || ds[0].From != 40 || ds[0].Action != ActionShrink || ds[0].To != 8 {
		t.Fatalf("decisions: %v", ds)
	}
}

func TestControllerOneResizeAtATime(t *testing.T) {
	r := newRig(t, nil)
	r.rs.block = make(chan struct{})
	var all []Decision
	for range 6 {
		r.clk.Advance(500 * time.Millisecond)
		for range 200 {
			r.sk.Observe("k", 100) // 40,000/s
		}
		all = append(all, r.c.Evaluate(context.Background())...)
	}
	if len(all) != 1 {
		t.Fatalf("%d decisions while a resize was in flight: %v", len(all), all)
	}
	hk := r.c.Hot()
	if len(hk) != 1 || !hk[0].Resizing || hk[0].N != 8 {
		t.Fatalf("Hot = %+v", hk)
	}
	close(r.rs.block)
	settle(t, r.c)
	if got := r.rs.Calls(); len(got) != 1 {
		t.Fatalf("resizer calls: %v", got)
	}
}

func TestControllerResizeFailure(t *testing.T) {
	var mu sync.Mutex
	var seen []Decision
	r := newRig(t, func(c *ControllerConfig) {
		c.OnDecision = func(d Decision) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, d)
		}
	})
	r.rs.fail = errors.New("backend down")
	r.run(2*time.Second, map[string]float64{"k": 40000})
	hist := r.c.Decisions()
	var failed int
	for _, d := range hist {
		if d.Err != "" {
			failed++
			if !strings.Contains(d.Err, "backend down") {
				t.Fatalf("failure record %+v", d)
			}
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if failed == 0 || failed*2 != len(hist) || len(seen) != len(hist) {
		t.Fatalf("history %v, OnDecision saw %d", hist, len(seen))
	}
	if r.n("k") != 8 {
		t.Fatalf("failed resizes changed N to %d", r.n("k"))
	}
}

func TestControllerHistoryRing(t *testing.T) {
	r := newRig(t, func(c *ControllerConfig) { c.History = 3 })
	for i := range 5 {
		r.c.mu.Lock()
		r.c.recordLocked(Decision{From: i})
		r.c.mu.Unlock()
	}
	got := r.c.Decisions()
	if len(got) != 3 || got[0].From != 2 || got[2].From != 4 {
		t.Fatalf("Decisions = %v", got)
	}
}

// TestControllerLoop checks that the ticker drives evaluations and that
// Close stops the loop, cancels a resize in flight and is idempotent.
func TestControllerLoop(t *testing.T) {
	r := newRig(t, func(c *ControllerConfig) { c.Interval = 500 * time.Millisecond })
	r.rs.block = make(chan struct{}) // never released: Close must cancel it
	for range 200 {
		r.sk.Observe("k", 200) // 40,000 writes in the first 1 s
	}
	deadline := time.Now().Add(10 * time.Second)
	for len(r.rs.Calls()) == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the loop never resized")
		}
		r.clk.Advance(500 * time.Millisecond)
		time.Sleep(time.Millisecond) // let the loop goroutine run
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := r.c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := r.c.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if ds := r.c.Evaluate(context.Background()); len(ds) != 0 {
		t.Fatalf("Evaluate after Close started %v", ds)
	}
	hist := r.c.Decisions()
	if len(hist) != 2 || !strings.Contains(hist[1].Err, "context canceled") {
		t.Fatalf("history after Close: %v", hist)
	}
}

func TestControllerConfig(t *testing.T) {
	sk, _ := NewSketch(SketchConfig{})
	for _, cfg := range []ControllerConfig{
		{},
		{Sketch: sk},
		{Sketch: sk, Resizer: newFakeResizer(), Policy: Policy{Budget: -1}},
		{Sketch: sk, Resizer: newFakeResizer(), Interval: -1},
	} {
		if c, err := NewController(cfg); !errors.Is(err, ErrConfig) {
			if c != nil {
				_ = c.Close(context.Background())
			}
			t.Errorf("NewController(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
}

func TestScaled(t *testing.T) {
	sk, clk := newTestSketch(t, SketchConfig{ClockEvery: 1})
	for range 100 {
		clk.Advance(10 * time.Millisecond)
		sk.Observe("k", 10) // 1000/s
	}
	if r := (Scaled{Local: sk, Processes: 4}).Rate("k"); r < 3800 || r > 4200 {
		t.Fatalf("4 processes of 1000/s: %.0f/s", r)
	}
	if r := (Scaled{Local: sk}).Rate("k"); r < 950 || r > 1050 {
		t.Fatalf("one process: %.0f/s", r)
	}
}

// TestControllerLeavesPinnedKeys: a key whose N was set by hand is never
// resized, however hot or cool it runs, and its hot-key entry says why;
// the key beside it is resized as usual.
func TestControllerLeavesPinnedKeys(t *testing.T) {
	r := newRig(t, func(c *ControllerConfig) {
		c.Pinned = func(_ context.Context, key string) (bool, error) { return key == "pinned", nil }
	})
	ds := r.run(10*time.Second, map[string]float64{"pinned": 40000, "free": 40000})
	for _, d := range ds {
		if d.Key == "pinned" {
			t.Fatalf("a decision about a pinned key: %+v", d)
		}
	}
	if len(ds) == 0 {
		t.Fatal("no decision about the key beside it: the test proves nothing")
	}
	found := false
	for _, h := range r.c.Hot() {
		if h.Key == "pinned" {
			found = strings.Contains(h.Reason, "pinned")
		}
	}
	if !found {
		t.Fatalf("hot keys do not say the key is pinned: %+v", r.c.Hot())
	}
}
