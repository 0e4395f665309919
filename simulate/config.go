package simulate

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"time"

	"github.com/hotcount/hotcount/keyspace"
)

// Strategy is one way of writing the counters of the model.
type Strategy string

// The strategies the model compares.
const (
	// Single writes every key, the viral one included, as one counter.
	Single Strategy = "single"
	// ShardedRandom splits the viral key into N sub-counters with the
	// labels "0".."N-1", placed wherever their hash tags fall.
	ShardedRandom Strategy = "sharded-random"
	// ShardedPlaced splits the viral key into N sub-counters whose labels
	// are chosen to land on distinct nodes (counts differ by at most one).
	ShardedPlaced Strategy = "sharded-placed"
	// Buffered coalesces every key in each of Procs processes and flushes
	// one write per key per interval.
	Buffered Strategy = "buffered"
	// Combined buffers every key and spreads the viral key's flushes over N
	// placed sub-counters.
	Combined Strategy = "combined"
	// Auto grows N, with placed labels, for every key whose measured rate
	// (the previous second's) exceeds the per-sub-counter budget; N only
	// grows within a run.
	Auto Strategy = "auto"
)

// AllStrategies lists every strategy in report order.
var AllStrategies = []Strategy{Single, ShardedRandom, ShardedPlaced, Buffered, Combined, Auto}

// Defaults applied to zero fields of Config.
const (
	DefaultNodes          = 20
	DefaultKeys           = 100_000
	DefaultN              = 8
	DefaultCapacity       = 10_000.0
	DefaultViralRate      = 40_000.0
	DefaultBackgroundLoad = 0.1
	DefaultZipfS          = 1.1
	DefaultSeconds        = 60
	DefaultRampSeconds    = 10
	DefaultProcs          = 100
	DefaultFlush          = 500 * time.Millisecond
	DefaultKeyBudget      = 0.5
	DefaultTrials         = 100_000
	DefaultViralKey       = "likes:post:42"
)

// Limits on Config.
const (
	MaxNodes   = keyspace.SlotCount
	MaxKeys    = 10_000_000
	MaxN       = keyspace.MaxN
	MaxSeconds = 86_400
	MaxTrials  = 100_000_000
)

// ErrInvalidConfig is wrapped by every configuration error; the message
// names the field.
var ErrInvalidConfig = errors.New("simulate: invalid config")

// Config describes one model run. Zero fields take the Default values;
// Run copies the config and never modifies it.
type Config struct {
	// Nodes is the number of primaries; slots are split in equal ranges.
	Nodes int
	// Keys is the number of background keys, Zipf-distributed by rank.
	Keys int
	// N is the sub-counter count of the viral key in the sharded and
	// combined strategies.
	N int
	// Capacity is the writes/s one node takes.
	Capacity float64
	// ViralRate is the viral key's full increment rate per second.
	ViralRate float64
	// RampSeconds is how long the viral key takes to reach ViralRate: its
	// rate in second t is ViralRate·min(1, (t+1)/RampSeconds). 1 is a step.
	RampSeconds int
	// BackgroundLoad is the background rate as a fraction of the cluster's
	// total capacity (Nodes·Capacity).
	BackgroundLoad float64
	// ZipfS is the Zipf exponent: key of rank i gets weight ∝ i^-s.
	ZipfS float64
	// Seconds is the simulated duration.
	Seconds int
	// Procs and Flush describe the writers in the buffered strategies.
	Procs int
	Flush time.Duration
	// KeyBudget is the fraction of Capacity one sub-counter may take in the
	// auto strategy.
	KeyBudget float64
	// Trials is the number of Monte Carlo trials for the placement odds.
	Trials int
	// Seed seeds the generator when Rand is nil.
	Seed uint64
	// Rand, when set, is the source of all randomness (placement trials and
	// per-second noise); Run then does not use Seed.
	Rand *rand.Rand
	// Strategies to run; nil means AllStrategies.
	Strategies []Strategy
	// ViralKey is the name of the viral key (its slots decide placement).
	ViralKey string
}

