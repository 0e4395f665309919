// Package plan turns the numbers of one hot counter into a sizing and an
// accuracy decision: how many sub-counters (N), the load each node takes,
// the odds that hashed labels collide, what a read costs, and which mode to
// run the counter in. It is pure arithmetic: no I/O, no randomness.
//
// # Inputs
//
// R is the increment rate on the hot key (increments/s), C the writes/s one
// node can take for this counter, K the number of primaries, H the headroom
// factor (1 = none), P the number of processes that write the counter, D
// their flush interval, Q the read rate of the counter (reads/s over all
// processes), T the summed-read cache TTL and W the acceptable loss window.
//
// # Decision rule
//
// The first rule that matches picks the mode:
//
//  1. W stated and W = 0 → durable: every increment is logged durably before
//     it is acknowledged; the cache still takes every increment, so
//     N = ceil(R·H/C).
//  2. R·H ≤ C → sharded with N = 1: the rate fits on one node, so a plain
//     counter needs neither sub-counters nor a loss window.
//  3. Buffering is allowed when P is given and W is not stated or W ≥ D
//     (a killed process loses at most one flush interval). With buffering
//     the cache sees B = min(R, P/D) writes/s (one INCRBY per process per
//     interval, never more than one per increment):
//     B·H ≤ C → buffered with N = 1;
//     otherwise combined with N = ceil(B·H/C): buffering cuts the rate,
//     sub-counters spread what remains.
//  4. Otherwise (W < D, or P unknown) → sharded with N = ceil(R·H/C).
//
// So N is always ceil(cache writes · H / C) for the recommended mode, at
// least 1, where cache writes are R without buffering and B with it. MinN =
// ceil(R/C) is the unbuffered minimum and is reported for comparison; a
// buffered plan may use fewer sub-counters than MinN. An explicit Input.N
// replaces the derived N (the mode is still chosen by the rule above) and
// a warning says when that N leaves a node over capacity.
//
// # Load figures
//
// With X cache writes/s spread over n sub-counters, each sub-counter takes
// s = X/n. hotcount places labels on distinct primaries, spreading evenly
// when n > K, so a node holds ⌊n/K⌋ or ⌈n/K⌉ sub-counters:
//
//	placed:  expected = X / min(n, K)   (mean over occupied nodes)
//	         worst    = ⌈n/K⌉ · s       (the fullest node; the plan "fits" when ≤ C)
//
// With labels that simply hash (suffixes "0".."n-1"), placement is random:
//
//	random:  expected = E[max sub-counters on one node] · s   (exact, see ExpectedMaxLoad)
//	         worst    = n · s = X        (every sub-counter on one node)
//
// Collision odds for random labels: PAllDistinct = K!/((K-n)!·K^n),
// ExpectedCollisions = n - K·(1-(1-1/K)^n).
//
// Reads fetch n keys. Without the summed-read cache the cache serves Q·n
// key reads/s; with it each process refreshes the sum at most once per T,
// so the cache serves min(Q, P/T)·n (P taken as 1 when not given).
package plan

import (
	"errors"
	"fmt"
	"math"
	"time"

	"github.com/hotcount/hotcount/keyspace"
)

// Defaults applied to zero fields of Input.
const (
	// DefaultHeadroom is the headroom factor when Input.Headroom is 0.
	DefaultHeadroom = 1.0
	// DefaultFlush is the flush interval when Input.Flush is 0.
	DefaultFlush = 500 * time.Millisecond
	// DefaultReadCacheTTL is the summed-read cache TTL when
	// Input.ReadCacheTTL is 0.
	DefaultReadCacheTTL = time.Second
)

// Limits on Input.
const (
	// KeyBytes is what one small integer key with a TTL costs in Redis
	// memory beside the bytes of its name (measured with
	// BenchmarkMemoryPerCounter: about 120 B for a 20-byte name).
	KeyBytes = 100
	// RecordBytes is what a sharded counter's metadata record costs beside
	// its labels (a key and a short JSON value).
	RecordBytes = 180
	// MaxNodes is the largest node count: a Redis Cluster has 16384 slots.
	MaxNodes = keyspace.SlotCount
)

