package hotcount_test

import (
	"context"
	"os"
	"testing"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/redis"
	"github.com/redis/rueidis"
)

// cluster is the 3-primary, 1-replica-each Redis Cluster shared by this
// package's tests.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	if os.Getenv(childModeEnv) != "" {
		os.Exit(m.Run()) // a child of a reliability test: its parent gives it a Redis
	}
	os.Exit(testenv.Main(m, testenv.ClusterOptions{Primaries: 3, Replicas: 1}, &cluster))
}

func openCluster(t testing.TB) *redis.Store {
	t.Helper()
	s, err := redis.New(context.Background(), redis.Config{Addrs: cluster.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

func clusterBackends() []backend {
	var last *redis.Store
	return []backend{{
		name: "cluster",
		open: func(t *testing.T) store.Store {
			last = openCluster(t)
			return last
		},
		raw: func(t *testing.T, keys []string) []int64 {
			// A plain read, key by key, through the cluster's own routing.
			out := make([]int64, len(keys))
			for i, k := range keys {
				v, err := last.Client().Do(context.Background(), last.Client().B().Get().Key(k).Build()).AsInt64()
				if err != nil && !isNil(err) {
					t.Fatal(err)
				}
				out[i] = v
			}
			return out
		},
	}}
}

func isNil(err error) bool { return rueidis.IsRedisNil(err) }

// TestReadCostCluster counts, with INFO commandstats on every primary, the
// GETs an uncached read of an N=8 counter costs, and with the store's round
// counter the pipelined rounds per node.
func TestReadCostCluster(t *testing.T) {
	ctx := context.Background()
	st := openCluster(t)
	c := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 8}})
	key := uniqueKey(t)
	for range 200 {
		if err := c.Incr(ctx, key, 1); err != nil {
			t.Fatal(err)
		}
	}
	sub, _ := c.SubKeys(context.Background(), key)
	topo, err := st.Topology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, k := range sub {
		want[topo.NodeOf(k)]++
	}
	primaries, err := cluster.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	gets := func() map[string]int64 {
		out := map[string]int64{}
		for _, p := range primaries {
			cs, err := testenv.CommandStats(ctx, p)
			if err != nil {
				t.Fatal(err)
			}
			out[p] = cs["get"]
		}
		return out
	}
	// A fresh client: its read cache is empty, so this read goes to the
	// nodes. Its metadata (label sets, cached for MetaTTL) is loaded
	// first: that costs one GET of the metadata key per MetaTTL, not per
	// read.
	c2 := newClient(t, st, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 8}})
	if _, _, err := c2.Labels(ctx, key); err != nil {
		t.Fatal(err)
	}
	beforeGets, beforeStats := gets(), st.Stats()
	r, err := c2.Get(ctx, key)
	if err != nil || r.Value != 200 {
		t.Fatalf("Get = %+v, %v", r, err)
	}
	afterGets, afterStats := gets(), st.Stats()
	var total int64
	for _, p := range primaries {
		d := afterGets[p] - beforeGets[p]
		total += d
		if d != want[p] {
			t.Errorf("primary %s: %d GETs, want %d", p, d, want[p])
		}
		rounds := afterStats[p].Rounds - beforeStats[p].Rounds
		wantRounds := int64(0)
		if want[p] > 0 {
			wantRounds = 1
		}
		if rounds != wantRounds {
			t.Errorf("primary %s: %d rounds, want %d", p, rounds, wantRounds)
		}
	}
	if total != 8 {
		t.Errorf("uncached read sent %d GETs, want 8", total)
	}
	// Cached reads within the TTL send nothing.
	beforeGets = gets()
	for range 20 {
		if _, err := c2.Get(ctx, key); err != nil {
			t.Fatal(err)
		}
	}
	afterGets = gets()
	for _, p := range primaries {
		if d := afterGets[p] - beforeGets[p]; d != 0 {
			t.Errorf("cached reads sent %d GETs to %s", d, p)
		}
	}
	t.Logf("sub-keys per primary: %v", want)
}
