package plan

import (
	"encoding/json"
	"errors"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/keyspace"
)

func near(a, b, tol float64) bool { return math.Abs(a-b) <= tol }

func TestPAllDistinct(t *testing.T) {
	cases := []struct {
		k, n int
		want float64
	}{
		// 20·19·…·13 / 20^8 = 5079110400 / 25600000000 = 0.198402750
		{20, 8, 0.19840275},
		// 20·19·18·17 / 20^4 = 116280 / 160000 = 0.72675
		{20, 4, 0.72675},
		{3, 3, 6.0 / 27}, // 3!/3^3
		{5, 1, 1},
		{5, 0, 1},
		{3, 4, 0}, // pigeonhole
		{1, 1, 1},
		{1, 2, 0},
	}
	for _, c := range cases {
		if got := PAllDistinct(c.k, c.n); !near(got, c.want, 1e-12) {
			t.Errorf("PAllDistinct(%d, %d) = %.12f, want %.12f", c.k, c.n, got, c.want)
		}
	}
	// Large k stays finite and close to the birthday approximation
	// exp(-n(n-1)/2k) for n ≪ k.
	got := PAllDistinct(1_000_000, 100)
	want := math.Exp(-100.0 * 99 / 2 / 1e6)
	if !near(got, want, 1e-4) {
		t.Errorf("PAllDistinct(1e6, 100) = %v, want ≈ %v", got, want)
	}
}

func TestDistinctAndCollisions(t *testing.T) {
	// k=20, n=8: E[distinct] = 20·(1-0.95^8) = 20·0.336579 = 6.731591
	// collisions = 8-6.731591 = 1.268409; shared = 8·(1-0.95^7) = 2.413302
	if got := ExpectedDistinctNodes(20, 8); !near(got, 6.731591374, 1e-8) {
		t.Errorf("ExpectedDistinctNodes(20,8) = %v", got)
	}
	if got := ExpectedCollisions(20, 8); !near(got, 1.268408626, 1e-8) {
		t.Errorf("ExpectedCollisions(20,8) = %v", got)
	}
	if got := ExpectedSharedSubCounters(20, 8); !near(got, 2.413301631, 1e-8) {
		t.Errorf("ExpectedSharedSubCounters(20,8) = %v", got)
	}
	if got := ExpectedCollisions(1, 5); got != 4 {
		t.Errorf("ExpectedCollisions(1,5) = %v, want 4", got)
	}
	if got := ExpectedCollisions(7, 1); got != 0 {
		t.Errorf("ExpectedCollisions(7,1) = %v, want 0", got)
	}
}

// bruteMaxLoad enumerates all k^n placements.
func bruteMaxLoad(k, n int) float64 {
	total, sum := 0, 0
	place := make([]int, n)
	counts := make([]int, k)
	var rec func(i int)
	rec = func(i int) {
		if i == n {
			clear(counts)
			m := 0
			for _, p := range place {
				counts[p]++
				m = max(m, counts[p])
			}
			sum += m
			total++
			return
		}
		for j := range k {
			place[i] = j
			rec(i + 1)
		}
	}
	rec(0)
	return float64(sum) / float64(total)
}

func TestExpectedMaxLoad(t *testing.T) {
	// Hand-worked: k=2,n=2: max 2 w.p. 1/2, else 1 → 1.5.
	// k=2,n=3: max 3 w.p. 2/8, else 2 → 2.25.
	if got := ExpectedMaxLoad(2, 2); !near(got, 1.5, 1e-9) {
		t.Errorf("ExpectedMaxLoad(2,2) = %v, want 1.5", got)
	}
	if got := ExpectedMaxLoad(2, 3); !near(got, 2.25, 1e-9) {
		t.Errorf("ExpectedMaxLoad(2,3) = %v, want 2.25", got)
	}
	for _, kn := range [][2]int{{3, 4}, {4, 6}, {5, 5}, {6, 3}, {3, 9}, {7, 6}} {
		k, n := kn[0], kn[1]
		if got, want := ExpectedMaxLoad(k, n), bruteMaxLoad(k, n); !near(got, want, 1e-9) {
			t.Errorf("ExpectedMaxLoad(%d,%d) = %.12f, brute force %.12f", k, n, got, want)
		}
	}
	if got := ExpectedMaxLoad(1, 9); got != 9 {
		t.Errorf("ExpectedMaxLoad(1,9) = %v, want 9", got)
	}
	// 8 on 20, against a seeded Monte Carlo of 100,000 trials.
	rng := rand.New(rand.NewPCG(1, 2))
	const trials = 100_000
	sum := 0
	var counts [20]int
	for range trials {
		clear(counts[:])
		m := 0
		for range 8 {
			j := rng.IntN(20)
			counts[j]++
			m = max(m, counts[j])
		}
		sum += m
	}
	mc := float64(sum) / trials
	if got := ExpectedMaxLoad(20, 8); !near(got, mc, 0.01) {
		t.Errorf("ExpectedMaxLoad(20,8) = %v, Monte Carlo %v", got, mc)
	}
	// The largest case stays finite and within its bounds.
	if got := ExpectedMaxLoad(MaxNodes, keyspace.MaxN); math.IsNaN(got) || got < 1 || got > 6 {
		t.Errorf("ExpectedMaxLoad(MaxNodes, keyspace.MaxN) = %v", got)
	}
	if got := ExpectedMaxLoad(10, keyspace.MaxN); got < 103 || got > 140 {
		t.Errorf("ExpectedMaxLoad(10, keyspace.MaxN) = %v, want a little above 102.4", got)
	}
}

