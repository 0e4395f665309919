package hotcount_test

import (
	"context"
	"errors"
	"math"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/mem"
)

// backend is one store the shared tests run against.
type backend struct {
	name string
	open func(t *testing.T) store.Store
	// raw reads keys with a plain client, bypassing the Client.
	raw func(t *testing.T, keys []string) []int64
}

func embeddedBackend() backend {
	var last *mem.Store
	return backend{
		name: "embedded",
		open: func(t *testing.T) store.Store {
			s, err := mem.New(mem.Config{Nodes: 3})
			if err != nil {
				t.Fatal(err)
			}
			last = s
			return s
		},
		raw: func(t *testing.T, keys []string) []int64 {
			v, err := last.Get(context.Background(), keys)
			if err != nil {
				t.Fatal(err)
			}
			return v
		},
	}
}

// allBackends lists the embedded store and, when the test cluster is up,
// the Redis Cluster.
func allBackends() []backend {
	out := []backend{embeddedBackend()}
	out = append(out, clusterBackends()...)
	return out
}

func newClient(t *testing.T, st store.Store, cfg hotcount.Config) *hotcount.Client {
	t.Helper()
	cfg.Store = st
	c, err := hotcount.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close(context.Background()) })
	return c
}

func uniqueKey(t *testing.T) string {
	return "test:" + strings.ReplaceAll(t.Name(), "/", ":") + ":" + time.Now().Format("150405.000000000")
}

func TestExactTotalConcurrent(t *testing.T) {
	for _, b := range allBackends() {
		t.Run(b.name, func(t *testing.T) {
			clk := clock.NewFake()
			c := newClient(t, b.open(t), hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 8}, Timeout: 30 * time.Second, Clock: clk})
			ctx := context.Background()
			key := uniqueKey(t)
			const workers, per = 64, 10000
			var want atomic.Int64
			var wg sync.WaitGroup
			errs := make(chan error, workers)
			for w := range workers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					var local int64
					for i := range per {
						d := int64((w*per+i)%7 - 3) // -3..3, mixed signs
						if d == 0 {
							d = 5
						}
						if err := c.Incr(ctx, key, d); err != nil {
							errs <- err
							return
						}
						local += d
					}
					want.Add(local)
				}()
			}
			wg.Wait()
			close(errs)
			for err := range errs {
				t.Fatal(err)
			}
			clk.Advance(2 * hotcount.DefaultReadCacheTTL)
			r, err := c.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if r.Value != want.Load() || r.Stale != 0 || r.N != 8 {
				t.Fatalf("Get = %+v, want value %d, fresh, N 8", r, want.Load())
			}
			sub, _ := c.SubKeys(context.Background(), key)
			var rawSum int64
			for _, v := range b.raw(t, sub) {
				rawSum += v
			}
			if rawSum != want.Load() {
				t.Fatalf("raw sub-keys sum to %d, want %d", rawSum, want.Load())
			}
		})
	}
}

func TestUniformChoice(t *testing.T) {
	for _, b := range allBackends() {
		t.Run(b.name, func(t *testing.T) {
			c := newClient(t, b.open(t), hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 8}})
			ctx := context.Background()
			key := uniqueKey(t)
			const total = 80000
			var wg sync.WaitGroup
			for w := range 8 {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for range total / 8 {
						if err := c.Incr(ctx, key, 1); err != nil {
							t.Error(err)
							return
						}
					}
					_ = w
				}()
			}
			wg.Wait()
			sub, _ := c.SubKeys(context.Background(), key)
			vals := b.raw(t, sub)
			for i, v := range vals {
				share := float64(v) / total
				if math.Abs(share-1.0/8) > 0.02 {
					t.Errorf("sub-counter %s got share %.4f of %d, want 0.125 ± 0.02", sub[i], share, total)
				}
			}
			t.Logf("sub-counter counts: %v", vals)
		})
	}
}

