// Package autoscale changes the number of sub-counters of counters by
// itself: automatic N for hot counters and automatic re-placement after a
// slot migration.
//
// # Automatic N
//
// The engine measures every counter's cache write rate in a heavy-hitters
// sketch (buffered counters reach the cache only a few times a second per
// process, so they rarely need more sub-counters). A hotkeys.Controller
// estimates each hot counter's cluster-wide write rate (every process adds
// what it saw to a shared counter in the cache), grows N with the safe
// grow when the rate per sub-counter passes the budget, and folds N back
// once the counter has stayed cool for the hysteresis period.
//
// # Re-placement
//
// A slot migration can move a sub-counter onto a primary that already
// holds another sub-counter of the same counter; its writes then pile up
// on one node again. A goroutine looks at the store's slot map on every
// tick and, when its epoch changed, checks every counter this process used
// recently (meta.Manager.Known) and rebalances those with collisions, one
// at a time.
package autoscale

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/hotkeys"
	"github.com/hotcount/hotcount/internal/engine"
)

// DefaultRebalanceCheck is how often the slot map is looked at for
// automatic re-placement.
const DefaultRebalanceCheck = 2 * time.Second

// DefaultTopN is how many of the counters with the most cache writes the
// controller looks at every evaluation (twice a second): cold counters
// turning hot are found among them.
const DefaultTopN = 64

// ErrNoMetadata: automatic N and re-placement need a store that keeps
// counter metadata.
var ErrNoMetadata = engine.ErrNoMetadata

// Config configures a Scaler.
type Config struct {
	// Engine is the data path: its sketch, metadata and store.
	Engine *engine.Engine
	// AutoN turns automatic N on, with Policy. Without it the controller
	// only moves counters between cold and hot by their namespace's hot
	// rate.
	AutoN  bool
	Policy hotkeys.Policy
	// NaiveLabels: counters have naive labels and no cold start.
	NaiveLabels bool
	// Rebalance turns automatic re-placement on, looking every
	// RebalanceCheck.
	Rebalance      bool
	RebalanceCheck time.Duration
	// Timeout bounds each round trip.
	Timeout time.Duration
	// Clock is the time source of both loops.
	Clock clock.Clock
}

// Scaler runs the loops that Config turns on.
type Scaler struct {
	grows, shrinks, failed atomic.Int64 // the controller's decisions

	eng   *engine.Engine
	auto  *hotkeys.Controller // nil without AutoN
	rebal *rebalancer         // nil without Rebalance
}

// New starts the loops.
func New(cfg Config) (*Scaler, error) {
	s := &Scaler{eng: cfg.Engine}
	m := cfg.Engine.Meta()
	if (cfg.AutoN || cfg.Rebalance) && m == nil {
		return nil, ErrNoMetadata
	}
	if m != nil {
		// The controller always runs: it moves counters between cold (one
		// sub-counter) and hot (their namespace's N) by their hot rate;
		// with automatic N it also sizes hot ones by the budget.
		policy := cfg.Policy
		policy.NoBudget = !cfg.AutoN
		var rates hotkeys.RateSource
		if cfg.AutoN {
			shared, err := hotkeys.NewShared(hotkeys.SharedConfig{Store: cfg.Engine.Store(), Local: cfg.Engine.WriteSketch(), Now: cfg.Clock.Now})
			if err != nil {
				return nil, fmt.Errorf("autoscale: %w", err)
			}
			rates = shared
		}
		ns := cfg.Engine.Namespaces()
		var err error
		s.auto, err = hotkeys.NewController(hotkeys.ControllerConfig{
			Sketch:  cfg.Engine.WriteSketch(),
			Rates:   rates,
			Resizer: m,
			Policy:  policy,
			TopN:    DefaultTopN,
			Clock:   cfg.Clock,
			Size: func(ctx context.Context, key string) (int, error) {
				w, _, err := m.Labels(ctx, key)
				return len(w), err
			},
			Pinned: m.Pinned,
			BaseN:  func(key string) int { return ns.Lookup(key).N },
			HotRate: func(key string) float64 {
				if n := ns.Lookup(key); !n.NoColdStart && !cfg.NaiveLabels {
					return n.HotRate
				}
				return 0
			},
			OnDecision: func(d hotkeys.Decision) {
				s.decided(d)
				cfg.Engine.Drop(d.Key)
			},
		})
		if err != nil {
			return nil, fmt.Errorf("autoscale: %w", err)
		}
	}
	if cfg.Rebalance {
		s.rebal = startRebalancer(cfg)
	}
	return s, nil
}

