package simulate

import (
	"context"
	"math"
	"math/rand/v2"

	"github.com/hotcount/hotcount/plan"
)

// seedStream is mixed into the PCG state derived from Config.Seed.
const seedStream = 0x686f74636f756e74 // "hotcount"

// newRand returns the generator for seed. Both PCG words depend on the
// seed, so neighbouring seeds give unrelated streams.
func newRand(seed uint64) *rand.Rand {
	return rand.New(rand.NewPCG(seed, seed^seedStream))
}

// EffectiveConfig is the configuration a run used, defaults applied.
type EffectiveConfig struct {
	Nodes          int        `json:"nodes"`
	Keys           int        `json:"keys"`
	N              int        `json:"n"`
	Capacity       float64    `json:"capacity"`
	ViralRate      float64    `json:"viral_rate"`
	RampSeconds    int        `json:"ramp_seconds"`
	BackgroundLoad float64    `json:"background_load"`
	ZipfS          float64    `json:"zipf_s"`
	Seconds        int        `json:"seconds"`
	Procs          int        `json:"procs"`
	FlushMS        float64    `json:"flush_ms"`
	KeyBudget      float64    `json:"key_budget"`
	Trials         int        `json:"trials"`
	Seed           uint64     `json:"seed"`
	ViralKey       string     `json:"viral_key"`
	Strategies     []Strategy `json:"strategies"`
}

// StrategyResult is what one strategy did over the run.
type StrategyResult struct {
	Strategy Strategy `json:"strategy"`
	// N is the viral key's sub-counter count at the end of the run.
	N int `json:"n"`
	// PeakUtilisation is the highest writes/Capacity of any node in any
	// second; PeakNode and PeakSecond say where and when.
	PeakUtilisation float64 `json:"peak_utilisation"`
	PeakNode        int     `json:"peak_node"`
	PeakSecond      int     `json:"peak_second"`
	// SecondsOverCapacity counts seconds in which some node exceeded
	// Capacity; NodeSecondsOverCapacity counts (node, second) pairs.
	SecondsOverCapacity     int `json:"seconds_over_capacity"`
	NodeSecondsOverCapacity int `json:"node_seconds_over_capacity"`
	// MeanCacheWritesPerSec is the mean total write rate on the cache.
	MeanCacheWritesPerSec float64 `json:"mean_cache_writes_per_sec"`
	// ReadKeys and ReadNodes are the read fan-in of the viral key: keys per
	// read and nodes (pipelined rounds) per read.
	ReadKeys  int `json:"read_keys"`
	ReadNodes int `json:"read_nodes"`
	// Collisions is the number of sub-counters, over all split keys, that
	// share a node with an earlier sub-counter of the same key.
	Collisions int `json:"collisions"`
	// MaxSubCountersPerNode is the most viral sub-counters on one node.
	MaxSubCountersPerNode int `json:"max_subcounters_per_node"`
	// SplitKeys is the number of keys with more than one sub-counter.
	SplitKeys int `json:"split_keys"`
	// LossWindowMS is what a killed process can lose (the flush interval
	// for buffered strategies, else 0).
	LossWindowMS float64 `json:"loss_window_ms"`
}

// Result is the outcome of Run.
type Result struct {
	Config EffectiveConfig `json:"config"`
	// BackgroundRate is the total Zipf traffic, increments/s.
	BackgroundRate float64 `json:"background_rate"`
	// HottestBackgroundKeyRate is the rate of the rank-1 background key.
	HottestBackgroundKeyRate float64 `json:"hottest_background_key_rate"`
	// BackgroundKeysOverBudget counts background keys whose own rate
	// exceeds KeyBudget·Capacity.
	BackgroundKeysOverBudget int `json:"background_keys_over_budget"`
	// ViralHomeNode is the node of the unsplit viral key.
	ViralHomeNode int `json:"viral_home_node"`
	// Placement odds for N hashed labels on Nodes nodes, exact
	// (plan.PAllDistinct, plan.ExpectedCollisions) and by Monte Carlo.
	PAllDistinctExact            float64 `json:"p_all_distinct_exact"`
	PAllDistinctMonteCarlo       float64 `json:"p_all_distinct_monte_carlo"`
	ExpectedCollisionsExact      float64 `json:"expected_collisions_exact"`
	ExpectedCollisionsMonteCarlo float64 `json:"expected_collisions_monte_carlo"`
	MonteCarloTrials             int     `json:"monte_carlo_trials"`
	// PAllDistinctNaiveLabels is the share of Trials key names whose
	// labels "0".."N-1" land on distinct nodes by their real CRC16 slots;
	// sequential labels are correlated, so it departs from the exact odds
	// of independent hashing.
	PAllDistinctNaiveLabels float64 `json:"p_all_distinct_naive_labels"`
	// Strategies holds one entry per strategy run, in Config order.
	Strategies []StrategyResult `json:"strategies"`
}

// lane is one strategy's state during the run.
type lane struct {
	res   StrategyResult
	base  []float64 // background write rate per node
	nodes []int     // viral sub-counter nodes (auto: current set)
	buf   bool      // the viral key is buffered
	auto  bool
	load  []float64
	total float64 // Σ of mean cache writes over seconds
}