// ErrInvalidInput is wrapped by every error Compute returns; the message
// names the field and the rule it broke.
var ErrInvalidInput = errors.New("plan: invalid input")

// Mode is a recommended way to run a counter.
type Mode string

// The modes a plan recommends.
const (
	// ModeSharded spreads the key over N sub-counters, no buffering
	// (N = 1 is a plain counter).
	ModeSharded Mode = "sharded"
	// ModeBuffered coalesces increments in each process and flushes one
	// write per key per interval to a single counter.
	ModeBuffered Mode = "buffered"
	// ModeCombined buffers and spreads the flushes over N sub-counters.
	ModeCombined Mode = "combined"
	// ModeDurable logs every increment durably before acknowledging it.
	ModeDurable Mode = "durable"
)

// Input holds the numbers of one hot counter. Zero fields take the
// documented defaults; Compute never modifies its argument.
type Input struct {
	// Rate is the increment rate on the hot key, per second. Required, > 0.
	Rate float64
	// NodeCapacity is the writes/s one node can take for this counter.
	// Required, > 0.
	NodeCapacity float64
	// Nodes is the number of primaries. Required, 1 … MaxNodes.
	Nodes int
	// N is the sub-counter count to evaluate; 0 derives it (see the
	// package doc).
	N int
	// Headroom multiplies the rate when N is derived; 0 means
	// DefaultHeadroom (none). Must be ≥ 1 otherwise (e.g. 1.5).
	Headroom float64
	// Procs is the number of processes writing the counter; 0 means not
	// given, and buffering is then not considered.
	Procs int
	// Flush is the buffer flush interval; 0 means DefaultFlush.
	Flush time.Duration
	// ReadRate is the counter's read rate, per second, over all processes.
	ReadRate float64
	// ReadCacheTTL is the summed-read cache TTL; 0 means DefaultReadCacheTTL.
	ReadCacheTTL time.Duration
	// LossWindow is the acceptable loss of acknowledged increments, as a
	// time window. It is stated when LossWindowSet is true or LossWindow
	// > 0; unstated means no limit. A stated zero asks for durable mode.
	LossWindow time.Duration
	// LossWindowSet marks LossWindow as stated even when it is zero.
	LossWindowSet bool
	// KeyLen is the length of the counter's key in bytes, for the memory
	// estimate; 0 means 20.
	KeyLen int
}

// Load is a per-node write rate, expected and worst case.
type Load struct {
	// Expected is the typical load (see the package doc per labelling).
	Expected float64 `json:"expected"`
	// WorstCase is the load on the fullest node in the worst placement.
	WorstCase float64 `json:"worst_case"`
}

// Memory estimates what a counter costs in Redis memory, in bytes: one key
// (KeyBytes plus its name "{K#L}") while cold, N of them and its metadata
// record (RecordBytes plus the labels) once sharded.
type Memory struct {
	// Cold is the cost of the counter with one sub-counter.
	Cold int `json:"cold"`
	// Sharded is the cost with N sub-counters.
	Sharded int `json:"sharded"`
}

// memory returns the Memory of a counter with a keyLen-byte name and n
// sub-counters.
func memory(keyLen, n int) Memory {
	sub := KeyBytes + keyLen + 4 // "{", "#", label, "}"
	rec := RecordBytes + keyLen + 8*n
	return Memory{Cold: sub, Sharded: n*sub + rec}
}

// Reads is the rate of key reads the counter puts on the cache.
type Reads struct {
	// Uncached is Q·n: every read fetches all n sub-counters.
	Uncached float64 `json:"uncached"`
	// Cached is min(Q, P/T)·n with the summed-read cache.
	Cached float64 `json:"cached"`
}

