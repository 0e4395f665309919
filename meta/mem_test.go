package meta_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/meta"
	"github.com/hotcount/hotcount/placement"
	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/mem"
)

var (
	_ meta.Backend = (*mem.Store)(nil)
)

func newMem(t testing.TB, nodes int) *mem.Store {
	t.Helper()
	s, err := mem.New(mem.Config{Nodes: nodes})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newManager(t testing.TB, b meta.Backend, cfg meta.Config) *meta.Manager {
	t.Helper()
	if cfg.DefaultN == nil {
		cfg.DefaultN = func(string) int { return 8 }
	}
	m, err := meta.NewManager(b, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// fill writes values into key's write labels: label i gets base+i.
func fill(t testing.TB, s store.Store, key string, labels []string, base int64) int64 {
	t.Helper()
	var total int64
	for i, l := range labels {
		v := base + int64(i)
		if _, err := s.IncrBy(context.Background(), keyspace.SubKey(key, l), v); err != nil {
			t.Fatal(err)
		}
		total += v
	}
	return total
}

func TestConfigErrors(t *testing.T) {
	s := newMem(t, 3)
	n8 := func(string) int { return 8 }
	for _, cfg := range []meta.Config{{TTL: -1, DefaultN: n8}, {Margin: -1, DefaultN: n8}, {MaxRounds: -1, DefaultN: n8}, {}} {
		if _, err := meta.NewManager(s, cfg); !errors.Is(err, meta.ErrConfig) {
			t.Errorf("NewManager(%+v) = %v, want ErrConfig", cfg, err)
		}
	}
	if _, err := meta.NewManager(nil, meta.Config{}); !errors.Is(err, meta.ErrConfig) {
		t.Errorf("nil backend: %v", err)
	}
	m := newManager(t, s, meta.Config{})
	if m.TTL() != meta.DefaultTTL {
		t.Errorf("TTL = %v", m.TTL())
	}
	ctx := context.Background()
	for _, n := range []int{0, -1, keyspace.MaxN + 1} {
		if err := m.Resize(ctx, "k", n); !errors.Is(err, meta.ErrInvalidN) {
			t.Errorf("Resize(%d) = %v", n, err)
		}
	}
	if err := m.Resize(ctx, "bad{key", 2); !errors.Is(err, keyspace.ErrInvalidKey) {
		t.Errorf("Resize(bad key) = %v", err)
	}
}

func TestDefaultLabelsPinned(t *testing.T) {
	ctx := context.Background()
	s := newMem(t, 3)
	clk := newFakeClock()
	m := newManager(t, s, meta.Config{Clock: clk, DefaultN: func(string) int { return 6 }})
	w, r, err := m.Labels(ctx, "likes:1")
	if err != nil {
		t.Fatal(err)
	}
	topo, _ := s.Topology(ctx)
	if want := placement.Choose(topo, "likes:1", 6, nil); !slices.Equal(w, want) || !slices.Equal(r, want) {
		t.Fatalf("Labels = %v %v, want %v", w, r, want)
	}
	if rep := placement.Report(topo, "likes:1", w, nil); rep.Collisions != 0 || rep.MaxShare != 2.0/6 {
		t.Fatalf("default labels spread badly: %+v", rep)
	}
	data, ok, err := s.GetMeta(ctx, "likes:1")
	if err != nil || !ok {
		t.Fatalf("default not pinned: %v %v", ok, err)
	}
	if want := fmt.Sprintf(`{"epoch":1,"write":["%s"`, w[0]); string(data[:len(want)]) != want {
		t.Fatalf("record = %s", data)
	}

	// A Manager with another DefaultN sees the pinned set.
	m2 := newManager(t, s, meta.Config{Clock: clk, DefaultN: func(string) int { return 2 }})
	if w2, _, _ := m2.Labels(ctx, "likes:1"); !slices.Equal(w2, w) {
		t.Fatalf("second manager sees %v, want pinned %v", w2, w)
	}

	// Naive defaults are not pinned.
	mn := newManager(t, s, meta.Config{Clock: clk, Naive: true, DefaultN: func(string) int { return 3 }})
	if w, _, _ := mn.Labels(ctx, "views:1"); !slices.Equal(w, []string{"0", "1", "2"}) {
		t.Fatalf("naive labels = %v", w)
	}
	if _, ok, _ := s.GetMeta(ctx, "views:1"); ok {
		t.Fatal("naive default was pinned")
	}
}

func TestCacheTTL(t *testing.T) {
	ctx := context.Background()
	s := newMem(t, 3)
	clk := newFakeClock()
	reader := newManager(t, s, meta.Config{Clock: clk, TTL: 2 * time.Second, DefaultN: func(string) int { return 2 }})
	// The changer has its own clock, so its waits do not move the reader's.
	changer := newManager(t, s, meta.Config{Clock: newFakeClock(), TTL: 2 * time.Second})
	w0, _, _ := reader.Labels(ctx, "k")
	if len(w0) != 2 {
		t.Fatalf("labels = %v", w0)
	}
	if err := changer.Resize(ctx, "k", 4); err != nil {
		t.Fatal(err)
	}
	clk.Advance(2*time.Second - time.Nanosecond)
	if w, _, _ := reader.Labels(ctx, "k"); !slices.Equal(w, w0) {
		t.Fatalf("reader saw the change before its TTL ran out: %v", w)
	}
	clk.Advance(time.Nanosecond)
	w1, r1, _ := reader.Labels(ctx, "k")
	if len(w1) != 4 || len(r1) != 4 || !slices.Equal(w1[:2], w0) {
		t.Fatalf("after the TTL: %v %v (before %v)", w1, r1, w0)
	}
	// Forget drops the entry at once.
	if err := changer.Resize(ctx, "k", 5); err != nil {
		t.Fatal(err)
	}
	reader.Forget("k")
	if w, _, _ := reader.Labels(ctx, "k"); len(w) != 5 {
		t.Fatalf("after Forget: %v", w)
	}
}

func TestGrowSteps(t *testing.T) {
	ctx := context.Background()
	s := newMem(t, 5)
	clk := newFakeClock()
	var steps []meta.Step
	var seen []meta.Meta
	m := newManager(t, s, meta.Config{Clock: clk, DefaultN: func(string) int { return 2 }, OnStep: func(key string, st meta.Step) {
		steps = append(steps, st)
		data, _, _ := s.GetMeta(ctx, key)
		seen = append(seen, decodeMeta(t, data))
	}})
	if err := m.Resize(ctx, "k", 5); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(steps, []meta.Step{meta.StepGrowRead, meta.StepGrowWrite}) {
		t.Fatalf("steps = %v", steps)
	}
	if len(seen[0].Read) != 5 || len(seen[0].Write) != 2 {
		t.Fatalf("after step 1: %+v", seen[0])
	}
	if clk.Slept() != meta.DefaultTTL {
		t.Fatalf("slept %v between the steps, want one TTL", clk.Slept())
	}
	mt := settled(t, m, "k", 5)
	topo, _ := s.Topology(ctx)
	if c := placement.Report(topo, "k", mt.Write, nil).Collisions; c != 0 {
		t.Fatalf("grown labels collide: %v", mt.Write)
	}
	if mt.Epoch != 2 {
		t.Fatalf("epoch = %d, want 2 (read, write)", mt.Epoch)
	}
}

func TestShrinkFold(t *testing.T) {
	ctx := context.Background()
	s := newMem(t, 3)
	clk := newFakeClock()
	var steps []meta.Step
	m := newManager(t, s, meta.Config{Clock: clk, DefaultN: func(string) int { return 8 }, OnStep: func(_ string, st meta.Step) {
		steps = append(steps, st)
	}})
	w, _, _ := m.Labels(ctx, "k")
	total := fill(t, s, "k", w, 1000)
	if err := m.Resize(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	mt := settled(t, m, "k", 3)
	if got := sum(t, s, "k", mt.Read); got != total {
		t.Fatalf("total after fold = %d, want %d", got, total)
	}
	if got := sum(t, s, "k", w); got != total {
		t.Fatalf("old labels sum to %d, want %d (value left in retired labels?)", got, total)
	}
	want := []meta.Step{meta.StepStopped, meta.StepWaited}
	for range 5 {
		want = append(want, meta.StepOut, meta.StepIn)
	}
	want = append(want, meta.StepRetired)
	if !slices.Equal(steps, want) {
		t.Fatalf("steps = %v, want %v", steps, want)
	}
	if d := meta.DefaultTTL + meta.DefaultTTL/2; clk.Slept() != d {
		t.Fatalf("slept %v, want TTL+margin %v", clk.Slept(), d)
	}
	topo, _ := s.Topology(ctx)
	if c := placement.Report(topo, "k", mt.Write, nil).Collisions; c != 0 {
		t.Fatalf("kept labels collide: %v", mt.Write)
	}
}

// errCrash stands in for the process dying at a step.
var errCrash = errors.New("crash")

// TestFoldInterrupted stops a fold at every step (and at every occurrence
// of a repeated step) and resumes it with a fresh Manager.
func TestFoldInterrupted(t *testing.T) {
	steps := []meta.Step{meta.StepStopped, meta.StepWaited, meta.StepOut, meta.StepIn, meta.StepRetired}
	for _, step := range steps {
		for nth := 1; nth <= 3; nth++ {
			t.Run(fmt.Sprintf("%s#%d", step, nth), func(t *testing.T) {
				ctx := context.Background()
				s := newMem(t, 3)
				clk := newFakeClock()
				cfg := meta.Config{Clock: clk, DefaultN: func(string) int { return 6 }}
				crashing := cfg
				seen := 0
				crashing.OnStep = func(_ string, st meta.Step) {
					if st == step {
						if seen++; seen == nth {
							panic(errCrash)
						}
					}
				}
				m := newManager(t, s, crashing)
				w, _, _ := m.Labels(ctx, "k")
				total := fill(t, s, "k", w, 7)
				crashed := func() (crashed bool) {
					defer func() {
						if r := recover(); r != nil {
							if r != errCrash {
								panic(r)
							}
							crashed = true
						}
					}()
					if err := m.Resize(ctx, "k", 2); err != nil {
						t.Fatal(err)
					}
					return false
				}()
				if !crashed && (step == meta.StepStopped || step == meta.StepWaited || step == meta.StepRetired) && nth == 1 {
					t.Fatalf("no crash at %s", step)
				}
				again := newManager(t, s, cfg)
				if err := again.Resume(ctx, "k"); err != nil {
					t.Fatal(err)
				}
				mt := settled(t, again, "k", 2)
				if got := sum(t, s, "k", mt.Read); got != total {
					t.Fatalf("total after resume = %d, want %d", got, total)
				}
			})
		}
	}
}

func TestFoldStragglers(t *testing.T) {
	ctx := context.Background()
	s := newMem(t, 3)
	clk := newFakeClock()
	var m *meta.Manager
	late := 0
	var folded []string
	m = newManager(t, s, meta.Config{Clock: clk, DefaultN: func(string) int { return 3 }, OnStep: func(key string, st meta.Step) {
		if st == meta.StepStopped {
			mt, _ := m.Meta(ctx, key)
			for _, f := range mt.Folds {
				folded = append(folded, f.From)
			}
		}
		// A write still in flight lands on the folded label after each of
		// the first two fold-outs.
		if st == meta.StepOut && late < 2 {
			late++
			if _, err := s.IncrBy(ctx, keyspace.SubKey(key, folded[0]), 100); err != nil {
				t.Error(err)
			}
		}
	}})
	w, _, _ := m.Labels(ctx, "k")
	total := fill(t, s, "k", w, 1) + 200
	if err := m.Resize(ctx, "k", 2); err != nil {
		t.Fatal(err)
	}
	mt := settled(t, m, "k", 2)
	if got := sum(t, s, "k", mt.Read); got != total {
		t.Fatalf("total = %d, want %d", got, total)
	}
	// Round markers: id, id.2, id.3.
	var markers int
	for _, k := range s.Keys() {
		if strings.Contains(k, ":fold:") || strings.Contains(k, ":foldin:") {
			markers++
		}
	}
	if markers != 6 {
		t.Fatalf("%d fold markers, want 6 (3 rounds × out+in): %v", markers, s.Keys())
	}
}

func TestFoldTooManyStragglers(t *testing.T) {
	ctx := context.Background()
	s := newMem(t, 3)
	var folded string
	var m *meta.Manager
	busy := true
	m = newManager(t, s, meta.Config{Clock: newFakeClock(), MaxRounds: 2, DefaultN: func(string) int { return 2 }, OnStep: func(key string, st meta.Step) {
		if st == meta.StepStopped {
			mt, _ := m.Meta(ctx, key)
			folded = mt.Folds[0].From
		}
		if st == meta.StepIn && busy {
			s.IncrBy(ctx, keyspace.SubKey(key, folded), 1)
		}
	}})
	w, _, _ := m.Labels(ctx, "k")
	total := fill(t, s, "k", w, 5) + 2
	if err := m.Resize(ctx, "k", 1); !errors.Is(err, meta.ErrStragglers) {
		t.Fatalf("Resize = %v, want ErrStragglers", err)
	}
	busy = false
	if err := m.Resume(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	mt := settled(t, m, "k", 1)
	if got := sum(t, s, "k", mt.Read); got != total {
		t.Fatalf("total = %d, want %d", got, total)
	}
}

func TestConcurrentResume(t *testing.T) {
	ctx := context.Background()
	s := newMem(t, 3)
	cfg := meta.Config{Clock: newFakeClock(), DefaultN: func(string) int { return 8 }}
	crashing := cfg
	crashing.OnStep = func(_ string, st meta.Step) {
		if st == meta.StepStopped {
			panic(errCrash)
		}
	}
	m := newManager(t, s, crashing)
	w, _, _ := m.Labels(ctx, "k")
	total := fill(t, s, "k", w, 3)
	func() {
		defer func() { recover() }()
		m.Resize(ctx, "k", 2)
	}()
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for i := range errs {
		wg.Go(func() { errs[i] = newManager(t, s, cfg).Resume(ctx, "k") })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	mt := settled(t, newManager(t, s, cfg), "k", 2)
	if got := sum(t, s, "k", mt.Read); got != total {
		t.Fatalf("total after concurrent resumes = %d, want %d", got, total)
	}
}

func TestConcurrentWritersMem(t *testing.T) {
	ctx := context.Background()
	s := newMem(t, 3)
	// Real clock: the writers are real goroutines. The margin covers a
	// writer descheduled between Labels and IncrBy (see Config.Margin).
	m := newManager(t, s, meta.Config{TTL: 20 * time.Millisecond, Margin: 200 * time.Millisecond, DefaultN: func(string) int { return 4 }})
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var mu sync.Mutex
	var acked int64
	for g := range 8 {
		wg.Go(func() {
			var n int64
			defer func() { mu.Lock(); acked += n; mu.Unlock() }()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				w, _, err := m.Labels(ctx, "k")
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := s.IncrBy(ctx, keyspace.SubKey("k", w[(g+i)%len(w)]), 1); err != nil {
					t.Error(err)
					return
				}
				n++
			}
		})
	}
	for _, n := range []int{8, 3, 6, 1} {
		if err := m.Resize(ctx, "k", n); err != nil {
			t.Fatal(err)
		}
	}
	close(stop)
	wg.Wait()
	mt := settled(t, m, "k", 1)
	if got := sum(t, s, "k", mt.Read); got != acked {
		t.Fatalf("total = %d, acknowledged %d; all sub-keys hold %d", got, acked, allSubKeys(t, s, "k"))
	}
}

// allSubKeys sums every sub-key of key the embedded store holds.
func allSubKeys(t testing.TB, s *mem.Store, key string) int64 {
	var labels []string
	for _, k := range s.Keys() {
		if kk, l, ok := keyspace.ParseSubKey(k); ok && kk == key {
			labels = append(labels, l)
		}
	}
	return sum(t, s, key, labels)
}

func TestDurableMirror(t *testing.T) {
	ctx := context.Background()
	d := &fakeDurable{}
	s := newMem(t, 3)
	cfg := meta.Config{Clock: newFakeClock(), Durable: d, DefaultN: func(string) int { return 3 }}
	m := newManager(t, s, cfg)
	if err := m.Resize(ctx, "k", 5); err != nil {
		t.Fatal(err)
	}
	want, _, _ := s.GetMeta(ctx, "k")
	if got, _ := d.LoadMeta(ctx, "k"); string(got) != string(want) {
		t.Fatalf("durable copy %s, cache %s", got, want)
	}
	// The cache is lost: the record comes back from the durable store.
	fresh := newMem(t, 3)
	m2 := newManager(t, fresh, cfg)
	w, r, err := m2.Labels(ctx, "k")
	if err != nil {
		t.Fatal(err)
	}
	mt := decodeMeta(t, want)
	if !slices.Equal(w, mt.Write) || !slices.Equal(r, mt.Read) {
		t.Fatalf("restored %v %v, want %+v", w, r, mt)
	}
	if got, ok, _ := fresh.GetMeta(ctx, "k"); !ok || string(got) != string(want) {
		t.Fatalf("record not restored into the cache: %s", got)
	}
}

func TestCorruptRecord(t *testing.T) {
	ctx := context.Background()
	s := newMem(t, 3)
	m := newManager(t, s, meta.Config{Clock: newFakeClock()})
	for i, rec := range []string{`garbage`, `{"epoch":2,"write":["x"],"read":[]}`, `{"epoch":2,"write":[],"read":[]}`} {
		key := fmt.Sprint("bad", i)
		if ok, err := s.CASMeta(ctx, key, 0, []byte(rec)); !ok || err != nil {
			t.Fatalf("CAS: %v %v", ok, err)
		}
		if _, _, err := m.Labels(ctx, key); !errors.Is(err, meta.ErrCorrupt) {
			t.Errorf("Labels(%s) = %v, want ErrCorrupt", rec, err)
		}
	}
}

func TestMemCAS(t *testing.T) {
	ctx := context.Background()
	s := newMem(t, 3)
	if ok, _ := s.CASMeta(ctx, "k", 1, []byte(`{"epoch":2}`)); ok {
		t.Fatal("CAS on a missing record with epoch 1 succeeded")
	}
	if ok, _ := s.CASMeta(ctx, "k", 0, []byte(`{"epoch":1}`)); !ok {
		t.Fatal("CAS creating the record failed")
	}
	if ok, _ := s.CASMeta(ctx, "k", 0, []byte(`{"epoch":1}`)); ok {
		t.Fatal("second create succeeded")
	}
	if ok, _ := s.CASMeta(ctx, "k", 1, []byte(`{"epoch":2}`)); !ok {
		t.Fatal("CAS 1→2 failed")
	}
	if data, ok, _ := s.GetMeta(ctx, "k"); !ok || string(data) != `{"epoch":2}` {
		t.Fatalf("GetMeta = %s %v", data, ok)
	}
}

// TestRebalanceMem moves a slot in the topology the Manager sees and checks
// that Rebalance restores distinct primaries without changing the total.
func TestRebalanceMem(t *testing.T) {
	ctx := context.Background()
	s := newMem(t, 3)
	base, _ := s.Topology(ctx)
	var mu sync.Mutex
	topo := base
	cfg := meta.Config{Clock: newFakeClock(), DefaultN: func(string) int { return 3 }, Topology: func(context.Context) (*store.Topology, error) {
		mu.Lock()
		defer mu.Unlock()
		return topo, nil
	}}
	m := newManager(t, s, cfg)
	w, _, _ := m.Labels(ctx, "k")
	total := fill(t, s, "k", w, 10)
	if c, _ := m.Collisions(ctx, "k"); c != 0 {
		t.Fatalf("collisions before migration: %d", c)
	}
	if changed, err := m.Rebalance(ctx, "k"); err != nil || changed {
		t.Fatalf("Rebalance without collisions = %v, %v", changed, err)
	}
	// Migrate the slot of w[0] to the primary of w[1].
	moved := *base
	moved.Owner[keyspace.Slot(keyspace.SubKey("k", w[0]))] = base.Owner[keyspace.Slot(keyspace.SubKey("k", w[1]))]
	moved.Epoch++
	mu.Lock()
	topo = &moved
	mu.Unlock()
	if c, _ := m.Collisions(ctx, "k"); c != 1 {
		t.Fatalf("collisions after migration: %d, want 1", c)
	}
	rep, err := m.Shards(ctx, "k")
	if err != nil || rep.Collisions != 1 || rep.Value != total || rep.DistinctNodes != 2 {
		t.Fatalf("Shards = %+v, %v", rep, err)
	}
	if changed, err := m.Rebalance(ctx, "k"); err != nil || !changed {
		t.Fatalf("Rebalance = %v, %v", changed, err)
	}
	if c, _ := m.Collisions(ctx, "k"); c != 0 {
		t.Fatalf("collisions after Rebalance: %d", c)
	}
	mt := settled(t, m, "k", 3)
	if got := sum(t, s, "k", mt.Read); got != total {
		t.Fatalf("total after Rebalance = %d, want %d", got, total)
	}
}

func TestLabelsCachedAllocs(t *testing.T) {
	ctx := context.Background()
	m := newManager(t, newMem(t, 3), meta.Config{Clock: newFakeClock()})
	if _, _, err := m.Labels(ctx, "k"); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { m.Labels(ctx, "k") }); n != 0 {
		t.Fatalf("cached Labels allocates %v times", n)
	}
}

func BenchmarkLabelsCached(b *testing.B) {
	ctx := context.Background()
	m := newManager(b, newMem(b, 3), meta.Config{TTL: time.Hour})
	m.Labels(ctx, "k")
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Labels(ctx, "k")
		}
	})
}
