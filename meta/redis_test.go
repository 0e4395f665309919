package meta_test

import (
	"context"
	"errors"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/meta"
	"github.com/hotcount/hotcount/placement"
	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/redis"
)

var _ meta.Backend = (*redis.Store)(nil)

// cluster is the shared 3-primary cluster (one replica each) of this
// package's tests; nil in a fold child process, which gets the seeds from
// the environment instead.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(m.Run())
	}
	os.Exit(testenv.Main(m, testenv.ClusterOptions{Primaries: 3, Replicas: 1}, &cluster))
}

func seeds() []string {
	if s := os.Getenv(seedsEnv); s != "" {
		return strings.Fields(s)
	}
	return cluster.Seeds()
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// newRedis connects to the cluster; in the parent process it first empties
// it, so that every test (and every -count run) starts clean.
func newRedis(t testing.TB) *redis.Store {
	t.Helper()
	if cluster != nil {
		if err := cluster.FlushAll(ctxT(t)); err != nil {
			t.Fatal(err)
		}
	}
	s, err := redis.New(ctxT(t), redis.Config{Addrs: seeds()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// incrbyCalls returns INCRBY calls per primary of topo.
func incrbyCalls(t testing.TB, ctx context.Context, topo *store.Topology) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, n := range topo.Nodes {
		st, err := testenv.CommandStats(ctx, n)
		if err != nil {
			t.Fatalf("INFO commandstats on %s: %v", n, err)
		}
		out[n] = st["incrby"]
	}
	return out
}

// shares sends incrs single increments to uniformly random labels of key
// (pipelined in batches) and returns each primary's share of the INCRBY
// calls, measured on the servers.
func shares(t *testing.T, ctx context.Context, s *redis.Store, key string, labels []string, incrs int) map[string]float64 {
	t.Helper()
	topo, _ := s.Topology(ctx)
	before := incrbyCalls(t, ctx, topo)
	rng := rand.New(rand.NewPCG(uint64(len(labels)), 42))
	const batch = 1000
	for sent := 0; sent < incrs; sent += batch {
		ops := make([]store.IncrOp, min(batch, incrs-sent))
		for i := range ops {
			ops[i] = store.IncrOp{Key: keyspace.SubKey(key, labels[rng.IntN(len(labels))]), Delta: 1}
		}
		res, err := s.IncrMulti(ctx, ops)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range res {
			if r.Err != nil {
				t.Fatal(r.Err)
			}
		}
	}
	after := incrbyCalls(t, ctx, topo)
	out := map[string]float64{}
	var total int64
	for n := range after {
		total += after[n] - before[n]
	}
	if total != int64(incrs) {
		t.Fatalf("primaries counted %d INCRBY calls, sent %d", total, incrs)
	}
	for n := range after {
		out[n] = float64(after[n]-before[n]) / float64(incrs)
	}
	if got := sum(t, s, key, labels); got != int64(incrs) {
		t.Fatalf("%q sums to %d, want %d", key, got, incrs)
	}
	return out
}

func maxShare(sh map[string]float64) float64 {
	m := 0.0
	for _, v := range sh {
		m = max(m, v)
	}
	return m
}

// TestPlacedShares measures the write share of each primary with placed
// labels, from the servers' own command counts.
func TestPlacedShares(t *testing.T) {
	ctx := ctxT(t)
	s := newRedis(t)
	topo, _ := s.Topology(ctx)
	if len(topo.Nodes) != 3 {
		t.Fatalf("%d primaries, want 3", len(topo.Nodes))
	}
	const incrs = 60_000
	for _, n := range []int{6, 8} {
		key := "shares:" + string(rune('0'+n))
		m := newManager(t, s, meta.Config{DefaultN: func(string) int { return n }})
		w, _, err := m.Labels(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		rep := placement.Report(topo, key, w, nil)
		for _, ns := range rep.Nodes {
			if want := (n + 2) / 3; n == 6 && ns.SubCounters != 2 || ns.SubCounters > want {
				t.Fatalf("N=%d: %s holds %d sub-counters (%v)", n, ns.Node, ns.SubCounters, w)
			}
		}
		placed := shares(t, ctx, s, key, w, incrs)
		naive := shares(t, ctx, s, key+":naive", keyspace.NaiveLabels(n), incrs)
		t.Logf("N=%d on 3 primaries, %d increments: placed labels %v → shares %v (max %.4f); naive labels → shares %v (max %.4f)",
			n, incrs, w, fmtShares(placed), maxShare(placed), fmtShares(naive), maxShare(naive))
		switch n {
		case 6:
			for node, sh := range placed {
				if sh < 1.0/3-0.03 || sh > 1.0/3+0.03 {
					t.Errorf("N=6: %s took %.4f of the writes, want 1/3 ± 0.03", node, sh)
				}
			}
		case 8:
			if mx := maxShare(placed); mx > 3.0/8+0.03 {
				t.Errorf("N=8: largest share %.4f, want ≤ 3/8 + 0.03", mx)
			}
		}
	}
}

func fmtShares(sh map[string]float64) string {
	var b strings.Builder
	first := true
	for _, n := range sortedKeys(sh) {
		if !first {
			b.WriteString(" ")
		}
		first = false
		b.WriteString(n[strings.LastIndexByte(n, ':')+1:])
		b.WriteString("=")
		b.WriteString(strings.TrimRight(strings.TrimRight(ftoa(sh[n]), "0"), "."))
	}
	return b.String()
}

// writers runs n goroutines that add 1 to key's sub-counters, choosing
// among the write labels that m returns, until stop is closed. acked counts
// acknowledged increments.
func writers(t *testing.T, ctx context.Context, s store.Store, m *meta.Manager, key string, n int, stop <-chan struct{}, acked *atomic.Int64) *sync.WaitGroup {
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for {
				select {
				case <-stop:
					return
				default:
				}
				w, _, err := m.Labels(ctx, key)
				if err != nil {
					t.Error(err)
					return
				}
				if _, err := s.IncrBy(ctx, keyspace.SubKey(key, w[rng.IntN(len(w))]), 1); err != nil {
					t.Errorf("writer: %v", err)
					return
				}
				acked.Add(1)
			}
		})
	}
	return &wg
}

// TestResizeUnderWriters grows 4→8 and shrinks 8→3 while 16 writers, which
// see the labels through another Manager (as another process would), keep
// incrementing.
func TestResizeUnderWriters(t *testing.T) {
	ctx := ctxT(t)
	s := newRedis(t)
	key := "resize:writers"
	cfg := meta.Config{TTL: 50 * time.Millisecond, Margin: 250 * time.Millisecond, DefaultN: func(string) int { return 4 }}
	admin := newManager(t, s, cfg)
	seen := newManager(t, s, cfg)
	stop := make(chan struct{})
	var acked atomic.Int64
	wg := writers(t, ctx, s, seen, key, 16, stop, &acked)
	waitAcked(t, &acked, 2000)
	if err := admin.Resize(ctx, key, 8); err != nil {
		t.Fatal(err)
	}
	grown := acked.Load()
	if err := admin.Resize(ctx, key, 3); err != nil {
		t.Fatal(err)
	}
	waitAcked(t, &acked, acked.Load()+2000)
	close(stop)
	wg.Wait()
	mt := settled(t, admin, key, 3)
	topo, _ := s.Topology(ctx)
	if c := placement.Report(topo, key, mt.Write, nil).Collisions; c != 0 {
		t.Errorf("labels after shrink collide: %v", mt.Write)
	}
	got := sum(t, s, key, mt.Read)
	t.Logf("%d increments acknowledged (%d by the end of the grow), total %d, labels %v", acked.Load(), grown, got, mt.Write)
	if got != acked.Load() {
		t.Fatalf("total %d, acknowledged %d", got, acked.Load())
	}
}

// waitAcked waits until the writers have acknowledged n increments.
func waitAcked(t *testing.T, acked *atomic.Int64, n int64) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for acked.Load() < n {
		if time.Now().After(deadline) {
			t.Fatalf("writers stalled at %d increments", acked.Load())
		}
		time.Sleep(time.Millisecond)
	}
}

