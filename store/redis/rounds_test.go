package redis

import (
	"fmt"
	"slices"
	"strconv"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// keysPerNode returns keys such that node i of topo (in the nodes listed)
// holds counts[i] of them.
func keysPerNode(topo *store.Topology, prefix string, nodes []string, counts []int) []string {
	need := map[string]int{}
	for i, n := range nodes {
		need[n] = counts[i]
	}
	var keys []string
	for i := 0; len(need) > 0; i++ {
		k := keyspace.SubKey(prefix, strconv.Itoa(i))
		n := topo.NodeOf(k)
		if need[n] > 0 {
			keys = append(keys, k)
			if need[n]--; need[n] == 0 {
				delete(need, n)
			}
		}
	}
	return keys
}

// TestOneRoundPerNode checks that a batch costs exactly one round per
// involved node (Stats) and one command per key on each node (INFO
// commandstats), and nothing on uninvolved nodes.
func TestOneRoundPerNode(t *testing.T) {
	ctx := ctxT(t)
	s := newClusterStore(t, Config{TopologyRefresh: time.Hour})
	flushCluster(t)
	topo, _ := s.Topology(ctx)
	if len(topo.Nodes) < 3 {
		t.Fatalf("need 3 primaries, have %v", topo.Nodes)
	}
	tests := []struct {
		name   string
		nodes  []string
		counts []int
	}{
		{"three nodes", topo.Nodes[:3], []int{2, 5, 9}},
		{"two of three", topo.Nodes[1:3], []int{7, 1}},
		{"one node", topo.Nodes[:1], []int{4}},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			keys := keysPerNode(topo, "rounds"+strconv.Itoa(i), tt.nodes, tt.counts)
			ops := make([]store.IncrOp, len(keys))
			for j, k := range keys {
				ops[j] = store.IncrOp{Key: k, Delta: 1}
				if j%2 == 1 {
					ops[j].TokenKey = k + ":tok"
				}
			}
			// Warm the script cache so that no EVAL fallback is counted.
			if _, err := s.IncrMulti(ctx, ops); err != nil {
				t.Fatal(err)
			}
			type snap struct{ get, incrby, evalsha, del int64 }
			take := func() map[string]snap {
				m := map[string]snap{}
				for _, n := range topo.Nodes {
					m[n] = snap{commandCalls(t, n, "get"), commandCalls(t, n, "incrby"), commandCalls(t, n, "evalsha"), commandCalls(t, n, "del")}
				}
				return m
			}
			beforeStats, before := s.Stats(), take()
			if _, err := s.Get(ctx, keys); err != nil {
				t.Fatal(err)
			}
			if _, err := s.IncrMulti(ctx, ops); err != nil {
				t.Fatal(err)
			}
			if err := s.Del(ctx, keys); err != nil {
				t.Fatal(err)
			}
			afterStats, after := s.Stats(), take()
			for _, n := range topo.Nodes {
				want := 0
				if j := slices.Index(tt.nodes, n); j >= 0 {
					want = tt.counts[j]
				}
				wantRounds := int64(0)
				if want > 0 {
					wantRounds = 3 // Get, IncrMulti, Del
				}
				if got := afterStats[n].Rounds - beforeStats[n].Rounds; got != wantRounds {
					t.Errorf("%s: %d rounds, want %d", n, got, wantRounds)
				}
				if got := afterStats[n].Commands - beforeStats[n].Commands; got != 3*int64(want) {
					t.Errorf("%s: %d commands in Stats, want %d", n, got, 3*want)
				}
				b, a := before[n], after[n]
				tokens := int64(0)
				for _, op := range ops {
					if op.TokenKey != "" && topo.NodeOf(op.Key) == n {
						tokens++
					}
				}
				if tt := (snap{a.get - b.get, a.incrby - b.incrby, a.evalsha - b.evalsha, a.del - b.del}); tt != (snap{int64(want), int64(want) - tokens, tokens, int64(want)}) {
					t.Errorf("%s: commandstats deltas get/incrby/evalsha/del = %v, want %d keys (%d with tokens)", n, tt, want, tokens)
				}
			}
		})
	}
}

// TestMaxConcurrencyOne checks that rounds still complete one at a time.
func TestMaxConcurrencyOne(t *testing.T) {
	ctx := ctxT(t)
	s := newClusterStore(t, Config{MaxConcurrency: 1})
	keys := make([]string, 100)
	for i := range keys {
		keys[i] = fmt.Sprintf("{mc%d}", i)
	}
	if err := s.Del(ctx, keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if _, err := s.IncrBy(ctx, k, 3); err != nil {
			t.Fatal(err)
		}
	}
	got, err := s.Get(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range got {
		if v != 3 {
			t.Fatalf("%s = %d", keys[i], v)
		}
	}
}

// TestNoLeak checks that Close stops every goroutine the store started.
func TestNoLeak(t *testing.T) {
	seeds := clusterSeeds(t)
	node(t, seeds[0]) // the shared test clients stay open
	// rueidis closes connections it dropped from its own map 5 s later, and
	// may have a delayed refresh of its own in flight; both goroutines end
	// by themselves and belong to the client library, not to the store.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
		goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"))
	s, err := New(ctxT(t), Config{Addrs: seeds, TopologyRefresh: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctxT(t), []string{"a", "b", "c", "d"}); err != nil {
		t.Fatal(err)
	}
	time.Sleep(30 * time.Millisecond) // let the refresh loop run a few times
	s.Close()
}