func f(x float64) *float64 { return &x }

func TestCompute(t *testing.T) {
	cases := []struct {
		name             string
		in               Input
		mode             Mode
		minN, n          int
		writes, perSub   float64
		placedExp, worst float64
		pDistinct        float64
		collisions       float64
		buffered         *float64
		reads            Reads
		loss             float64
		fits             bool
		warnings         int
	}{
		{
			// min_n = ceil(40000/10000) = 4. P/D = 100/0.5 s = 200 writes/s
			// ≤ 10000 and W unstated → buffered; n=8 given. per sub-counter
			// 200/8 = 25; placed: 8 ≤ 20 nodes, one each → 25 expected and
			// worst. p_all_distinct = 20·19·…·13/20^8 = 0.198403;
			// collisions = 8 - 20(1-0.95^8) = 1.268409.
			name: "brief example: buffered, n given",
			in:   Input{Rate: 40000, NodeCapacity: 10000, Nodes: 20, N: 8, Procs: 100, Flush: 500 * time.Millisecond},
			mode: ModeBuffered, minN: 4, n: 8, writes: 200, perSub: 25, placedExp: 25, worst: 25,
			pDistinct: 0.19840275, collisions: 1.268408626, buffered: f(200), loss: 500, fits: true,
		},
		{
			// No procs → buffering not evaluated → sharded,
			// n = ceil(40000/10000) = 4, 10000 per sub-counter = capacity.
			// p_all_distinct = 0.95·0.9·0.85 = 0.72675;
			// collisions = 4 - 20(1-0.95^4) = 4 - 3.709875 = 0.290125.
			name: "sharded, derived n",
			in:   Input{Rate: 40000, NodeCapacity: 10000, Nodes: 20},
			mode: ModeSharded, minN: 4, n: 4, writes: 40000, perSub: 10000, placedExp: 10000, worst: 10000,
			pDistinct: 0.72675, collisions: 0.290125, fits: true,
		},
		{
			// Headroom 1.5: n = ceil(40000·1.5/10000) = 6, 6666.67 each.
			// p = .95·.9·.85·.8·.75 = 0.436050.
			name: "sharded with headroom",
			in:   Input{Rate: 40000, NodeCapacity: 10000, Nodes: 20, Headroom: 1.5},
			mode: ModeSharded, minN: 4, n: 6, writes: 40000, perSub: 40000.0 / 6, placedExp: 40000.0 / 6, worst: 40000.0 / 6,
			pDistinct: 0.43605, collisions: 6 - 20*(1-math.Pow(0.95, 6)), fits: true,
		},
		{
			// P/D = 200 > C = 100, W = 1 s ≥ D → combined,
			// n = ceil(200·1.5/100) = 3, 66.67 writes/s each; min_n = 400.
			// Reads: Q=500, T=1 s, P=100: uncached 500·3 = 1500,
			// cached min(500, 100/1)·3 = 300.
			name: "combined",
			in: Input{Rate: 40000, NodeCapacity: 100, Nodes: 20, Headroom: 1.5, Procs: 100, Flush: 500 * time.Millisecond,
				ReadRate: 500, LossWindow: time.Second},
			mode: ModeCombined, minN: 400, n: 3, writes: 200, perSub: 200.0 / 3, placedExp: 200.0 / 3, worst: 200.0 / 3,
			pDistinct: 0.95 * 0.9, collisions: 3 - 20*(1-math.Pow(0.95, 3)), buffered: f(200),
			reads: Reads{Uncached: 1500, Cached: 300}, loss: 500, fits: true,
		},
		{
			// W = 100 ms < D = 500 ms → no buffering → sharded n=4.
			name: "loss window shorter than flush",
			in: Input{Rate: 40000, NodeCapacity: 10000, Nodes: 20, Procs: 100, Flush: 500 * time.Millisecond,
				LossWindow: 100 * time.Millisecond},
			mode: ModeSharded, minN: 4, n: 4, writes: 40000, perSub: 10000, placedExp: 10000, worst: 10000,
			pDistinct: 0.72675, collisions: 0.290125, buffered: f(200), fits: true,
		},
		{
			// W = 0 stated → durable, cache still takes 40000 → n=4.
			name: "zero loss window",
			in:   Input{Rate: 40000, NodeCapacity: 10000, Nodes: 20, Procs: 100, LossWindowSet: true},
			mode: ModeDurable, minN: 4, n: 4, writes: 40000, perSub: 10000, placedExp: 10000, worst: 10000,
			pDistinct: 0.72675, collisions: 0.290125, buffered: f(200), fits: true,
		},
		{
			// 5000 ≤ 10000: plain counter even though buffering is possible.
			// Q=50, P=100, T=1 s: cached = min(50, 100)·1 = 50.
			name: "fits on one node",
			in:   Input{Rate: 5000, NodeCapacity: 10000, Nodes: 20, Procs: 100, ReadRate: 50},
			mode: ModeSharded, minN: 1, n: 1, writes: 5000, perSub: 5000, placedExp: 5000, worst: 5000,
			pDistinct: 1, buffered: f(200), reads: Reads{Uncached: 50, Cached: 50}, fits: true,
		},
		{
			// n=8 on 3 nodes: per sub-counter 5000; placed: 3,3,2 →
			// worst 3·5000 = 15000 > 10000; expected 40000/3. 40000 > 3·10000.
			// Three warnings: over capacity, over cluster, n > nodes.
			name: "more sub-counters than nodes",
			in:   Input{Rate: 40000, NodeCapacity: 10000, Nodes: 3, N: 8},
			mode: ModeSharded, minN: 4, n: 8, writes: 40000, perSub: 5000, placedExp: 40000.0 / 3, worst: 15000,
			pDistinct: 0, collisions: 8 - 3*(1-math.Pow(2.0/3, 8)), warnings: 3,
		},
		{
			// P=1000, D=100 ms → 10000/s; R = 8000 is lower: B = min(R, P/D) = 8000.
			// R·H = 12000 > C = 10000 → buffering; 8000·1.5 = 12000 > C → combined,
			// n = ceil(12000/10000) = 2.
			name: "buffer capped by rate",
			in:   Input{Rate: 8000, NodeCapacity: 10000, Nodes: 20, Headroom: 1.5, Procs: 1000, Flush: 100 * time.Millisecond},
			mode: ModeCombined, minN: 1, n: 2, writes: 8000, perSub: 4000, placedExp: 4000, worst: 4000,
			pDistinct: 0.95, collisions: 2 - 20*(1-0.95*0.95), buffered: f(8000), loss: 100, fits: true,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			in := c.in
			r, err := Compute(in)
			if err != nil {
				t.Fatal(err)
			}
			if in != c.in {
				t.Error("Compute modified its input")
			}
			if r.RecommendedMode != c.mode || r.MinN != c.minN || r.N != c.n {
				t.Errorf("mode, min_n, n = %s, %d, %d; want %s, %d, %d (%s)", r.RecommendedMode, r.MinN, r.N, c.mode, c.minN, c.n, r.Reason)
			}
			checks := []struct {
				name      string
				got, want float64
			}{
				{"cache writes", r.CacheWritesPerSec, c.writes},
				{"per sub-counter", r.PerSubCounterRate, c.perSub},
				{"placed expected", r.PerNodeRate.Expected, c.placedExp},
				{"placed worst", r.PerNodeRate.WorstCase, c.worst},
				{"random worst", r.PerNodeRateRandom.WorstCase, c.writes},
				{"p_all_distinct", r.PAllDistinct, c.pDistinct},
				{"collisions", r.ExpectedCollisions, c.collisions},
				{"uncached reads", r.CacheReadsPerSec.Uncached, c.reads.Uncached},
				{"cached reads", r.CacheReadsPerSec.Cached, c.reads.Cached},
				{"loss window", r.LossWindowMS, c.loss},
			}
			for _, ch := range checks {
				if !near(ch.got, ch.want, 1e-6*math.Max(1, math.Abs(ch.want))) {
					t.Errorf("%s = %v, want %v", ch.name, ch.got, ch.want)
				}
			}
			if (r.BufferedWritesPerSec == nil) != (c.buffered == nil) ||
				(c.buffered != nil && !near(*r.BufferedWritesPerSec, *c.buffered, 1e-9)) {
				t.Errorf("buffered_writes_per_sec = %v, want %v", r.BufferedWritesPerSec, c.buffered)
			}
			if r.Fits != c.fits || len(r.Warnings) != c.warnings {
				t.Errorf("fits = %v, warnings = %q; want %v, %d warnings", r.Fits, r.Warnings, c.fits, c.warnings)
			}
			// Random labels never beat placed ones.
			if r.PerNodeRateRandom.Expected < r.PerNodeRate.WorstCase-1e-9 {
				t.Errorf("random expected %v below placed worst %v", r.PerNodeRateRandom.Expected, r.PerNodeRate.WorstCase)
			}
			if r.ReadKeys != r.N || r.ReadNodes != min(r.N, in.Nodes) {
				t.Errorf("read keys, nodes = %d, %d", r.ReadKeys, r.ReadNodes)
			}
			if r.Reason == "" || strings.Contains(r.Reason, "\n") {
				t.Errorf("reason %q is not one line", r.Reason)
			}
		})
	}
}