// HotKeys returns up to n of the counters with the most increments
// arriving in this process, with their rates and N; with automatic N, the
// controller's view too (cluster-wide rate, the reason of its last
// decision), and the controller's hot keys this process sees little of.
func (s *Scaler) HotKeys(ctx context.Context, n int) []hotkeys.HotKey {
	byKey := map[string]int{}
	var out []hotkeys.HotKey
	for _, kr := range s.eng.TopKeys(n) {
		byKey[kr.Key] = len(out)
		out = append(out, hotkeys.HotKey{Key: kr.Key, Arrivals: kr.Arrivals, Writes: kr.Writes})
	}
	if s.auto != nil {
		for _, h := range s.auto.Hot() {
			i, ok := byKey[h.Key]
			if !ok {
				if len(out) >= n {
					continue
				}
				i = len(out)
				out = append(out, hotkeys.HotKey{Key: h.Key})
			}
			out[i].Rate, out[i].N, out[i].Resizing, out[i].Reason = h.Rate, h.N, h.Resizing, h.Reason
		}
	}
	for i := range out {
		if out[i].N == 0 {
			if w, _, err := s.eng.Labels(ctx, out[i].Key); err == nil {
				out[i].N = len(w)
			}
		}
	}
	return out
}

// Decisions returns the controller's recent grow and shrink decisions,
// oldest first: cold counters turning hot and back, and, with automatic
// N, sizing by the budget.
func (s *Scaler) Decisions() []hotkeys.Decision {
	if s.auto == nil {
		return nil
	}
	return s.auto.Decisions()
}

// RebalanceStats counts the work of automatic re-placement.
type RebalanceStats struct {
	// Checks counts looks at the slot map.
	Checks int64
	// Moved counts counters moved back onto distinct primaries.
	Moved int64
	// Failed counts attempts that failed (retried at the next check).
	Failed int64
	// Collisions is the number of sub-counters beyond an even spread that
	// the last pass over the counters found (before moving them).
	Collisions int64
}

// DecisionStats counts the controller's decisions.
type DecisionStats struct {
	// Grows and Shrinks count the resizes started; Failed the resizes
	// that failed.
	Grows, Shrinks, Failed int64
}

// Rebalances returns the counts of automatic re-placement (zero when it
// is off).
func (s *Scaler) Rebalances() RebalanceStats {
	if s.rebal == nil {
		return RebalanceStats{}
	}
	return RebalanceStats{Checks: s.rebal.checks.Load(), Moved: s.rebal.moved.Load(), Failed: s.rebal.failed.Load(),
		Collisions: s.rebal.collisions.Load()}
}

// DecisionCounts returns the counts of the controller's decisions.
func (s *Scaler) DecisionCounts() DecisionStats {
	return DecisionStats{Grows: s.grows.Load(), Shrinks: s.shrinks.Load(), Failed: s.failed.Load()}
}

// decided counts a decision of the controller.
func (s *Scaler) decided(d hotkeys.Decision) {
	switch {
	case d.Err != "":
		s.failed.Add(1)
	case d.Action == hotkeys.ActionGrow:
		s.grows.Add(1)
	case d.Action == hotkeys.ActionShrink:
		s.shrinks.Add(1)
	}
}

// Close stops the loops; a fold in progress stops too (its journal lets
// Resume finish it).
func (s *Scaler) Close(ctx context.Context) error {
	var errs []error
	if s.rebal != nil {
		s.rebal.close()
	}
	if s.auto != nil {
		errs = append(errs, s.auto.Close(ctx))
	}
	return errors.Join(errs...)
}
