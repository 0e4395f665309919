package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// Calibration is one node's single-key INCR ceiling, measured with the
// bench's own client and the open-loop generator of the runs (see the
// package documentation).
type Calibration struct {
	// Node is the node that holds the calibration key.
	Node string `json:"node"`
	// Key is the counter driven (cleared afterwards).
	Key string `json:"key"`
	// Procs and Workers describe the load: Procs instances of Workers
	// goroutines each, fed by the open-loop dispatcher.
	Procs   int `json:"procs"`
	Workers int `json:"workers"`
	// Seconds is how long the node was driven, over all steps.
	Seconds float64 `json:"seconds"`
	// IncrPerSec is the ceiling: the rate the hold step achieved, or
	// without one the ramp's plateau (see ceiling).
	IncrPerSec float64 `json:"incr_per_sec"`
	// NodeWritesPerSec is the node's INCRBY rate during the step that
	// set the ceiling (INFO commandstats); it matches IncrPerSec unless
	// other clients wrote to the node.
	NodeWritesPerSec float64 `json:"node_writes_per_sec"`
	// NodeCPU is the part of one CPU the node's process used during that
	// step (INFO cpu): near its quota when the node was the limit, below
	// it when the generator was.
	NodeCPU float64 `json:"node_cpu"`
	// Latency is that of the increments of that step.
	Latency Latency `json:"latency"`
	// Errors counts failed increments, over all steps.
	Errors int64 `json:"errors"`
	// Steps are the offered rates, in the order tried, and what each
	// achieved; the last is the hold step when there is one.
	Steps []CalibrationStep `json:"steps"`
}

// CalibrationStep is one offered rate of the calibration.
type CalibrationStep struct {
	// OfferedPerSec is the rate scheduled; AchievedPerSec is the
	// increments of the step acknowledged per second, from its start to
	// the last acknowledgement (increments still queued when its window
	// ended are not sent).
	OfferedPerSec  float64 `json:"offered_per_sec"`
	AchievedPerSec float64 `json:"achieved_per_sec"`
	// Latency is from each increment's scheduled start (the wait in the
	// generator's queue included) to its acknowledgement.
	Latency Latency `json:"latency"`
	// KeptUp says whether the node kept up: it achieved 95% of the
	// offered rate.
	KeptUp bool `json:"kept_up"`
	// NodeWritesPerSec and NodeCPU are the node's, over the step.
	NodeWritesPerSec float64 `json:"node_writes_per_sec"`
	NodeCPU          float64 `json:"node_cpu"`
	// Seconds is how long the step drove the node.
	Seconds float64 `json:"seconds"`
	// Hold marks the step that follows the ramp: the runs' offer, held
	// for a run's window (see holdRate).
	Hold bool `json:"hold,omitempty"`
	// SliceRates, of the hold only, is the rate acknowledged in each of
	// calHoldSlices equal slices of it, in order: how much a capped
	// node's rate moved within the window that set the ceiling (on a node
	// at 1% of a CPU, single seconds of one window ranged from 3,100 to
	// 11,723/s), and so how far a run's rate may fall from the ceiling
	// by chance.
	SliceRates []float64 `json:"slice_rates,omitempty"`
}

// calHoldSlices is the number of slices of the hold whose rates the
// report gives (one a second for a hold of 6 s).
const calHoldSlices = 6