func TestComputeInvalid(t *testing.T) {
	ok := Input{Rate: 40000, NodeCapacity: 10000, Nodes: 20}
	cases := []struct {
		name string
		mod  func(*Input)
		want string
	}{
		{"zero rate", func(in *Input) { in.Rate = 0 }, "rate"},
		{"NaN rate", func(in *Input) { in.Rate = math.NaN() }, "rate"},
		{"negative capacity", func(in *Input) { in.NodeCapacity = -1 }, "node capacity"},
		{"infinite capacity", func(in *Input) { in.NodeCapacity = math.Inf(1) }, "node capacity"},
		{"no nodes", func(in *Input) { in.Nodes = 0 }, "nodes"},
		{"too many nodes", func(in *Input) { in.Nodes = MaxNodes + 1 }, "nodes"},
		{"negative n", func(in *Input) { in.N = -1 }, "n must"},
		{"huge n", func(in *Input) { in.N = keyspace.MaxN + 1 }, "n must"},
		{"headroom below 1", func(in *Input) { in.Headroom = 0.5 }, "headroom"},
		{"negative procs", func(in *Input) { in.Procs = -3 }, "procs"},
		{"negative flush", func(in *Input) { in.Flush = -time.Second }, "flush"},
		{"negative read rate", func(in *Input) { in.ReadRate = -1 }, "read rate"},
		{"negative ttl", func(in *Input) { in.ReadCacheTTL = -1 }, "TTL"},
		{"negative loss window", func(in *Input) { in.LossWindow = -1 }, "loss window"},
		{"derived n over limit", func(in *Input) { in.Rate = 1e9 }, "limit"},
	}
	for _, c := range cases {
		in := ok
		c.mod(&in)
		_, err := Compute(in)
		if !errors.Is(err, ErrInvalidInput) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalidInput mentioning %q", c.name, err, c.want)
		}
	}
}

