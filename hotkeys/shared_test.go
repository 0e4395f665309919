package hotkeys

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/mem"
)

// proc is one simulated process: its sketch and its view of the cluster.
type proc struct {
	sk *Sketch
	sh *Shared
}

func newProcs(t *testing.T, n int, st Counters, clk *manualNow) []proc {
	t.Helper()
	out := make([]proc, n)
	for i := range out {
		sk, err := NewSketch(SketchConfig{Now: clk.Now, ClockEvery: 1})
		if err != nil {
			t.Fatal(err)
		}
		sh, err := NewShared(SharedConfig{Store: st, Local: sk, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		out[i] = proc{sk, sh}
	}
	return out
}

func newMem(t *testing.T) *mem.Store {
	t.Helper()
	st, err := mem.New(mem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	return st
}

// TestSharedClusterRate: four processes take an uneven share (70/10/10/10
// percent) of 40,000 writes/s; each syncs every 500 ms at its own phase.
// Every process must estimate the cluster rate within 10%, where local
// rate × 4 would be off by up to 180%.
func TestSharedClusterRate(t *testing.T) {
	clk := newManualNow()
	st := newMem(t)
	ps := newProcs(t, 4, st, clk)
	share := []float64{0.7, 0.1, 0.1, 0.1}
	const rate = 40000.0
	ctx := context.Background()
	for step := 1; step <= 600; step++ { // 6 s in 10 ms steps
		clk.Advance(10 * time.Millisecond)
		for i, p := range ps {
			p.sk.Observe("k", int64(rate*share[i]/100))
			if (step+i*12)%50 == 0 { // every 500 ms, phases 120 ms apart
				if err := p.sh.Sync(ctx, []string{"k"}); err != nil {
					t.Fatalf("Sync: %v", err)
				}
			}
		}
	}
	for i, p := range ps {
		got := p.sh.Rate("k")
		if math.Abs(got-rate)/rate > 0.10 {
			t.Errorf("process %d (share %.0f%%): cluster rate %.0f/s, want %.0f ± 10%%", i, share[i]*100, got, rate)
		}
		scaled := Scaled{Local: p.sk, Processes: 4}.Rate("k")
		t.Logf("process %d: shared %.0f/s, local×4 %.0f/s", i, got, scaled)
	}
	vals, err := st.Get(ctx, []string{WriteKey("k")})
	if err != nil || vals[0] < 5.5*rate || vals[0] > 6*rate {
		t.Fatalf("write counter %v (%v), want about %v", vals, err, 6*rate)
	}
	// Writes stop: the estimate falls to zero within a window.
	for step := 1; step <= 300; step++ {
		clk.Advance(10 * time.Millisecond)
		if step%50 == 0 {
			for _, p := range ps {
				_ = p.sh.Sync(ctx, []string{"k"})
			}
		}
	}
	if got := ps[1].sh.Rate("k"); got != 0 {
		t.Fatalf("rate %.0f/s after writes stopped", got)
	}
}

// failingCounters fails every call.
type failingCounters struct{}

func (failingCounters) IncrMulti(context.Context, []store.IncrOp) ([]store.IncrResult, error) {
	return nil, store.ErrUnavailable
}
func (failingCounters) Get(context.Context, []string) ([]int64, error) {
	return nil, store.ErrUnavailable
}

// TestSharedKeepsUnpublished: writes that could not be published are sent
// by the next Sync, and the local rate stands in meanwhile.
func TestSharedKeepsUnpublished(t *testing.T) {
	clk := newManualNow()
	sk, _ := newTestSketch(t, SketchConfig{Now: clk.Now, ClockEvery: 1})
	down, err := NewShared(SharedConfig{Store: failingCounters{}, Local: sk, Now: clk.Now})
	if err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	sk.Observe("k", 500)
	if err := down.Sync(context.Background(), []string{"k"}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Sync on a failing store: %v", err)
	}
	if r := down.Rate("k"); r != sk.Rate("k") || r == 0 {
		t.Fatalf("Rate without readings %v, local %v", r, sk.Rate("k"))
	}
	st := newMem(t)
	up, _ := NewShared(SharedConfig{Store: st, Local: sk, Now: clk.Now})
	if err := up.Sync(context.Background(), []string{"k"}); err != nil {
		t.Fatal(err)
	}
	if v, _ := st.Get(context.Background(), []string{WriteKey("k")}); v[0] != 500 {
		t.Fatalf("write counter %d after the retry, want 500", v[0])
	}
	if _, err := NewShared(SharedConfig{Local: sk}); !errors.Is(err, ErrConfig) {
		t.Fatalf("NewShared without a store: %v", err)
	}
}

// TestControllerWithShared: the Controller syncs a Shared source each
// evaluation; with four processes of 10,000 writes/s each, the key
// crosses the 16,000/s budget of N=8 and grows within 2 s.
func TestControllerWithShared(t *testing.T) {
	clk := newFakeClock()
	st := newMem(t)
	type member struct {
		sk *Sketch
		c  *Controller
		rs *fakeResizer
	}
	var ms []member
	for range 4 {
		sk, err := NewSketch(SketchConfig{Now: clk.Now, ClockEvery: 1})
		if err != nil {
			t.Fatal(err)
		}
		sh, err := NewShared(SharedConfig{Store: st, Local: sk, Now: clk.Now})
		if err != nil {
			t.Fatal(err)
		}
		rs := newFakeResizer()
		c, err := NewController(ControllerConfig{
			Sketch: sk, Rates: sh, Resizer: rs, Clock: clk, Interval: time.Hour,
			Policy: Policy{Budget: 2000}, BaseN: func(string) int { return 8 },
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		ms = append(ms, member{sk, c, rs})
	}
	start := clk.Now()
	for step := 1; step <= 200; step++ { // 2 s
		clk.Advance(10 * time.Millisecond)
		for _, m := range ms {
			m.sk.Observe("k", 100) // 10,000/s each
		}
		if step%50 == 0 {
			for _, m := range ms {
				m.c.Evaluate(context.Background())
				settle(t, m.c)
			}
		}
	}
	for i, m := range ms {
		d := m.c.Decisions()
		if len(d) == 0 || d[0].Action != ActionGrow || d[0].At.Sub(start) > 2*time.Second {
			t.Fatalf("process %d: decisions %v", i, d)
		}
	}
}