// The calibration's ramp: it offers calStartRate, then twice the rate of
// the step before, as long as a step keeps up (achieves calKeepUp of what
// it was offered) or raises the most achieved so far by calGrowthMin;
// calFlatSteps steps in a row that do neither end it (one or two may be
// slices of a capped node's CPU period that fell outside the window: a
// node at 0.3% of a CPU grew again after a flat step, and a ramp that
// stopped after two put the ceiling at 2,125/s where the run that
// followed took 3,096/s from it), as does
// calMaxSteps. A node that falls behind is offered more still: a capped
// node serves more commands per slice of CPU under a deeper backlog, and
// a run offered a multiple of the ceiling meets it with that backlog.
//
// After the ramp, a hold step offers what the runs will offer (see
// holdRate) for a run's window, at least Config.Calibrate, and the ceiling
// is what the hold achieved. A ramp step lasts a third of
// Config.Calibrate, on a node capped at 1% of a CPU ten CFS periods: at
// one backlog, one step took 2,800/s and the next 10,582/s. And a capped
// node took more from the ramp's late offers (64,000/s and up) than from
// a run's 3x: in three alternated pairs of single runs, 200,000/s offered
// drew 7,494, 7,799 and 6,398/s where 27,000/s drew 6,392, 7,280 and
// 5,166/s. With the ramp's plateau as the ceiling, single at 3x took 0.57
// to 1.25 of it in 32 runs (0.87 on average); with the hold's, 0.63 to
// 1.49 in 46 (41 within 25%; two back-to-back runs of single alone at
// one offer were more than 25% apart in 1 of 11 pairs).
const (
	calStartRate = 1000.0
	calGrowth    = 2.0
	calGrowthMin = 1.1
	calKeepUp    = 0.95
	calFlatSteps = 3
	calMaxSteps  = 12
	// calStepShare is the part of Config.Calibrate each step lasts (at
	// least minSegment): a calibration runs at most calMaxSteps of them.
	calStepShare = 3
)

// nextCalibrationRate returns the rate the next step offers, or done when
// the ramp has found the ceiling (see the constants above). It marks each
// step's KeptUp.
func nextCalibrationRate(steps []CalibrationStep) (rate float64, done bool) {
	var best float64
	flat := 0 // steps in a row that neither kept up nor grew
	for i := range steps {
		st := &steps[i]
		st.KeptUp = st.AchievedPerSec >= calKeepUp*st.OfferedPerSec
		if i > 0 && !st.KeptUp && !(st.AchievedPerSec > calGrowthMin*best) {
			flat++
		} else {
			flat = 0
		}
		best = max(best, st.AchievedPerSec)
	}
	if flat >= calFlatSteps {
		return 0, true
	}
	switch {
	case len(steps) == 0:
		return calStartRate, false
	case len(steps) >= calMaxSteps:
		return 0, true
	}
	return steps[len(steps)-1].OfferedPerSec * calGrowth, false
}

// calibrationRamp runs the ramp: measure drives one step at the rate
// given. It returns the steps and the index of the one with the highest
// achieved rate (where the plateau starts), or -1 when there is none.
func calibrationRamp(ctx context.Context, measure func(rate float64) (CalibrationStep, error)) ([]CalibrationStep, int, error) {
	var steps []CalibrationStep
	for ctx.Err() == nil {
		rate, done := nextCalibrationRate(steps)
		if done {
			break
		}
		st, err := measure(rate)
		if err != nil {
			return steps, ceilingStep(steps), err
		}
		st.OfferedPerSec = rate
		steps = append(steps, st)
	}
	nextCalibrationRate(steps) // marks the last step
	return steps, ceilingStep(steps), ctx.Err()
}

// ceilingStep returns the index of the step that achieved the most, or
// -1 for none.
func ceilingStep(steps []CalibrationStep) int {
	best := -1
	for i, st := range steps {
		if st.AchievedPerSec > 0 && (best < 0 || st.AchievedPerSec > steps[best].AchievedPerSec) {
			best = i
		}
	}
	return best
}

// plateau returns the ramp's plateau: the mean of what the step that
// achieved the most (best) and every step after it achieved. The ramp
// ends with steps past the node's ceiling, so these are the node's rate
// under a backlog, and their mean is less lifted by one lucky step than
// their maximum. The hold step is not one of them (see ceiling).
func plateau(steps []CalibrationStep, best int) float64 {
	if best < 0 {
		return 0
	}
	var sum float64
	for _, st := range steps[best:] {
		sum += st.AchievedPerSec
	}
	return sum / float64(len(steps)-best)
}