// EffectiveInput is the input with defaults applied, as reported.
type EffectiveInput struct {
	Rate           float64  `json:"rate"`
	NodeCapacity   float64  `json:"node_capacity"`
	Nodes          int      `json:"nodes"`
	N              int      `json:"n"`
	Headroom       float64  `json:"headroom"`
	Procs          int      `json:"procs"`
	FlushMS        float64  `json:"flush_ms"`
	ReadRate       float64  `json:"read_rate"`
	ReadCacheTTLMS float64  `json:"read_cache_ttl_ms"`
	LossWindowMS   *float64 `json:"loss_window_ms"` // null: not stated
}

// Result is a plan. Rates are per second.
type Result struct {
	// Input echoes the input with defaults applied.
	Input EffectiveInput `json:"input"`
	// MinN is ceil(R/C): the fewest sub-counters that carry the raw rate.
	MinN int `json:"min_n"`
	// N is the sub-counter count of the plan (given or derived).
	N int `json:"n"`
	// NRule says how N was obtained.
	NRule string `json:"n_rule"`
	// CacheWritesPerSec is the write rate that reaches the cache in the
	// recommended mode: R, or B = min(R, P/D) when buffered.
	CacheWritesPerSec float64 `json:"cache_writes_per_sec"`
	// PerSubCounterRate is CacheWritesPerSec / N.
	PerSubCounterRate float64 `json:"per_subcounter_rate"`
	// PerNodeRate is the load per node with placed labels.
	PerNodeRate Load `json:"per_node_rate"`
	// PerNodeRateRandom is the load per node with hashed (random) labels.
	PerNodeRateRandom Load `json:"per_node_rate_random"`
	// Fits reports whether the fullest node, with placed labels, stays
	// within NodeCapacity.
	Fits bool `json:"fits"`
	// PAllDistinct is the probability that N hashed labels land on N
	// distinct nodes.
	PAllDistinct float64 `json:"p_all_distinct"`
	// ExpectedDistinctNodes is K·(1-(1-1/K)^N) for hashed labels.
	ExpectedDistinctNodes float64 `json:"expected_distinct_nodes"`
	// ExpectedCollisions is N - ExpectedDistinctNodes.
	ExpectedCollisions float64 `json:"expected_collisions"`
	// ExpectedSharedSubCounters counts sub-counters sharing their node.
	ExpectedSharedSubCounters float64 `json:"expected_shared_subcounters"`
	// ReadKeys is the number of keys one uncached read fetches (= N).
	ReadKeys int `json:"read_keys"`
	// ReadNodes is the number of nodes one read visits with placed labels.
	ReadNodes int `json:"read_nodes"`
	// BufferedWritesPerSec is min(R, P/D); null when Procs is not given.
	BufferedWritesPerSec *float64 `json:"buffered_writes_per_sec"`
	// CacheReadsPerSec is the key-read load on the cache.
	CacheReadsPerSec Reads `json:"cache_reads_per_sec"`
	// LossWindowMS is the most a killed process can lose in the
	// recommended mode: D when buffering, else 0.
	LossWindowMS float64 `json:"loss_window_ms"`
	// MaxStalenessMS bounds how old a cached read can be: T, plus D when
	// buffering.
	MaxStalenessMS float64 `json:"max_staleness_ms"`
	// RecommendedMode is the mode the decision rule picked.
	RecommendedMode Mode `json:"recommended_mode"`
	// Reason is one line saying why.
	Reason string `json:"reason"`
	// Memory is the Redis memory the counter takes, cold and with N
	// sub-counters.
	Memory Memory `json:"memory_bytes"`
	// Warnings lists conditions the plan does not resolve.
	Warnings []string `json:"warnings"`
}

