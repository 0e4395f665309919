package hotkeys

import (
	"errors"
	"testing"
	"time"
)

func TestPolicyValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		p    Policy
		ok   bool
	}{
		{"zero", Policy{}, true},
		{"negative budget", Policy{Budget: -1}, false},
		{"headroom below 1", Policy{Headroom: 0.5}, false},
		{"shrink at 1", Policy{ShrinkBelow: 1}, false},
		{"min over max", Policy{MinN: 10, MaxN: 5}, false},
		{"max over limit", Policy{MaxN: LimitN + 1}, false},
		{"min only", Policy{MinN: 100}, true},
		{"negative hysteresis", Policy{Hysteresis: -time.Second}, false},
	} {
		err := tc.p.Validate()
		if (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v does not wrap ErrConfig", tc.name, err)
		}
	}
}

func TestPolicyTarget(t *testing.T) {
	p := Policy{Budget: 1000, Headroom: 1.5, MinN: 2, MaxN: 50}
	for _, tc := range []struct {
		rate float64
		want int
	}{
		{0, 2}, {100, 2}, {2000, 3}, {40000, 50}, {10000, 15}, {9999, 15}, {10001, 16},
	} {
		if got := p.Target(tc.rate); got != tc.want {
			t.Errorf("Target(%v) = %d, want %d", tc.rate, got, tc.want)
		}
	}
}

// step is one evaluation of a policy table test.
type step struct {
	at     time.Duration // since the start
	rate   float64
	action Action
	to     int
}

func TestPolicyDecide(t *testing.T) {
	p := Policy{Budget: 5000, Headroom: 1.5, MinN: 8, MaxN: 64, Hysteresis: 30 * time.Second, ShrinkBelow: 0.5}
	s := time.Second
	for _, tc := range []struct {
		name  string
		n     int
		steps []step
	}{
		{"within budget stays", 8, []step{
			{0, 100, ActionNone, 8}, {s, 39000, ActionNone, 8}, {2 * s, 40000, ActionNone, 8},
		}},
		{"crossing grows at once", 8, []step{
			{0, 100, ActionNone, 8}, {s, 40001, ActionGrow, 13},
		}},
		{"heat up and cool down", 8, []step{
			{0, 100, ActionNone, 8},
			{500 * time.Millisecond, 20000, ActionNone, 8},
			{1 * s, 80000, ActionGrow, 24},
			{2 * s, 120000, ActionNone, 24}, // exactly the budget: not over
			{3 * s, 130000, ActionGrow, 39},
			{4 * s, 130000, ActionNone, 39},
			{10 * s, 40000, ActionNone, 39}, // 1026/s each: cooling starts
			{39 * s, 100, ActionNone, 39},   // 29 s of cooling
			{40 * s, 100, ActionShrink, 8},  // 30 s: shrink to MinN
			{41 * s, 100, ActionNone, 8},
		}},
		{"cooling interrupted restarts hysteresis", 36, []step{
			{0, 10000, ActionNone, 36},      // 278/s each: cooling
			{20 * s, 10000, ActionNone, 36}, // still cooling
			{21 * s, 100000, ActionNone, 36},
			{22 * s, 10000, ActionNone, 36},  // cooling again from here
			{51 * s, 10000, ActionNone, 36},  // 29 s
			{52 * s, 10000, ActionShrink, 8}, // 30 s
		}},
		{"shrink goes to the needed N, not MinN", 64, []step{
			{0, 100000, ActionNone, 64},        // 1562/s each < 2500
			{30 * s, 100000, ActionShrink, 30}, // ceil(100000*1.5/5000)
			{31 * s, 100000, ActionNone, 30},   // 3333/s each: stable
			{90 * s, 100000, ActionNone, 30},
		}},
		{"capped at MaxN", 8, []step{
			{0, 1e7, ActionGrow, 64},
		}},
		{"at MaxN and still over", 64, []step{
			{0, 1e7, ActionNone, 64},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
			var st KeyState
			n := tc.n
			for i, sp := range tc.steps {
				d := p.Decide(start.Add(sp.at), "k", sp.rate, n, &st)
				if d.Action != sp.action || d.To != sp.to {
					t.Fatalf("step %d (t=%v rate=%v N=%d): %s to %d (%s), want %s to %d",
						i, sp.at, sp.rate, n, d.Action, d.To, d.Reason, sp.action, sp.to)
				}
				if d.Reason == "" || d.From != n || d.Key != "k" {
					t.Fatalf("step %d: incomplete decision %+v", i, d)
				}
				n = d.To
			}
		})
	}
}

// TestPolicyNoFlapping drives a key whose rate wanders around every
// threshold and checks that N only ever moves in one direction per trend:
// one grow while it hovers around the budget, never a shrink.
func TestPolicyNoFlapping(t *testing.T) {
	p := Policy{Budget: 1000, MinN: 8, Hysteresis: 30 * time.Second}
	start := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	var st KeyState
	n, grows, shrinks := 8, 0, 0
	for i := range 2000 {
		// 7000..9000 writes/s: around the 8000/s threshold of N=8.
		rate := 8000 + 1000*float64((i*7919)%21-10)/10
		d := p.Decide(start.Add(time.Duration(i)*500*time.Millisecond), "k", rate, n, &st)
		switch d.Action {
		case ActionGrow:
			grows++
		case ActionShrink:
			shrinks++
		}
		n = d.To
	}
	if grows != 1 || shrinks != 0 {
		t.Fatalf("%d grows and %d shrinks around the threshold, want 1 and 0 (N=%d)", grows, shrinks, n)
	}
	// Every decision the Policy can take leaves each sub-counter with at
	// most Budget/Headroom, which is under Budget: no grow right after a
	// shrink, no shrink right after a grow.
	acted := map[Action]int{}
	for rate := 1.0; rate < 1e6; rate *= 1.07 {
		for cur := 1; cur <= 64; cur *= 2 {
			s := KeyState{CoolingSince: start.Add(-time.Hour)}
			d := p.Decide(start, "k", rate, cur, &s)
			if d.Action == ActionNone {
				continue
			}
			acted[d.Action]++
			s.CoolingSince = start.Add(-time.Hour)
			again := p.Decide(start.Add(time.Hour), "k", rate, d.To, &s)
			if again.Action != ActionNone {
				t.Fatalf("rate %.0f N %d: %s to %d, then %s to %d", rate, cur, d.Action, d.To, again.Action, again.To)
			}
		}
	}
	if acted[ActionGrow] == 0 || acted[ActionShrink] == 0 {
		t.Fatalf("the sweep took no grow or no shrink decision: %v", acted)
	}
}

func TestPolicyInvalidDecidesNothing(t *testing.T) {
	d := Policy{Budget: -1}.Decide(time.Now(), "k", 1e9, 1, nil)
	if d.Action != ActionNone || d.Reason == "" {
		t.Fatalf("invalid policy decided %+v", d)
	}
}
