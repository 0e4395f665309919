package hotkeys

import (
	"fmt"
	"math"
	"time"

	"github.com/hotcount/hotcount/keyspace"
)

// Policy defaults, used when a Policy field is zero.
const (
	// DefaultBudget is the writes per second one sub-counter may take.
	DefaultBudget = 10000
	// DefaultHeadroom is the factor by which a resize overshoots the rate.
	DefaultHeadroom = 1.5
	// DefaultShrinkBelow is the fraction of the budget under which a key
	// is cooling.
	DefaultShrinkBelow = 0.5
	// DefaultHysteresis is how long a key must keep cooling before it is
	// shrunk.
	DefaultHysteresis = 30 * time.Second
	// DefaultMinN is the smallest N a shrink goes to.
	DefaultMinN = 1
	// DefaultMaxN is the largest N a grow goes to.
	DefaultMaxN = 64
	// LimitN is the largest MaxN a Policy may have (the label-set bound).
	LimitN = keyspace.MaxN
)

// Policy decides the number of sub-counters of a key from its write rate.
// The zero value is valid: every zero field means its Default.
//
// A key with rate r on N sub-counters puts r/N writes per second on each.
// When r/N exceeds Budget, N grows at once to ceil(r×Headroom/Budget),
// capped at MaxN. When r/N stays below ShrinkBelow×Budget for Hysteresis
// without a break, N shrinks to ceil(r×Headroom/Budget), at least MinN.
// Both targets leave every sub-counter at most Budget/Headroom, so a
// decision never invites the opposite one: a key that hovers around the
// budget grows once and stays.
type Policy struct {
	// Budget is the writes per second one sub-counter (so one node) may
	// take; 0 means DefaultBudget.
	Budget float64
	// Headroom multiplies the rate when a new N is computed, >= 1; 0
	// means DefaultHeadroom.
	Headroom float64
	// MinN is the smallest N a shrink goes to; 0 means DefaultMinN.
	MinN int
	// MaxN is the largest N a grow goes to, at most LimitN; 0 means
	// DefaultMaxN.
	MaxN int
	// Hysteresis is how long the per-sub-counter rate must stay below
	// ShrinkBelow×Budget before N shrinks; 0 means DefaultHysteresis.
	Hysteresis time.Duration
	// ShrinkBelow is the fraction of Budget, in (0, 1), under which a key
	// is cooling; 0 means DefaultShrinkBelow.
	ShrinkBelow float64
	// HotRate, when set, splits keys into cold and hot: a cold key (one
	// sub-counter) whose rate passes HotRate grows to MinN (or to the
	// budget's target, if larger); a hot key whose rate stays below
	// ShrinkBelow×HotRate for Hysteresis shrinks back to one. 0 means no
	// such tiers: N stays within [MinN, MaxN].
	HotRate float64
	// NoBudget turns the budget off: N only moves between the tiers of
	// HotRate (1 and MinN), never by the per-sub-counter rate.
	NoBudget bool
}

// Action is what a Decision asks for.
type Action string

// The actions.
const (
	// ActionNone: leave N as it is.
	ActionNone Action = "none"
	// ActionGrow: raise N to Decision.To.
	ActionGrow Action = "grow"
	// ActionShrink: lower N to Decision.To (a fold).
	ActionShrink Action = "shrink"
)

// Decision is the outcome of one evaluation of one key.
type Decision struct {
	// At is when the decision was taken.
	At time.Time `json:"at"`
	// Key is the counter key.
	Key string `json:"key"`
	// From is the key's N when the decision was taken.
	From int `json:"from"`
	// To is the N asked for (From for ActionNone).
	To int `json:"to"`
	// Rate is the estimated cluster-wide writes per second of the key.
	Rate float64 `json:"rate"`
	// Action says whether N grows, shrinks or stays.
	Action Action `json:"action"`
	// Reason explains the decision in a sentence.
	Reason string `json:"reason"`
	// Err is set (on a record of Controller.Decisions) when the resize
	// asked for failed.
	Err string `json:"error,omitempty"`
}

// KeyState is what a Policy remembers about one key between decisions.
// The zero value is a key never seen. A caller keeps one per key.
type KeyState struct {
	// CoolingSince is when the key went below the shrink threshold, or
	// zero when it is not cooling.
	CoolingSince time.Time
	// LastChange is when the Policy last asked for a grow or a shrink.
	LastChange time.Time
}

// Validate reports whether p (with defaults applied) is usable. The error
// wraps ErrConfig.
func (p Policy) Validate() error {
	_, err := p.withDefaults()
	return err
}

func (p Policy) withDefaults() (Policy, error) {
	bad := func(format string, args ...any) (Policy, error) {
		return p, fmt.Errorf("%w: "+format, append([]any{ErrConfig}, args...)...)
	}
	if p.Budget == 0 {
		p.Budget = DefaultBudget
	}
	if p.Headroom == 0 {
		p.Headroom = DefaultHeadroom
	}
	if p.ShrinkBelow == 0 {
		p.ShrinkBelow = DefaultShrinkBelow
	}
	if p.Hysteresis == 0 {
		p.Hysteresis = DefaultHysteresis
	}
	if p.MinN == 0 {
		p.MinN = DefaultMinN
	}
	if p.MaxN == 0 {
		p.MaxN = max(DefaultMaxN, p.MinN)
	}
	switch {
	case !(p.Budget > 0) || math.IsInf(p.Budget, 0):
		return bad("Budget must be a positive number, got %v", p.Budget)
	case !(p.Headroom >= 1) || math.IsInf(p.Headroom, 0):
		return bad("Headroom must be at least 1, got %v", p.Headroom)
	case !(p.ShrinkBelow > 0 && p.ShrinkBelow < 1):
		return bad("ShrinkBelow must be in (0, 1), got %v", p.ShrinkBelow)
	case !(p.HotRate >= 0) || math.IsInf(p.HotRate, 0):
		return bad("HotRate must be a non-negative number, got %v", p.HotRate)
	case p.Hysteresis < 0:
		return bad("Hysteresis must not be negative, got %v", p.Hysteresis)
	case p.MinN < 1 || p.MaxN > LimitN || p.MinN > p.MaxN:
		return bad("need 1 <= MinN <= MaxN <= %d, got MinN %d, MaxN %d", LimitN, p.MinN, p.MaxN)
	}
	return p, nil
}