// Run runs the model described by cfg. It returns an error wrapping
// ErrInvalidConfig for a bad config, or ctx.Err() when cancelled.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	rng := c.Rand
	if rng == nil {
		rng = newRand(c.Seed)
	}
	k := c.Nodes
	cl := newCluster(k)
	flushSec := c.Flush.Seconds()
	budget := c.KeyBudget * c.Capacity

	res := &Result{
		Config: EffectiveConfig{
			Nodes: k, Keys: c.Keys, N: c.N, Capacity: c.Capacity, ViralRate: c.ViralRate,
			RampSeconds: c.RampSeconds, BackgroundLoad: c.BackgroundLoad, ZipfS: c.ZipfS,
			Seconds: c.Seconds, Procs: c.Procs, FlushMS: flushSec * 1000, KeyBudget: c.KeyBudget,
			Trials: c.Trials, Seed: c.Seed, ViralKey: c.ViralKey, Strategies: c.Strategies,
		},
		BackgroundRate:          c.BackgroundLoad * float64(k) * c.Capacity,
		ViralHomeNode:           cl.node(c.ViralKey),
		PAllDistinctExact:       plan.PAllDistinct(k, c.N),
		ExpectedCollisionsExact: plan.ExpectedCollisions(k, c.N),
		MonteCarloTrials:        c.Trials,
	}
	res.PAllDistinctMonteCarlo, res.ExpectedCollisionsMonteCarlo = monteCarlo(rng, k, c.N, c.Trials)
	res.PAllDistinctNaiveLabels = cl.naiveDistinct(c.N, c.Trials)

	// Background: per-node rates for plain, buffered and auto writes.
	rates := zipfRates(c.Keys, c.ZipfS, res.BackgroundRate)
	res.HottestBackgroundKeyRate = rates[0]
	plain, buffered, autoBase := make([]float64, k), make([]float64, k), make([]float64, k)
	autoCollisions, autoSplit := 0, 0
	var kb []byte
	for i, r := range rates {
		if i&0xffff == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		kb = backgroundKey(kb, i)
		j := cl.node(string(kb))
		plain[j] += r
		buffered[j] += bufferedRate(r, c.Procs, flushSec)
		if r <= budget {
			autoBase[j] += r
			continue
		}
		res.BackgroundKeysOverBudget++
		n := min(MaxN, int(math.Ceil(r/budget)))
		nodes, _ := cl.placedNodes(string(kb), n)
		for _, j := range nodes {
			autoBase[j] += r / float64(n)
		}
		_, coll, _ := spread(nodes)
		autoCollisions += coll
		autoSplit++
	}

	home := []int{res.ViralHomeNode}
	placed, _ := cl.placedNodes(c.ViralKey, c.N)
	lanes := make([]*lane, 0, len(c.Strategies))
	for _, s := range c.Strategies {
		l := &lane{res: StrategyResult{Strategy: s}, load: make([]float64, k)}
		switch s {
		case Single:
			l.base, l.nodes = plain, home
		case ShardedRandom:
			l.base, l.nodes = plain, cl.hashedNodes(c.ViralKey, c.N)
		case ShardedPlaced:
			l.base, l.nodes = plain, placed
		case Buffered:
			l.base, l.nodes, l.buf = buffered, home, true
		case Combined:
			l.base, l.nodes, l.buf = buffered, placed, true
		case Auto:
			l.base, l.nodes, l.auto = autoBase, home, true
			l.res.Collisions, l.res.SplitKeys = autoCollisions, autoSplit
		}
		if l.buf {
			l.res.LossWindowMS = flushSec * 1000
		}
		lanes = append(lanes, l)
	}

	viral := func(t int) float64 {
		if t < 0 {
			return 0
		}
		return c.ViralRate * math.Min(1, float64(t+1)/float64(c.RampSeconds))
	}
	placedByN := map[int][]int{c.N: placed}
	z := make([]float64, k)
	for t := range c.Seconds {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// Common random numbers: every strategy sees the same noise, so
		// differences between them are not sampling luck.
		for j := range z {
			z[j] = rng.NormFloat64()
		}
		v := viral(t)
		for _, l := range lanes {
			if l.auto {
				need := min(MaxN, max(len(l.nodes), int(math.Ceil(viral(t-1)/budget))))
				if need > len(l.nodes) {
					if placedByN[need] == nil {
						placedByN[need], _ = cl.placedNodes(c.ViralKey, need)
					}
					l.nodes = placedByN[need]
				}
			}
			l.step(t, v, z, c, flushSec)
		}
	}

	for _, l := range lanes {
		l.finish(c.Seconds)
		res.Strategies = append(res.Strategies, l.res)
	}
	return res, nil
}

// step adds one second of load: background means, the viral key's rate over
// its sub-counters, then noise. A node's writes in a second are drawn from
// the normal approximation of a Poisson count with that mean.
func (l *lane) step(t int, v float64, z []float64, c Config, flushSec float64) {
	copy(l.load, l.base)
	if l.buf {
		v = bufferedRate(v, c.Procs, flushSec)
	}
	share := v / float64(len(l.nodes))
	for _, j := range l.nodes {
		l.load[j] += share
	}
	over := false
	for j, mean := range l.load {
		l.total += mean
		x := math.Max(0, mean+math.Sqrt(mean)*z[j])
		u := x / c.Capacity
		if u > l.res.PeakUtilisation {
			l.res.PeakUtilisation, l.res.PeakNode, l.res.PeakSecond = u, j, t
		}
		if x > c.Capacity {
			over = true
			l.res.NodeSecondsOverCapacity++
		}
	}
	if over {
		l.res.SecondsOverCapacity++
	}
}

// finish fills the summary fields.
func (l *lane) finish(seconds int) {
	r := &l.res
	r.MeanCacheWritesPerSec = l.total / float64(seconds)
	distinct, coll, maxPer := spread(l.nodes)
	r.N, r.ReadKeys, r.ReadNodes, r.MaxSubCountersPerNode = len(l.nodes), len(l.nodes), distinct, maxPer
	r.Collisions += coll
	if len(l.nodes) > 1 {
		r.SplitKeys++
	}
}