// holdRate returns the rate the hold step offers: the runs' own offer,
// rateCeilings times the ramp's plateau, when they are offered a multiple
// of the ceiling, else the offer of the step that achieved the most (best);
// at least calHoldMin times the plateau, so that the node, not the offer,
// is the limit (runs offered half the ceiling would otherwise calibrate at
// half of it); 0 when there is no such step.
func holdRate(steps []CalibrationStep, best int, rateCeilings float64) float64 {
	if best < 0 {
		return 0
	}
	p := plateau(steps, best)
	rate := steps[best].OfferedPerSec
	if rateCeilings > 0 {
		rate = rateCeilings * p
	}
	return math.Round(max(rate, calHoldMin*p))
}

// calHoldMin is the least multiple of the ramp's plateau that the hold
// step offers.
const calHoldMin = 2.0

// ceiling returns the calibrated ceiling of steps whose best step is best:
// the hold step's achieved rate when the last step is one, else the
// plateau. A hold that kept up did not find the node's limit, so its
// ceiling is at least the plateau.
func ceiling(steps []CalibrationStep, best int) float64 {
	n := len(steps)
	if n == 0 || !steps[n-1].Hold {
		return plateau(steps, best)
	}
	hold, ramp := steps[n-1], plateau(steps[:n-1], best)
	switch {
	case hold.AchievedPerSec <= 0:
		return ramp
	case hold.KeptUp:
		return max(hold.AchievedPerSec, ramp)
	}
	return hold.AchievedPerSec
}

// calibrationKeyOn returns the key the calibration drives: base, or base
// with a suffix ":1", ":2", ... that puts its one sub-counter on the node
// of the single run's key, so that the ceiling is that of the node single
// then drives. A counter of N=1 has the label "0" with naive and with
// placed labels alike. Past calKeySearch candidates it returns base.
func calibrationKeyOn(t *store.Topology, base, single string) string {
	if t == nil || len(t.Nodes) == 0 {
		return base
	}
	want := t.NodeOf(keyspace.SubKey(single, "0"))
	for i := range calKeySearch {
		key := base
		if i > 0 {
			key += ":" + strconv.Itoa(i)
		}
		if t.NodeOf(keyspace.SubKey(key, "0")) == want {
			return key
		}
	}
	return base
}

// calKeySearch bounds calibrationKeyOn's search: a node that owns a
// 1/1000 of the slots is missed by it with a chance of e^-10.
const calKeySearch = 10_000