func TestResultJSON(t *testing.T) {
	r, err := Compute(Input{Rate: 40000, NodeCapacity: 10000, Nodes: 20, N: 8, Procs: 100, ReadRate: 10})
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(raw, &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"min_n", "n", "per_subcounter_rate", "per_node_rate", "per_node_rate_random",
		"p_all_distinct", "expected_collisions", "read_keys", "buffered_writes_per_sec",
		"cache_reads_per_sec", "recommended_mode", "reason", "warnings", "input"} {
		if _, ok := m[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, raw)
		}
	}
	pn := m["per_node_rate"].(map[string]any)
	if _, ok := pn["worst_case"]; !ok {
		t.Errorf("per_node_rate lacks worst_case: %v", pn)
	}
	if m["input"].(map[string]any)["loss_window_ms"] != nil {
		t.Errorf("unstated loss window should be null: %s", raw)
	}
}

func TestExplain(t *testing.T) {
	r, err := Compute(Input{Rate: 40000, NodeCapacity: 10000, Nodes: 3, N: 8, ReadRate: 100})
	if err != nil {
		t.Fatal(err)
	}
	s := Explain(r)
	for _, want := range []string{"Recommended: sharded with n=8", "OVER capacity", "Warning:", "8 key(s) from 3 node(s)"} {
		if !strings.Contains(s, want) {
			t.Errorf("Explain lacks %q:\n%s", want, s)
		}
	}
	r, err = Compute(Input{Rate: 40000, NodeCapacity: 10000, Nodes: 20, Procs: 100})
	if err != nil {
		t.Fatal(err)
	}
	if s := Explain(r); !strings.Contains(s, "loses at most 500 ms") {
		t.Errorf("buffered Explain lacks the loss window:\n%s", s)
	}
}

func TestMemory(t *testing.T) {
	r, err := Compute(Input{Rate: 40000, NodeCapacity: 10000, Nodes: 8, N: 8})
	if err != nil {
		t.Fatal(err)
	}
	// A 20-byte key: "{K#L}" adds 4 bytes; the record holds 8 labels.
	if want := (Memory{Cold: 124, Sharded: 8*124 + 180 + 20 + 64}); r.Memory != want {
		t.Fatalf("memory %+v, want %+v", r.Memory, want)
	}
	if !strings.Contains(Explain(r), "Redis memory: about 124 B") {
		t.Fatalf("Explain lacks the memory line:\n%s", Explain(r))
	}
}