// Compute validates in and returns its plan. Errors wrap ErrInvalidInput.
func Compute(in Input) (Result, error) {
	if err := validate(in); err != nil {
		return Result{}, err
	}
	h := in.Headroom
	if h == 0 {
		h = DefaultHeadroom
	}
	d := in.Flush
	if d == 0 {
		d = DefaultFlush
	}
	ttl := in.ReadCacheTTL
	if ttl == 0 {
		ttl = DefaultReadCacheTTL
	}
	lossStated := in.LossWindowSet || in.LossWindow > 0
	r, c, k := in.Rate, in.NodeCapacity, in.Nodes

	res := Result{
		Input: EffectiveInput{
			Rate: r, NodeCapacity: c, Nodes: k, N: in.N, Headroom: h,
			Procs: in.Procs, FlushMS: ms(d), ReadRate: in.ReadRate,
			ReadCacheTTLMS: ms(ttl),
		},
		MinN:     ceilDiv(r, c),
		Warnings: []string{},
	}
	if lossStated {
		w := ms(in.LossWindow)
		res.Input.LossWindowMS = &w
	}
	var buffered float64
	if in.Procs > 0 {
		buffered = math.Min(r, float64(in.Procs)/d.Seconds())
		res.BufferedWritesPerSec = &buffered
	}

	// Decision rule (package doc).
	mode, writes, reason := decide(in, h, d, lossStated, buffered)
	res.RecommendedMode, res.Reason, res.CacheWritesPerSec = mode, reason, writes
	if mode == ModeBuffered || mode == ModeCombined {
		res.LossWindowMS = ms(d)
		res.MaxStalenessMS = ms(d)
	}
	res.MaxStalenessMS += ms(ttl)

	need := max(1, ceilDiv(writes*h, c))
	switch {
	case in.N > 0:
		res.N, res.NRule = in.N, "given"
	case need > keyspace.MaxN:
		return Result{}, fmt.Errorf("%w: %s mode needs %d sub-counters (ceil(%g×%g/%g)), more than the limit %d; buffer writes or raise node capacity",
			ErrInvalidInput, mode, need, writes, h, c, keyspace.MaxN)
	case mode == ModeBuffered || (mode == ModeSharded && need == 1):
		res.N, res.NRule = 1, "1: the cache write rate fits on one node"
	case mode == ModeCombined:
		res.N, res.NRule = need, "ceil(buffered_writes×headroom/capacity)"
	default:
		res.N, res.NRule = need, "ceil(rate×headroom/capacity)"
	}
	n := res.N

	s := writes / float64(n)
	res.PerSubCounterRate = s
	res.PerNodeRate = Load{
		Expected:  writes / float64(min(n, k)),
		WorstCase: float64((n+k-1)/k) * s,
	}
	res.PerNodeRateRandom = Load{
		Expected:  ExpectedMaxLoad(k, n) * s,
		WorstCase: writes,
	}
	res.Fits = res.PerNodeRate.WorstCase <= c*(1+1e-12)
	res.PAllDistinct = PAllDistinct(k, n)
	res.ExpectedDistinctNodes = ExpectedDistinctNodes(k, n)
	res.ExpectedCollisions = ExpectedCollisions(k, n)
	res.ExpectedSharedSubCounters = ExpectedSharedSubCounters(k, n)
	res.ReadKeys = n
	res.ReadNodes = min(n, k)
	keyLen := in.KeyLen
	if keyLen <= 0 {
		keyLen = 20
	}
	res.Memory = memory(keyLen, n)

	procs := max(in.Procs, 1)
	res.CacheReadsPerSec = Reads{
		Uncached: in.ReadRate * float64(n),
		Cached:   math.Min(in.ReadRate, float64(procs)/ttl.Seconds()) * float64(n),
	}

	if !res.Fits {
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"the fullest node takes %.0f writes/s, over its capacity %.0f: raise n or buffer", res.PerNodeRate.WorstCase, c))
	}
	if writes > float64(k)*c {
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"%.0f writes/s exceed what %d nodes can take even perfectly spread (%.0f): add nodes or buffer", writes, k, float64(k)*c))
	}
	if n > k {
		res.Warnings = append(res.Warnings, fmt.Sprintf(
			"n=%d exceeds the node count %d: nodes hold several sub-counters", n, k))
	}
	if in.Procs == 0 && in.ReadRate > 0 {
		res.Warnings = append(res.Warnings, "procs not given: the cached read figure assumes one process")
	}
	return res, nil
}