func TestReadCostEmbedded(t *testing.T) {
	clk := clock.NewFake()
	st, _ := mem.New(mem.Config{Nodes: 3})
	c := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 8}, Clock: clk})
	ctx := context.Background()
	key := "likes:post:42"
	for range 100 {
		if err := c.Incr(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
	}
	sub, _ := c.SubKeys(context.Background(), key)
	topo, _ := st.Topology(ctx)
	perNode := map[string]int64{}
	for _, k := range sub {
		perNode[topo.NodeOf(k)]++
	}
	before := st.Stats()
	r, err := c.Get(ctx, key)
	if err != nil || r.Value != 100 {
		t.Fatalf("Get = %+v, %v", r, err)
	}
	after := st.Stats()
	for node, s := range after {
		gets := s.Commands["get"] - before[node].Commands["get"]
		rounds := s.Rounds - before[node].Rounds
		if gets != perNode[node] {
			t.Errorf("node %s: %d GETs, want %d", node, gets, perNode[node])
		}
		wantRounds := int64(0)
		if perNode[node] > 0 {
			wantRounds = 1
		}
		if rounds != wantRounds {
			t.Errorf("node %s: %d rounds, want %d", node, rounds, wantRounds)
		}
	}
	// Within the TTL, reads are served from memory: nothing is sent.
	before = st.Stats()
	for range 50 {
		clk.Advance(10 * time.Millisecond)
		r, err := c.Get(ctx, key)
		if err != nil || r.Value != 100 || r.Stale <= 0 {
			t.Fatalf("cached Get = %+v, %v", r, err)
		}
	}
	after = st.Stats()
	for node, s := range after {
		if s.Rounds != before[node].Rounds {
			t.Errorf("node %s served %d rounds for cached reads", node, s.Rounds-before[node].Rounds)
		}
	}
}

func TestStalenessAndReadYourWrites(t *testing.T) {
	clk := clock.NewFake()
	st, _ := mem.New(mem.Config{})
	c := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{ReadCacheTTL: 500 * time.Millisecond}, Clock: clk})
	ctx := context.Background()
	if err := c.Incr(ctx, "k", 3); err != nil {
		t.Fatal(err)
	}
	r, _ := c.Get(ctx, "k")
	if r.Value != 3 || r.Stale != 0 {
		t.Fatalf("fresh read %+v", r)
	}
	clk.Advance(200 * time.Millisecond)
	if err := c.Incr(ctx, "k", 4); err != nil {
		t.Fatal(err)
	}
	// another writer, not this process:
	w, _, _ := c.Labels(ctx, "k")
	if _, err := st.IncrBy(ctx, keyspace.SubKey("k", w[0]), 100); err != nil {
		t.Fatal(err)
	}
	r, _ = c.Get(ctx, "k")
	if r.Value != 7 || r.Stale != 200*time.Millisecond {
		t.Fatalf("cached read %+v, want 7 (own writes) stale 200ms", r)
	}
	clk.Advance(300 * time.Millisecond)
	r, _ = c.Get(ctx, "k")
	if r.Value != 107 || r.Stale != 0 {
		t.Fatalf("read after TTL %+v, want 107 fresh", r)
	}
}

func TestNoReadCache(t *testing.T) {
	st, _ := mem.New(mem.Config{})
	c := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 2}, Reads: hotcount.ReadConfig{NoCache: true}})
	ctx := context.Background()
	_ = c.Incr(ctx, "k", 1)
	for i := range 5 {
		before := st.Stats()
		if _, err := c.Get(ctx, "k"); err != nil {
			t.Fatal(err)
		}
		var rounds int64
		for n, s := range st.Stats() {
			rounds += s.Rounds - before[n].Rounds
		}
		if rounds == 0 {
			t.Fatalf("read %d sent nothing with the cache off", i)
		}
	}
}

func TestSingleFlight(t *testing.T) {
	st, _ := mem.New(mem.Config{Nodes: 3})
	gate := &gatedStore{Store: st, gate: make(chan struct{})}
	c := newClient(t, gate, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 8}})
	ctx := context.Background()
	_ = c.Incr(ctx, "k", 9)
	var wg sync.WaitGroup
	for range 100 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if r, err := c.Get(ctx, "k"); err != nil || r.Value != 9 {
				t.Errorf("Get = %+v, %v", r, err)
			}
		}()
	}
	for gate.waiting.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond) // let the other readers pile up on the flight
	close(gate.gate)
	wg.Wait()
	if n := gate.gets.Load(); n != 1 {
		t.Fatalf("100 concurrent reads sent %d Get batches, want 1", n)
	}
}

