package hotkeys

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// manualNow is a clock for a Sketch, advanced by hand.
type manualNow struct{ ns atomic.Int64 }

func newManualNow() *manualNow {
	m := &manualNow{}
	m.ns.Store(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano())
	return m
}

func (m *manualNow) Now() time.Time          { return time.Unix(0, m.ns.Load()) }
func (m *manualNow) Advance(d time.Duration) { m.ns.Add(int64(d)) }

func newTestSketch(t testing.TB, cfg SketchConfig) (*Sketch, *manualNow) {
	t.Helper()
	clk := newManualNow()
	if cfg.Now == nil {
		cfg.Now = clk.Now
	}
	s, err := NewSketch(cfg)
	if err != nil {
		t.Fatalf("NewSketch: %v", err)
	}
	return s, clk
}

func TestSketchConfig(t *testing.T) {
	for _, cfg := range []SketchConfig{
		{K: -1}, {Buckets: MaxBuckets + 1}, {Window: time.Nanosecond, Buckets: 8}, {Shards: 1 << 20},
	} {
		if _, err := NewSketch(cfg); !errors.Is(err, ErrConfig) {
			t.Errorf("NewSketch(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
	s, err := NewSketch(SketchConfig{Shards: 5})
	if err != nil {
		t.Fatal(err)
	}
	if len(s.shards) != 8 {
		t.Errorf("5 shards rounded to %d, want 8", len(s.shards))
	}
}

// TestSketchZipfViral feeds a Zipf-distributed stream over a million keys
// at 60,000 writes/s plus one viral key at 40,000 writes/s, and checks that
// the viral key tops the sketch with a rate within 10% of the truth, and
// that the heaviest Zipf keys are measured as well.
func TestSketchZipfViral(t *testing.T) {
	s, clk := newTestSketch(t, SketchConfig{})
	rng := rand.New(rand.NewPCG(1, 2))
	zipf := rand.NewZipf(rng, 1.2, 1, 1<<20)
	const (
		viral    = "likes:post:viral"
		seconds  = 6
		stepsPer = 1000 // 1 ms steps
		viralPer = 40   // per step: 40,000/s
		tailPer  = 60   // per step: 60,000/s
	)
	names := map[uint64]string{}
	name := func(i uint64) string {
		n, ok := names[i]
		if !ok {
			n = fmt.Sprintf("views:item:%d", i)
			names[i] = n
		}
		return n
	}
	// truth counts the writes of the last window (2 s) per key.
	truth := map[string]int{}
	windowStart := (seconds - 2) * stepsPer
	for step := range seconds * stepsPer {
		clk.Advance(time.Millisecond)
		for range viralPer {
			s.Observe(viral, 1)
		}
		for range tailPer {
			k := name(zipf.Uint64())
			s.Observe(k, 1)
			if step >= windowStart {
				truth[k]++
			}
		}
	}
	top := s.Top(5)
	if len(top) == 0 || top[0].Key != viral {
		t.Fatalf("top = %v, want %q first", top, viral)
	}
	if r := top[0].Rate; math.Abs(r-40000)/40000 > 0.10 {
		t.Fatalf("viral rate %.0f/s, want 40000 ± 10%%", r)
	}
	t.Logf("viral: %.0f/s (true 40000/s); next: %+v", top[0].Rate, top[1:3])
	if r := s.Rate(viral); r != top[0].Rate {
		t.Errorf("Rate(viral) = %v, Top says %v", r, top[0].Rate)
	}
	// The next keys are Zipf's heaviest: rank 0 writes ~16,000/s.
	for _, kr := range top[1:3] {
		want := float64(truth[kr.Key]) / 2
		if want < 1000 || math.Abs(kr.Rate-want)/want > 0.10 {
			t.Errorf("%s: rate %.0f/s, true %.0f/s", kr.Key, kr.Rate, want)
		}
		if kr.Count-kr.ErrBound > int64(truth[kr.Key])*seconds {
			t.Errorf("%s: lower bound %d above the writes", kr.Key, kr.Count-kr.ErrBound)
		}
	}
	if s.Rate("never:seen") != 0 {
		t.Errorf("an untracked key has a rate")
	}
}

// TestSketchWindow checks the sliding window: a steady rate reads true, a
// step up is seen within one window, and a key that stops reads zero once
// the window has passed.
func TestSketchWindow(t *testing.T) {
	s, clk := newTestSketch(t, SketchConfig{Window: 2 * time.Second, Buckets: 8, ClockEvery: 1})
	feed := func(rate int, d time.Duration) {
		for step := time.Duration(0); step < d; step += 10 * time.Millisecond {
			clk.Advance(10 * time.Millisecond)
			s.Observe("k", int64(rate/100))
		}
	}
	feed(1000, 5*time.Second)
	if r := s.Rate("k"); math.Abs(r-1000) > 60 {
		t.Fatalf("steady 1000/s reads %.0f/s", r)
	}
	feed(40000, 500*time.Millisecond)
	if r := s.Rate("k"); r < 8000 || r > 40000 {
		t.Fatalf("half a second into 40000/s the rate reads %.0f/s", r)
	}
	feed(40000, 2*time.Second)
	if r := s.Rate("k"); math.Abs(r-40000) > 2000 {
		t.Fatalf("after a window of 40000/s the rate reads %.0f/s", r)
	}
	clk.Advance(2500 * time.Millisecond)
	if r := s.Rate("k"); r != 0 {
		t.Fatalf("a silent key reads %.0f/s after a window", r)
	}
	if top := s.Top(0); len(top) != 0 {
		t.Fatalf("Top lists silent keys: %v", top)
	}
	// A long gap (more than the ring) must not leave old counts behind.
	clk.Advance(time.Hour)
	feed(100, 3*time.Second)
	if r := s.Rate("k"); math.Abs(r-100) > 10 {
		t.Fatalf("after an hour's gap 100/s reads %.0f/s", r)
	}
}

// TestSketchEviction checks Space-Saving's replacement and the decay: with
// one shard of 4 counters, a key that was hot long ago gives way to keys
// written now.
func TestSketchEviction(t *testing.T) {
	s, clk := newTestSketch(t, SketchConfig{K: 4, Shards: 1, DecayEvery: time.Second, ClockEvery: 1})
	for range 1000 {
		s.Observe("old", 1)
	}
	for i := range 4 {
		s.Observe(fmt.Sprint("a", i), 1)
	}
	top := s.Top(0)
	if len(top) != 4 || top[0].Key != "old" {
		t.Fatalf("top = %v", top)
	}
	// The fourth new key replaced a count-1 key and inherited its count.
	var inherited bool
	for _, kr := range top {
		if kr.ErrBound == 1 && kr.Count == 2 {
			inherited = true
		}
	}
	if !inherited {
		t.Fatalf("no key inherited a count: %v", top)
	}
	// Twelve seconds of other keys: old's count halves each second until
	// it is the smallest and gets replaced.
	for range 12 {
		clk.Advance(time.Second)
		for i := range 3 {
			s.Observe(fmt.Sprint("b", i), 50)
		}
		s.Observe(fmt.Sprint("b", 3), 1)
	}
	if s.Rate("old") != 0 {
		t.Fatalf("old key still tracked: %v", s.Top(0))
	}
}

// TestSketchRepeatAfterEviction checks the shortcut for a key observed
// again right after itself: when the entry it used now counts another key
// (evicted, taken over), the key is looked up, not counted into the other.
func TestSketchRepeatAfterEviction(t *testing.T) {
	s, _ := newTestSketch(t, SketchConfig{K: 1, Shards: 1, ClockEvery: 1})
	for range 3 {
		s.Observe("a", 1) // the second and third use the shortcut
	}
	s.Observe("b", 1) // takes a's entry over: count 4, bound 3
	s.Observe("a", 1) // takes it back: count 5, bound 4
	s.Observe("a", 1)
	top := s.Top(0)
	if len(top) != 1 || top[0].Key != "a" || top[0].Count != 6 || top[0].ErrBound != 4 {
		t.Fatalf("top = %+v, want a with count 6, bound 4", top)
	}
	if r := s.Rate("b"); r != 0 {
		t.Fatalf("b, taken over, still has rate %v", r)
	}
}

func TestSketchObserveAllocs(t *testing.T) {
	s, _ := newTestSketch(t, SketchConfig{})
	s.Observe("likes:post:42", 1)
	if a := testing.AllocsPerRun(1000, func() { s.Observe("likes:post:42", 1) }); a != 0 {
		t.Fatalf("Observe of a tracked key: %v allocs, want 0", a)
	}
}

func TestSketchConcurrent(t *testing.T) {
	s, clk := newTestSketch(t, SketchConfig{K: 8, Shards: 2})
	var wg sync.WaitGroup
	const workers, per = 4, 2000
	for w := range workers {
		wg.Go(func() {
			for i := range per {
				s.Observe("hot", 2)
				s.Observe(fmt.Sprint("w", w, "-", i%50), 1)
				if i%100 == 0 {
					clk.Advance(time.Millisecond)
					_ = s.Top(3)
				}
			}
		})
	}
	wg.Wait()
	top := s.Top(1)
	if len(top) != 1 || top[0].Key != "hot" || top[0].Count < workers*per*2 {
		t.Fatalf("top = %v, want hot with count >= %d", top, workers*per*2)
	}
}

func BenchmarkObserve(b *testing.B) {
	hot := []string{"likes:post:42"}
	spread := make([]string, 64)
	for i := range spread {
		spread[i] = fmt.Sprintf("likes:post:%d", i)
	}
	tail := make([]string, 100000)
	for i := range tail {
		tail[i] = fmt.Sprintf("views:item:%d", i)
	}
	for _, bc := range []struct {
		name string
		keys []string
	}{{"one-hot-key", hot}, {"64-keys", spread}, {"100k-keys", tail}} {
		b.Run(bc.name, func(b *testing.B) {
			s, err := NewSketch(SketchConfig{})
			if err != nil {
				b.Fatal(err)
			}
			b.ReportAllocs()
			b.RunParallel(func(pb *testing.PB) {
				i := rand.Uint32()
				for pb.Next() {
					i = i*1664525 + 1013904223
					s.Observe(bc.keys[int(i>>8)%len(bc.keys)], 1)
				}
			})
		})
	}
}

// BenchmarkAtomicAdd is the floor Observe is compared with: one shared
// atomic counter.
func BenchmarkAtomicAdd(b *testing.B) {
	var n atomic.Int64
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			n.Add(1)
		}
	})
}

// BenchmarkTimeNow is the clock read every Observe makes.
func BenchmarkTimeNow(b *testing.B) {
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			_ = time.Now()
		}
	})
}

func BenchmarkTop(b *testing.B) {
	s, err := NewSketch(SketchConfig{})
	if err != nil {
		b.Fatal(err)
	}
	for i := range 100000 {
		s.Observe(fmt.Sprint("k", i%3000), 1)
	}
	b.ReportAllocs()
	for b.Loop() {
		_ = s.Top(16)
	}
}