// decide applies the decision rule and returns the mode, the cache write
// rate it implies and the reason.
func decide(in Input, h float64, d time.Duration, lossStated bool, buffered float64) (Mode, float64, string) {
	r, c := in.Rate, in.NodeCapacity
	switch {
	case lossStated && in.LossWindow == 0:
		return ModeDurable, r, "a zero loss window needs every increment logged durably before it is acknowledged"
	case r*h <= c:
		return ModeSharded, r, fmt.Sprintf("%.0f writes/s fit on one node (capacity %.0f): a plain counter loses nothing", r*h, c)
	case in.Procs > 0 && (!lossStated || in.LossWindow >= d):
		if buffered*h <= c {
			return ModeBuffered, buffered, fmt.Sprintf("%d processes flushing every %v put %.0f writes/s on one node (capacity %.0f); a crash loses at most %v",
				in.Procs, d, buffered, c, d)
		}
		return ModeCombined, buffered, fmt.Sprintf("buffering cuts %.0f to %.0f writes/s, still over one node's %.0f: spread the flushes over sub-counters",
			r, buffered, c)
	case in.Procs > 0:
		return ModeSharded, r, fmt.Sprintf("the loss window %v is shorter than the flush interval %v, so buffering is ruled out: spread over sub-counters",
			in.LossWindow, d)
	default:
		return ModeSharded, r, fmt.Sprintf("%.0f writes/s exceed one node's %.0f and procs is not given (buffering not evaluated): spread over sub-counters",
			r*h, c)
	}
}

func validate(in Input) error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: "+format, append([]any{ErrInvalidInput}, args...)...)
	}
	finite := func(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }
	switch {
	case !finite(in.Rate) || in.Rate <= 0:
		return bad("rate must be a number > 0, got %v", in.Rate)
	case !finite(in.NodeCapacity) || in.NodeCapacity <= 0:
		return bad("node capacity must be a number > 0, got %v", in.NodeCapacity)
	case in.Nodes < 1 || in.Nodes > MaxNodes:
		return bad("nodes must be 1 … %d, got %d", MaxNodes, in.Nodes)
	case in.N < 0 || in.N > keyspace.MaxN:
		return bad("n must be 0 (derive) or 1 … %d, got %d", keyspace.MaxN, in.N)
	case !finite(in.Headroom) || (in.Headroom != 0 && in.Headroom < 1):
		return bad("headroom must be 0 (none) or ≥ 1, got %v", in.Headroom)
	case in.Procs < 0:
		return bad("procs must be ≥ 0, got %d", in.Procs)
	case in.Flush < 0:
		return bad("flush interval must be ≥ 0, got %v", in.Flush)
	case !finite(in.ReadRate) || in.ReadRate < 0:
		return bad("read rate must be a number ≥ 0, got %v", in.ReadRate)
	case in.ReadCacheTTL < 0:
		return bad("read cache TTL must be ≥ 0, got %v", in.ReadCacheTTL)
	case in.LossWindow < 0:
		return bad("loss window must be ≥ 0, got %v", in.LossWindow)
	}
	return nil
}

// ceilDiv returns ceil(a/b), treating quotients within 1e-9 of an integer as
// that integer so that 40000/10000 is 4, not 5.
func ceilDiv(a, b float64) int {
	q := a / b
	if q >= 1<<53 {
		return 1 << 53
	}
	if r := math.Round(q); math.Abs(q-r) <= 1e-9*math.Max(1, r) {
		return int(r)
	}
	return int(math.Ceil(q))
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
