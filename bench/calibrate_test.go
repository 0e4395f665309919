package bench

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"
)

// modelNode is a node that serves at most capacity increments per second:
// below it every offered increment is acknowledged at once (latency base);
// above it the node achieves its capacity and the queue's wait makes the
// latency climb with the excess.
func modelNode(capacity float64, base time.Duration) func(rate float64) (CalibrationStep, error) {
	return func(rate float64) (CalibrationStep, error) {
		st := CalibrationStep{AchievedPerSec: math.Min(rate, capacity), Latency: Latency{P50Ms: ms(base)}}
		if rate > capacity {
			// Half a window of backlog, on average, at capacity.
			backlog := (rate - capacity) * 0.5
			st.Latency.P50Ms = ms(base + time.Duration(backlog/capacity*float64(time.Second)))
		}
		return st, nil
	}
}

// TestCalibrationRampFindsCeiling: driven against model nodes of many
// capacities, the ramp ends within calMaxSteps with a ceiling within 25%
// of the capacity (the acceptance's bound for single at 3x), never above
// it, and its steps are marked kept up exactly below the capacity.
func TestCalibrationRampFindsCeiling(t *testing.T) {
	for _, capacity := range []float64{15, 80, 700, 1000, 5012, 9000, 20000, 150000} {
		steps, best, err := calibrationRamp(context.Background(), modelNode(capacity, 300*time.Microsecond))
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) == 0 || len(steps) > calMaxSteps || best < 0 {
			t.Fatalf("capacity %v: %d steps, best %d", capacity, len(steps), best)
		}
		ceiling := steps[best].AchievedPerSec
		if ceiling > capacity || ceiling < 0.75*capacity {
			t.Errorf("capacity %v: ceiling %v (steps %+v)", capacity, ceiling, steps)
		}
		for _, st := range steps {
			if want := st.OfferedPerSec <= capacity; st.KeptUp != want {
				t.Errorf("capacity %v: step at %v kept up %v, want %v", capacity, st.OfferedPerSec, st.KeptUp, want)
			}
		}
	}
}

// TestCalibrationRampLatencyClimb: a node that acknowledges every offered
// increment, but ever later past 4,000/s (a queue in front of it), has
// its ceiling where the latency climbed, not at the top rate offered.
func TestCalibrationRampLatencyClimb(t *testing.T) {
	steps, best, err := calibrationRamp(context.Background(), func(rate float64) (CalibrationStep, error) {
		p50 := 500 * time.Microsecond
		if rate > 4000 {
			p50 = 20 * time.Millisecond
		}
		return CalibrationStep{AchievedPerSec: rate, Latency: Latency{P50Ms: ms(p50)}}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var top float64
	for _, st := range steps {
		if st.KeptUp {
			top = max(top, st.OfferedPerSec)
		}
		if st.KeptUp != (st.OfferedPerSec <= 4000) {
			t.Errorf("step %+v", st)
		}
	}
	if top < 4000/calResolution || top > 4000 {
		t.Errorf("highest rate kept up with %v, want within %v of 4000 (steps %+v, best %d)", top, calResolution, steps, best)
	}
}

// TestCalibrationRampStops: a node that keeps up with nothing ends the
// ramp below calMinRate with no ceiling; a failed step ends it with its
// error; a cancelled context ends it.
func TestCalibrationRampStops(t *testing.T) {
	steps, best, err := calibrationRamp(context.Background(), func(float64) (CalibrationStep, error) {
		return CalibrationStep{}, nil
	})
	if err != nil || best != -1 || len(steps) == 0 || len(steps) > calMaxSteps || steps[len(steps)-1].OfferedPerSec/calGrowth >= calMinRate {
		t.Errorf("dead node: %d steps, best %d, err %v: %+v", len(steps), best, err, steps)
	}
	boom := errors.New("boom")
	if _, _, err := calibrationRamp(context.Background(), func(float64) (CalibrationStep, error) {
		return CalibrationStep{}, boom
	}); !errors.Is(err, boom) {
		t.Errorf("failing step: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	n := 0
	_, _, err = calibrationRamp(ctx, func(rate float64) (CalibrationStep, error) {
		if n++; n == 2 {
			cancel()
		}
		return CalibrationStep{AchievedPerSec: rate}, nil
	})
	if !errors.Is(err, context.Canceled) || n != 2 {
		t.Errorf("cancelled: %d steps, %v", n, err)
	}
}