// TestBackendConformance runs the same checks of the Backend contract on
// the embedded store and on the cluster.
func TestBackendConformance(t *testing.T) {
	for name, b := range map[string]meta.Backend{"mem": newMem(t, 3), "redis": newRedis(t)} {
		t.Run(name, func(t *testing.T) {
			ctx := ctxT(t)
			st := b.(store.Store)
			if ok, _ := b.CASMeta(ctx, "c", 1, []byte(`{"epoch":2}`)); ok {
				t.Fatal("CAS on a missing record with epoch 1 succeeded")
			}
			if ok, err := b.CASMeta(ctx, "c", 0, []byte(`{"epoch":1,"write":["0"]}`)); !ok || err != nil {
				t.Fatalf("create: %v %v", ok, err)
			}
			if ok, _ := b.CASMeta(ctx, "c", 0, []byte(`{"epoch":1}`)); ok {
				t.Fatal("second create succeeded")
			}
			if ok, _ := b.CASMeta(ctx, "c", 2, []byte(`{"epoch":3}`)); ok {
				t.Fatal("CAS with a wrong epoch succeeded")
			}
			if ok, _ := b.CASMeta(ctx, "c", 1, []byte(`{"epoch":2,"x":1}`)); !ok {
				t.Fatal("CAS 1→2 failed")
			}
			if data, ok, err := b.GetMeta(ctx, "c"); !ok || err != nil || string(data) != `{"epoch":2,"x":1}` {
				t.Fatalf("GetMeta = %s %v %v", data, ok, err)
			}
			if _, ok, _ := b.GetMeta(ctx, "none"); ok {
				t.Fatal("GetMeta of a missing record found one")
			}

			// Fold values beyond 2^53, replayed: each moves exactly once.
			const big = int64(1)<<62 + 1
			if _, err := st.IncrBy(ctx, keyspace.SubKey("c", "a"), big); err != nil {
				t.Fatal(err)
			}
			for range 2 {
				v, err := b.FoldOut(ctx, "c", "a", "f1")
				if err != nil || v != big {
					t.Fatalf("FoldOut = %d, %v; want %d", v, err, big)
				}
			}
			for i := range 2 {
				applied, err := b.FoldIn(ctx, "c", "b", "f1", big, time.Time{})
				if err != nil || applied != (i == 0) {
					t.Fatalf("FoldIn #%d = %v, %v", i+1, applied, err)
				}
			}
			got, _ := st.Get(ctx, []string{keyspace.SubKey("c", "a"), keyspace.SubKey("c", "b")})
			if got[0] != 0 || got[1] != big {
				t.Fatalf("after fold: a=%d b=%d, want 0 and %d", got[0], got[1], big)
			}
			// An empty sub-counter folds as zero; negative values fold too.
			if v, err := b.FoldOut(ctx, "c", "empty", "f2"); v != 0 || err != nil {
				t.Fatalf("FoldOut of an empty sub-counter = %d, %v", v, err)
			}
			st.IncrBy(ctx, keyspace.SubKey("c", "n"), -5)
			if v, _ := b.FoldOut(ctx, "c", "n", "f3"); v != -5 {
				t.Fatalf("FoldOut of -5 = %d", v)
			}
			if ok, err := b.FoldIn(ctx, "c", "b", "f3", -5, time.Time{}); !ok || err != nil {
				t.Fatalf("FoldIn -5 = %v %v", ok, err)
			}
			if got, _ := st.Get(ctx, []string{keyspace.SubKey("c", "b")}); got[0] != big-5 {
				t.Fatalf("b = %d, want %d", got[0], big-5)
			}
			// A fold into a full sub-counter fails with ErrOverflow and
			// leaves its marker unset, so a retry can still apply it.
			st.IncrBy(ctx, keyspace.SubKey("c", "full"), 1<<62)
			if _, err := b.FoldIn(ctx, "c", "full", "f4", 1<<62, time.Time{}); !errors.Is(err, store.ErrOverflow) {
				t.Fatalf("overflowing FoldIn = %v, want ErrOverflow", err)
			}
			if ok, err := b.FoldIn(ctx, "c", "full", "f4", -1, time.Time{}); !ok || err != nil {
				t.Fatalf("FoldIn after a failed one = %v %v", ok, err)
			}
		})
	}
}