// gatedStore holds Get calls until gate is closed and counts them.
type gatedStore struct {
	store.Store
	gate    chan struct{}
	waiting atomic.Int32
	gets    atomic.Int32
}

func (g *gatedStore) Get(ctx context.Context, keys []string) ([]int64, error) {
	g.gets.Add(1)
	g.waiting.Add(1)
	<-g.gate
	return g.Store.Get(ctx, keys)
}

// TestGetMultiOneRoundPerNode: a batch read of counters this process has
// not read before costs one round per node for their label sets and one
// for their values.
func TestGetMultiOneRoundPerNode(t *testing.T) {
	st, _ := mem.New(mem.Config{Nodes: 3})
	writer := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 8}})
	ctx := context.Background()
	keys := []string{"a", "b", "c", "d", "e", "f", "g", "h", "i", "j"}
	for i, k := range keys {
		if err := writer.Incr(ctx, k, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	// Each node is asked once for the records it holds and once for the
	// sub-counters it holds.
	topo, _ := st.Topology(ctx)
	want := map[string]int64{}
	metaNodes, valueNodes := map[string]bool{}, map[string]bool{}
	for _, k := range keys {
		metaNodes[topo.NodeOf(keyspace.MetaKey(k))] = true
		subs, err := writer.SubKeys(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		for _, sk := range subs {
			valueNodes[topo.NodeOf(sk)] = true
		}
	}
	for n := range metaNodes {
		want[n]++
	}
	for n := range valueNodes {
		want[n]++
	}
	c := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 8}, Reads: hotcount.ReadConfig{NoCache: true}})
	before := st.Stats()
	got, err := c.GetMulti(ctx, append(keys, "a"))
	if err != nil {
		t.Fatal(err)
	}
	for i, k := range keys {
		if got[k].Value != int64(i+1) {
			t.Errorf("%s = %d, want %d", k, got[k].Value, i+1)
		}
	}
	for n, s := range st.Stats() {
		if r := s.Rounds - before[n].Rounds; r != want[n] {
			t.Errorf("node %s: %d rounds for GetMulti, want %d (one per kind of key it holds: label sets, values)", n, r, want[n])
		}
	}
	// Label sets are cached now: one round per node for the values.
	before = st.Stats()
	if _, err := c.GetMulti(ctx, keys); err != nil {
		t.Fatal(err)
	}
	for n, s := range st.Stats() {
		if r := s.Rounds - before[n].Rounds; r != 1 {
			t.Errorf("node %s: %d rounds for a second GetMulti, want 1", n, r)
		}
	}
	if _, err := c.GetMulti(ctx, []string{"ok", "bad{"}); !errors.Is(err, hotcount.ErrInvalidKey) {
		t.Fatalf("GetMulti with a bad key: %v", err)
	}
}

func TestClear(t *testing.T) {
	for _, b := range allBackends() {
		t.Run(b.name, func(t *testing.T) {
			c := newClient(t, b.open(t), hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 4}})
			ctx := context.Background()
			key := uniqueKey(t)
			for range 20 {
				_ = c.Incr(ctx, key, 2)
			}
			if err := c.Clear(ctx, key); err != nil {
				t.Fatal(err)
			}
			if err := c.Clear(ctx, key); err != nil {
				t.Fatalf("second Clear: %v", err)
			}
			r, err := c.Get(ctx, key)
			if err != nil || r.Value != 0 {
				t.Fatalf("after Clear: %+v %v", r, err)
			}
			sub, _ := c.SubKeys(context.Background(), key)
			for i, v := range b.raw(t, sub) {
				if v != 0 {
					t.Errorf("%s still holds %d", sub[i], v)
				}
			}
		})
	}
}