// calibrate measures the single-key ceiling of the node that holds the
// calibration key: the ramp above, each step an open-loop window of the
// generator the runs use (drive with a rate).
func calibrate(ctx context.Context, s *settings, b backend) (*Calibration, error) {
	cfg := hotcount.Config{Defaults: hotcount.Namespace{N: 1, NoColdStart: true}, Meta: hotcount.MetaConfig{NaiveLabels: s.NaiveLabels}, Timeout: openCallTimeout}
	checker, err := openRetrying(ctx, b, hotcount.Config{Defaults: hotcount.Namespace{N: 1, NoColdStart: true}, Reads: hotcount.ReadConfig{NoCache: true}, Meta: hotcount.MetaConfig{NaiveLabels: s.NaiveLabels}, Timeout: checkTimeout}, defaultOpenRetry)
	if err != nil {
		return nil, err
	}
	defer checker.Close(context.Background())
	topo, err := checker.Store().Topology(ctx)
	if err != nil {
		return nil, fmt.Errorf("calibration: %w", err)
	}
	key := calibrationKeyOn(topo, s.calibrationKey(), s.runKey(variant{Single, 1}))
	for _, d := range []int64{1, -1} { // settles the label, as runRound does
		if err := checker.Incr(ctx, key, d); err != nil {
			return nil, fmt.Errorf("calibration: %w", err)
		}
	}
	subs, err := checker.SubKeys(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("calibration: %w", err)
	}
	node := topo.NodeOf(subs[0])
	cal := &Calibration{Node: node, Key: key, Procs: s.Procs, Workers: s.openWorkers(1)}
	defer func() {
		cctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		if err := checker.Clear(cctx, key); err == nil {
			_ = checker.Store().Del(cctx, []string{keyspace.MetaKey(key)})
		}
	}()

	ins, err := openInstances(ctx, b, cfg, s.Procs, defaultOpenRetry)
	if err != nil {
		return nil, fmt.Errorf("calibration: opening %d instances: %w", s.Procs, err)
	}
	defer closeInstances(ins)
	window := max(s.Calibrate/calStepShare, minSegment)
	measure := func(rate float64, window time.Duration, slices int) (CalibrationStep, error) {
		for _, in := range ins {
			in.lat.reset()
		}
		before, err := b.calls(ctx, []string{node})
		if err != nil {
			return CalibrationStep{}, fmt.Errorf("calibration: %w", err)
		}
		t0 := sum(ins)
		cpu0, cpuErr := b.cpuSeconds(ctx, node)
		rates := sliceRates(ins, window, slices)
		elapsed := drive(ctx, ins, key, rate, window, cal.Workers)
		cctx, cancel := context.WithTimeout(context.Background(), checkTimeout)
		defer cancel()
		cpu1, err := b.cpuSeconds(cctx, node)
		cpuErr = errors.Join(cpuErr, err)
		after, err := b.calls(cctx, []string{node})
		if err != nil {
			return CalibrationStep{}, fmt.Errorf("calibration: %w", err)
		}
		t1 := sum(ins)
		cal.Seconds += elapsed.Seconds()
		// What the node served of the step's schedule, over the time
		// until the last of it was acknowledged: increments still queued
		// when the window ended are not sent, those in flight finish.
		st := CalibrationStep{
			AchievedPerSec:   float64(t1.sent-t0.sent) / elapsed.Seconds(),
			Latency:          latencies(ins).latency(),
			NodeWritesPerSec: float64(b.writes(after[node].minus(before[node]))) / elapsed.Seconds(),
			Seconds:          elapsed.Seconds(),
			SliceRates:       rates(),
		}
		if cpuErr == nil {
			st.NodeCPU = (cpu1 - cpu0) / elapsed.Seconds()
		}
		return st, nil
	}
	steps, best, err := calibrationRamp(ctx, func(rate float64) (CalibrationStep, error) { return measure(rate, window, 0) })
	if rate := holdRate(steps, best, s.RateCeilings); err == nil && rate > 0 {
		var st CalibrationStep
		if st, err = measure(rate, max(s.Calibrate, s.segment, minSegment), calHoldSlices); err == nil {
			st.OfferedPerSec, st.Hold = rate, true
			st.KeptUp = st.AchievedPerSec >= calKeepUp*rate
			steps = append(steps, st)
		}
	}
	cal.Steps = steps
	t := sum(ins)
	cal.Errors = t.failed
	if best >= 0 {
		c := steps[best]
		if last := steps[len(steps)-1]; last.Hold {
			c = last
		}
		cal.IncrPerSec, cal.NodeWritesPerSec, cal.NodeCPU, cal.Latency = ceiling(steps, best), c.NodeWritesPerSec, c.NodeCPU, c.Latency
	}
	if err != nil {
		return cal, err
	}
	if t.sent == 0 || best < 0 {
		if t.lastErr != nil {
			return cal, fmt.Errorf("calibration: no increment succeeded: %w", t.lastErr)
		}
		return cal, fmt.Errorf("calibration: no increment succeeded in %v", time.Duration(cal.Seconds*float64(time.Second)))
	}
	return cal, nil
}

// sliceRates samples the increments ins acknowledge in each of n equal
// slices of a window that starts now, in the background; the function it
// returns waits for the samples and gives the rate of each slice (none
// for n 0, fewer when the window ended early).
func sliceRates(ins []*instance, window time.Duration, n int) func() []float64 {
	if n <= 0 {
		return func() []float64 { return nil }
	}
	done := make(chan struct{})
	out := make(chan []float64, 1)
	go func() {
		var rates []float64
		defer func() { out <- rates }()
		tick := time.NewTicker(window / time.Duration(n))
		defer tick.Stop()
		last, at := sum(ins).sent, time.Now()
		for range n {
			select {
			case <-done:
				return
			case now := <-tick.C:
				sent := sum(ins).sent
				rates = append(rates, math.Round(float64(sent-last)/now.Sub(at).Seconds()))
				last, at = sent, now
			}
		}
	}()
	return func() []float64 {
		close(done)
		return <-out
	}
}
