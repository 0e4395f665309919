package simulate

import (
	"math"
	"math/rand/v2"
	"testing"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/plan"
)

func TestMonteCarloMatchesExact(t *testing.T) {
	// Exact: 20·19·…·13 / 20^8 = 5079110400/25600000000 = 0.198403.
	exact := plan.PAllDistinct(20, 8)
	if math.Abs(exact-0.198403) > 1e-6 {
		t.Fatalf("exact = %v", exact)
	}
	rng := rand.New(rand.NewPCG(42, seedStream))
	p, coll := monteCarlo(rng, 20, 8, 200_000)
	if math.Abs(p-exact) > 0.01 {
		t.Errorf("Monte Carlo p_all_distinct = %v, exact %v", p, exact)
	}
	// Expected collisions 8 - 20·(1-0.95^8) = 1.268409.
	if want := plan.ExpectedCollisions(20, 8); math.Abs(coll-want) > 0.02 {
		t.Errorf("Monte Carlo collisions = %v, exact %v", coll, want)
	}
	// Pigeonhole and trivial cases are exact even by sampling.
	if p, _ := monteCarlo(rng, 3, 4, 1000); p != 0 {
		t.Errorf("4 on 3 nodes: p = %v, want 0", p)
	}
	if p, c := monteCarlo(rng, 5, 1, 1000); p != 1 || c != 0 {
		t.Errorf("1 on 5 nodes: p, collisions = %v, %v", p, c)
	}
}

func TestPlacedNodesEven(t *testing.T) {
	cases := []struct{ k, n int }{
		{20, 8}, {20, 20}, {3, 8}, {7, 50}, {1000, 8}, {1, 5}, {keyspace.SlotCount, 20}, {16, MaxN},
	}
	for _, c := range cases {
		cl := newCluster(c.k)
		nodes, labels := cl.placedNodes("likes:post:42", c.n)
		if len(nodes) != c.n || len(labels) != c.n {
			t.Fatalf("k=%d n=%d: got %d nodes, %d labels", c.k, c.n, len(nodes), len(labels))
		}
		counts := map[int]int{}
		seen := map[string]bool{}
		for i, j := range nodes {
			counts[j]++
			if labels[i] == "" || seen[labels[i]] {
				t.Errorf("k=%d n=%d: label %d is %q (empty or repeated)", c.k, c.n, i, labels[i])
			}
			seen[labels[i]] = true
			// The node is where the real sub-key lives.
			if got := cl.node(keyspace.SubKey("likes:post:42", labels[i])); got != j {
				t.Errorf("k=%d n=%d: label %q on node %d, slot says %d", c.k, c.n, labels[i], j, got)
			}
		}
		lo, hi := c.n, 0
		for j := range c.k {
			lo, hi = min(lo, counts[j]), max(hi, counts[j])
		}
		if hi-lo > 1 {
			t.Errorf("k=%d n=%d: counts range %d…%d, want a spread of at most 1", c.k, c.n, lo, hi)
		}
		if _, coll, maxPer := spread(nodes); c.n <= c.k && (coll != 0 || maxPer != 1) {
			t.Errorf("k=%d n=%d: collisions %d, max per node %d", c.k, c.n, coll, maxPer)
		}
	}
}

func TestHashedNodesAreRealSlots(t *testing.T) {
	cl := newCluster(20)
	nodes := cl.hashedNodes("likes:post:42", 8)
	for i, j := range nodes {
		slot := int(keyspace.Slot(keyspace.SubKey("likes:post:42", keyspace.NaiveLabels(8)[i])))
		if want := slot * 20 / keyspace.SlotCount; j != want {
			t.Errorf("label %d: node %d, want %d", i, j, want)
		}
	}
	// Slot ranges are equal to within one slot and cover every node.
	counts := make([]int, 20)
	for _, j := range cl.slotNode {
		counts[j]++
	}
	for j, n := range counts {
		if n < keyspace.SlotCount/20 || n > keyspace.SlotCount/20+1 {
			t.Errorf("node %d owns %d slots", j, n)
		}
	}
}

func TestNaiveDistinct(t *testing.T) {
	cl := newCluster(20)
	// Labels "0".."7" differ in the last byte only; CRC16 maps those
	// differences onto fixed slot offsets, so they collide far more often
	// than independent hashing (0.198) predicts. Measured: ≈ 0.025.
	if p := cl.naiveDistinct(8, 20_000); p > 0.1 {
		t.Errorf("naive labels distinct share = %v, expected well below 0.198", p)
	}
	if p := cl.naiveDistinct(21, 10); p != 0 {
		t.Errorf("21 labels on 20 nodes: %v, want 0", p)
	}
	if p := newCluster(1000).naiveDistinct(1, 100); p != 1 {
		t.Errorf("one label: %v, want 1", p)
	}
}

func TestBufferedRate(t *testing.T) {
	// P=100, D=0.5 s: a cold key (r=0.01/s) sends ≈ r; a hot key sends
	// P/D = 200; r = 200 sends 200·(1-e^-1) = 126.42.
	if got := bufferedRate(0.01, 100, 0.5); math.Abs(got-0.01) > 1e-6 {
		t.Errorf("cold key: %v", got)
	}
	if got := bufferedRate(40000, 100, 0.5); math.Abs(got-200) > 1e-9 {
		t.Errorf("hot key: %v", got)
	}
	if got := bufferedRate(200, 100, 0.5); math.Abs(got-200*(1-math.Exp(-1))) > 1e-9 {
		t.Errorf("r = P/D: %v", got)
	}
}

func TestZipfRates(t *testing.T) {
	r := zipfRates(1000, 1.1, 5000)
	sum := 0.0
	for i, x := range r {
		sum += x
		if i > 0 && x > r[i-1] {
			t.Fatalf("rates not decreasing at %d", i)
		}
	}
	if math.Abs(sum-5000) > 1e-6 {
		t.Errorf("sum = %v, want 5000", sum)
	}
	// Rank 1 vs rank 2: ratio 2^1.1.
	if got := r[0] / r[1]; math.Abs(got-math.Pow(2, 1.1)) > 1e-9 {
		t.Errorf("r1/r2 = %v", got)
	}
}