// withDefaults returns a validated copy of c with defaults applied.
func (c Config) withDefaults() (Config, error) {
	setI := func(p *int, d int) {
		if *p == 0 {
			*p = d
		}
	}
	setF := func(p *float64, d float64) {
		if *p == 0 {
			*p = d
		}
	}
	setI(&c.Nodes, DefaultNodes)
	setI(&c.Keys, DefaultKeys)
	setI(&c.N, DefaultN)
	setF(&c.Capacity, DefaultCapacity)
	setF(&c.ViralRate, DefaultViralRate)
	setI(&c.RampSeconds, DefaultRampSeconds)
	setF(&c.BackgroundLoad, DefaultBackgroundLoad)
	setF(&c.ZipfS, DefaultZipfS)
	setI(&c.Seconds, DefaultSeconds)
	setI(&c.Procs, DefaultProcs)
	if c.Flush == 0 {
		c.Flush = DefaultFlush
	}
	setF(&c.KeyBudget, DefaultKeyBudget)
	setI(&c.Trials, DefaultTrials)
	if c.ViralKey == "" {
		c.ViralKey = DefaultViralKey
	}
	if c.Strategies == nil {
		c.Strategies = AllStrategies
	}
	c.Strategies = append([]Strategy(nil), c.Strategies...)

	bad := func(format string, args ...any) (Config, error) {
		return Config{}, fmt.Errorf("%w: "+format, append([]any{ErrInvalidConfig}, args...)...)
	}
	pos := func(x float64) bool { return x > 0 && !math.IsInf(x, 0) }
	switch {
	case c.Nodes < 1 || c.Nodes > MaxNodes:
		return bad("nodes must be 1 … %d, got %d", MaxNodes, c.Nodes)
	case c.Keys < 1 || c.Keys > MaxKeys:
		return bad("keys must be 1 … %d, got %d", MaxKeys, c.Keys)
	case c.N < 1 || c.N > MaxN:
		return bad("n must be 1 … %d, got %d", MaxN, c.N)
	case !pos(c.Capacity):
		return bad("capacity must be > 0, got %v", c.Capacity)
	case !pos(c.ViralRate):
		return bad("viral rate must be > 0, got %v", c.ViralRate)
	case c.RampSeconds < 1:
		return bad("ramp seconds must be ≥ 1, got %d", c.RampSeconds)
	case !pos(c.BackgroundLoad):
		return bad("background load must be > 0, got %v", c.BackgroundLoad)
	case !pos(c.ZipfS):
		return bad("zipf exponent must be > 0, got %v", c.ZipfS)
	case c.Seconds < 1 || c.Seconds > MaxSeconds:
		return bad("seconds must be 1 … %d, got %d", MaxSeconds, c.Seconds)
	case c.Procs < 1:
		return bad("procs must be ≥ 1, got %d", c.Procs)
	case c.Flush < time.Millisecond:
		return bad("flush interval must be ≥ 1ms, got %v", c.Flush)
	case !pos(c.KeyBudget) || c.KeyBudget > 1:
		return bad("key budget must be in (0, 1], got %v", c.KeyBudget)
	case c.Trials < 1 || c.Trials > MaxTrials:
		return bad("trials must be 1 … %d, got %d", MaxTrials, c.Trials)
	}
	if err := keyspace.Validate(c.ViralKey); err != nil {
		return bad("viral key: %v", err)
	}
	for _, s := range c.Strategies {
		if !knownStrategy(s) {
			return bad("unknown strategy %q", s)
		}
	}
	return c, nil
}

func knownStrategy(s Strategy) bool {
	for _, k := range AllStrategies {
		if s == k {
			return true
		}
	}
	return false
}

// ParseStrategy returns the strategy named s, or an error wrapping
// ErrInvalidConfig.
func ParseStrategy(s string) (Strategy, error) {
	if knownStrategy(Strategy(s)) {
		return Strategy(s), nil
	}
	return "", fmt.Errorf("%w: unknown strategy %q", ErrInvalidConfig, s)
}