func TestBadInput(t *testing.T) {
	long := strings.Repeat("k", keyspace.MaxKeyLen+1)
	cases := []struct {
		name  string
		key   string
		delta int64
		want  error
	}{
		{"empty key", "", 1, hotcount.ErrInvalidKey},
		{"key too long", long, 1, hotcount.ErrInvalidKey},
		{"invalid utf8", "a\xffb", 1, hotcount.ErrInvalidKey},
		{"NUL", "a\x00b", 1, hotcount.ErrInvalidKey},
		{"newline", "a\nb", 1, hotcount.ErrInvalidKey},
		{"DEL char", "a\x7fb", 1, hotcount.ErrInvalidKey},
		{"C1 control", "a\u0085b", 1, hotcount.ErrInvalidKey},
		{"open brace", "a{b", 1, hotcount.ErrInvalidKey},
		{"close brace", "a}b", 1, hotcount.ErrInvalidKey},
		{"hash tag", "{user}", 1, hotcount.ErrInvalidKey},
		{"zero delta", "ok", 0, hotcount.ErrZeroDelta},
	}
	for _, b := range allBackends() {
		t.Run(b.name, func(t *testing.T) {
			st := b.open(t)
			c := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 4}})
			ctx := context.Background()
			for _, tc := range cases {
				t.Run(tc.name, func(t *testing.T) {
					err := c.Incr(ctx, tc.key, tc.delta)
					if !errors.Is(err, tc.want) {
						t.Fatalf("Incr(%q, %d) = %v, want %v", tc.key, tc.delta, err, tc.want)
					}
					if tc.want == hotcount.ErrInvalidKey {
						if _, err := c.Get(ctx, tc.key); !errors.Is(err, tc.want) {
							t.Errorf("Get: %v", err)
						}
						if err := c.Clear(ctx, tc.key); !errors.Is(err, tc.want) {
							t.Errorf("Clear: %v", err)
						}
						return
					}
					if r, err := c.Get(ctx, tc.key); err != nil || r.Value != 0 {
						t.Errorf("value changed: %+v %v", r, err)
					}
				})
			}
		})
	}
}

func TestSumOverflowIsReported(t *testing.T) {
	st, _ := mem.New(mem.Config{})
	c := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 2}, Reads: hotcount.ReadConfig{NoCache: true}})
	ctx := context.Background()
	_, read, _ := c.Labels(ctx, "k")
	for _, l := range read {
		if _, err := st.IncrBy(ctx, keyspace.SubKey("k", l), math.MaxInt64); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := c.Get(ctx, "k"); !errors.Is(err, hotcount.ErrOverflow) {
		t.Fatalf("Get of an overflowing sum: %v", err)
	}
}

func TestNamespaces(t *testing.T) {
	c := newClient(t, mustMem(t), hotcount.Config{
		Defaults: hotcount.Namespace{NoColdStart: true, N: 4},
		Namespaces: []hotcount.Namespace{
			{Prefix: "likes:", N: 16, NoColdStart: true},
			{Prefix: "likes:post:", N: 32, NoColdStart: true},
			{Prefix: "views:", NoColdStart: true},
			{Prefix: "cold:"},
		},
	})
	for key, want := range map[string]int{"likes:user:1": 16, "likes:post:1": 32, "views:x": 4, "other": 4, "cold:1": 1} {
		w, _, _ := c.Labels(context.Background(), key)
		if got := len(w); got != want {
			t.Errorf("%s: N = %d, want %d", key, got, want)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	cases := []struct {
		name string
		cfg  hotcount.Config
	}{
		{"negative N", hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: -1}}},
		{"huge N", hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: keyspace.MaxN + 1}}},
		{"negative TTL", hotcount.Config{Defaults: hotcount.Namespace{ReadCacheTTL: -time.Second}}},
		{"negative timeout", hotcount.Config{Timeout: -1}},
		{"bad redis address", hotcount.Config{Redis: hotcount.RedisConfig{Addrs: []string{"nohost"}}}},
		{"empty prefix", hotcount.Config{Namespaces: []hotcount.Namespace{{Prefix: ""}}}},
		{"duplicate prefix", hotcount.Config{Namespaces: []hotcount.Namespace{{Prefix: "a"}, {Prefix: "a"}}}},
		{"brace in prefix", hotcount.Config{Namespaces: []hotcount.Namespace{{Prefix: "{tenant}:"}}}},
		{"control character in prefix", hotcount.Config{Namespaces: []hotcount.Namespace{{Prefix: "a\tb:"}}}},
		{"prefix past the key limit", hotcount.Config{Namespaces: []hotcount.Namespace{{Prefix: strings.Repeat("p", keyspace.MaxKeyLen+1)}}}},
		{"namespace N", hotcount.Config{Namespaces: []hotcount.Namespace{{Prefix: "a", N: -2}}}},
		{"embedded nodes", hotcount.Config{Embedded: hotcount.EmbeddedConfig{Nodes: -1}}},
		{"negative flush delay", hotcount.Config{Redis: hotcount.RedisConfig{Addrs: []string{"127.0.0.1:1"}, FlushDelay: -1}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := hotcount.New(context.Background(), tc.cfg); !errors.Is(err, hotcount.ErrConfig) {
				t.Fatalf("New = %v, want ErrConfig", err)
			}
		})
	}
}