// Target returns the N that rate needs: ceil(rate×Headroom/Budget),
// clamped to [MinN, MaxN].
func (p Policy) Target(rate float64) int {
	p, err := p.withDefaults()
	if err != nil {
		return 0
	}
	return p.target(rate)
}

func (p Policy) target(rate float64) int {
	if !(rate > 0) {
		return p.MinN
	}
	t := math.Ceil(rate * p.Headroom / p.Budget)
	if t > float64(p.MaxN) {
		return p.MaxN
	}
	return max(int(t), p.MinN)
}

// Decide returns what to do with key, written rate times per second
// (cluster-wide) and now on currentN sub-counters, and updates state. An
// invalid Policy decides ActionNone and says why.
func (p Policy) Decide(now time.Time, key string, rate float64, currentN int, state *KeyState) Decision {
	d := Decision{At: now, Key: key, From: currentN, To: currentN, Rate: rate, Action: ActionNone}
	p, err := p.withDefaults()
	if err != nil {
		d.Reason = err.Error()
		return d
	}
	if state == nil {
		state = new(KeyState)
	}
	if math.IsNaN(rate) || rate < 0 {
		rate = 0
	}
	n := max(currentN, 1)
	per := rate / float64(n)
	target := p.target(rate)
	if p.HotRate > 0 {
		if done := p.decideTier(now, rate, currentN, target, state, &d); done {
			return d
		}
	}
	if p.NoBudget {
		state.CoolingSince = time.Time{}
		d.Reason = fmt.Sprintf("hot: %.0f writes/s on %d sub-counters", rate, currentN)
		return d
	}
	switch {
	case per > p.Budget && target > currentN:
		state.CoolingSince = time.Time{}
		state.LastChange = now
		d.Action, d.To = ActionGrow, target
		d.Reason = fmt.Sprintf("%.0f writes/s on %d sub-counters is %.0f/s each, over the budget of %.0f/s",
			rate, currentN, per, p.Budget)
	case per > p.Budget:
		state.CoolingSince = time.Time{}
		d.Reason = fmt.Sprintf("%.0f/s per sub-counter is over the budget of %.0f/s, but N is at its maximum of %d",
			per, p.Budget, p.MaxN)
	case per < p.ShrinkBelow*p.Budget && target < currentN:
		if state.CoolingSince.IsZero() || now.Before(state.CoolingSince) {
			state.CoolingSince = now
		}
		cool := now.Sub(state.CoolingSince)
		if cool < p.Hysteresis {
			d.Reason = fmt.Sprintf("cooling for %v of %v: %.0f/s per sub-counter is under %.0f/s",
				cool.Round(time.Millisecond), p.Hysteresis, per, p.ShrinkBelow*p.Budget)
			break
		}
		state.CoolingSince = time.Time{}
		state.LastChange = now
		d.Action, d.To = ActionShrink, target
		d.Reason = fmt.Sprintf("%.0f/s per sub-counter stayed under %.0f/s for %v",
			per, p.ShrinkBelow*p.Budget, cool.Round(time.Millisecond))
	default:
		state.CoolingSince = time.Time{}
		d.Reason = fmt.Sprintf("%.0f/s per sub-counter is within the budget of %.0f/s", per, p.Budget)
	}
	return d
}

// decideTier applies HotRate: it decides a cold key's growth and a hot
// key's return to one sub-counter, and reports whether it decided (false:
// the key is hot and stays hot; the budget decides the rest).
func (p Policy) decideTier(now time.Time, rate float64, currentN, target int, state *KeyState, d *Decision) bool {
	switch {
	case currentN <= 1 && rate > p.HotRate && p.MinN > 1:
		to := p.MinN
		if !p.NoBudget {
			to = max(to, target)
		}
		state.CoolingSince = time.Time{}
		state.LastChange = now
		d.Action, d.To = ActionGrow, to
		d.Reason = fmt.Sprintf("%.0f writes/s passes the hot rate of %.0f/s: %d sub-counters", rate, p.HotRate, to)
		return true
	case currentN <= 1:
		state.CoolingSince = time.Time{}
		d.Reason = fmt.Sprintf("cold: %.0f writes/s, the hot rate is %.0f/s", rate, p.HotRate)
		return true
	case rate < p.ShrinkBelow*p.HotRate:
		if state.CoolingSince.IsZero() || now.Before(state.CoolingSince) {
			state.CoolingSince = now
		}
		cool := now.Sub(state.CoolingSince)
		if cool < p.Hysteresis {
			d.Reason = fmt.Sprintf("cooling for %v of %v: %.0f writes/s is under %.0f/s",
				cool.Round(time.Millisecond), p.Hysteresis, rate, p.ShrinkBelow*p.HotRate)
			return true
		}
		state.CoolingSince = time.Time{}
		state.LastChange = now
		d.Action, d.To = ActionShrink, 1
		d.Reason = fmt.Sprintf("%.0f writes/s stayed under %.0f/s for %v: back to one sub-counter",
			rate, p.ShrinkBelow*p.HotRate, cool.Round(time.Millisecond))
		return true
	}
	return false
}