func TestConfigNotMutated(t *testing.T) {
	ns := []hotcount.Namespace{{Prefix: "b:", N: 0}, {Prefix: "a:", N: 3}}
	cfg := hotcount.Config{Namespaces: ns}
	c, err := hotcount.New(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(context.Background())
	if cfg.Defaults.N != 0 || ns[0].Prefix != "b:" || ns[0].N != 0 || cfg.Defaults.ReadCacheTTL != 0 {
		t.Fatalf("caller's config was modified: %+v", cfg)
	}
}

func TestClosed(t *testing.T) {
	c, err := hotcount.New(context.Background(), hotcount.Config{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := c.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if err := c.Incr(ctx, "k", 1); !errors.Is(err, hotcount.ErrClosed) {
		t.Errorf("Incr after Close: %v", err)
	}
	if _, err := c.Get(ctx, "k"); !errors.Is(err, hotcount.ErrClosed) {
		t.Errorf("Get after Close: %v", err)
	}
}

func mustMem(t *testing.T) *mem.Store {
	s, err := mem.New(mem.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestNamespaceReadCacheTTL(t *testing.T) {
	clk := clock.NewFake()
	st := mustMem(t)
	c := newClient(t, st, hotcount.Config{
		Defaults:   hotcount.Namespace{ReadCacheTTL: time.Second},
		Namespaces: []hotcount.Namespace{{Prefix: "live:", ReadCacheTTL: 100 * time.Millisecond}},
		Clock:      clk,
	})
	ctx := context.Background()
	for _, k := range []string{"live:score", "likes:1"} {
		if _, err := c.Get(ctx, k); err != nil { // cache 0
			t.Fatal(err)
		}
		w, _, _ := c.Labels(ctx, k)
		if _, err := st.IncrBy(ctx, keyspace.SubKey(k, w[0]), 5); err != nil { // another process
			t.Fatal(err)
		}
	}
	clk.Advance(200 * time.Millisecond)
	if r, _ := c.Get(ctx, "live:score"); r.Value != 5 {
		t.Errorf("live: namespace (100 ms TTL) read %d after 200 ms, want the fresh 5", r.Value)
	}
	if r, _ := c.Get(ctx, "likes:1"); r.Value != 0 || r.Stale != 200*time.Millisecond {
		t.Errorf("default namespace (1 s TTL) read %+v after 200 ms, want the cached 0", r)
	}
}

// startWriters runs n goroutines that increment key by 1 until the returned
// stop is called; each sleeps 1 ms after every `every` increments (the point
// is concurrency, not volume). stop waits for them and returns how many
// increments were acknowledged.
func startWriters(t *testing.T, c *hotcount.Client, key string, n, every int) (stop func() int64) {
	t.Helper()
	var sent atomic.Int64
	done := make(chan struct{})
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 1; ; i++ {
				select {
				case <-done:
					return
				default:
				}
				if err := c.Incr(context.Background(), key, 1); err != nil {
					t.Error(err)
					return
				}
				sent.Add(1)
				if i%every == 0 {
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	return func() int64 {
		close(done)
		wg.Wait()
		return sent.Load()
	}
}
