package bench

import (
	"context"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
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
// capacities, the ramp ends within calMaxSteps with the capacity as its
// ceiling, and its steps are marked kept up exactly below the capacity.
func TestCalibrationRampFindsCeiling(t *testing.T) {
	for _, capacity := range []float64{15, 80, 700, 1000, 5012, 9000, 20000, 150000} {
		steps, best, err := calibrationRamp(context.Background(), modelNode(capacity, 300*time.Microsecond))
		if err != nil {
			t.Fatal(err)
		}
		if len(steps) == 0 || len(steps) > calMaxSteps || best < 0 {
			t.Fatalf("capacity %v: %d steps, best %d", capacity, len(steps), best)
		}
		if ceiling := plateau(steps, best); ceiling != capacity {
			t.Errorf("capacity %v: ceiling %v (steps %+v)", capacity, ceiling, steps)
		}
		for _, st := range steps {
			if want := st.OfferedPerSec <= capacity; st.KeptUp != want {
				t.Errorf("capacity %v: step at %v kept up %v, want %v", capacity, st.OfferedPerSec, st.KeptUp, want)
			}
		}
		if last := steps[len(steps)-1]; len(steps) < calMaxSteps && (last.KeptUp || last.OfferedPerSec < 2*capacity) {
			t.Errorf("capacity %v: ended on %+v", capacity, last)
		}
	}
}

// TestCalibrationRampDeepBacklog: a capped node that serves more under a
// deeper backlog (like a node capped at 0.5% of a CPU that a calibration
// stopping where it fell behind put at 1,714/s, and single at three times
// that took 4,986/s) is driven on past the first rate it falls behind,
// until three steps in a row add nothing; the ceiling is its plateau.
func TestCalibrationRampDeepBacklog(t *testing.T) {
	served := map[float64]float64{1000: 976, 2000: 1714, 4000: 3600, 8000: 4986, 16000: 5100, 32000: 5150, 64000: 5150}
	steps, best, err := calibrationRamp(context.Background(), func(rate float64) (CalibrationStep, error) {
		return CalibrationStep{AchievedPerSec: served[rate]}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(steps) != 7 || best != 5 || steps[best].AchievedPerSec != 5150 || plateau(steps, best) != 5150 {
		t.Errorf("best %d of %+v, want the 7 steps up to 64,000/s and 5,150/s", best, steps)
	}
	for i, st := range steps {
		if st.KeptUp != (i == 0) {
			t.Errorf("step %+v", st)
		}
	}
}

// TestCalibrationRampTwoFlatSteps: a capped node that serves no more for
// two steps and then more again (as one at 0.3% of a CPU did: 2,977/s at
// 8,000/s offered, 3,112/s, 3,200/s, then 4,348/s) is driven to the
// step that grows; a ramp that stopped after two flat steps put the
// ceiling near 3,100/s.
func TestCalibrationRampTwoFlatSteps(t *testing.T) {
	served := map[float64]float64{1000: 999, 2000: 1505, 4000: 2025, 8000: 2977, 16000: 3112, 32000: 3200, 64000: 4348, 128000: 3705, 256000: 3538, 512000: 3600}
	steps, best, err := calibrationRamp(context.Background(), func(rate float64) (CalibrationStep, error) {
		return CalibrationStep{AchievedPerSec: served[rate]}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if best != 6 || len(steps) != 10 {
		t.Fatalf("best %d of %d steps, want the step at 64,000/s of 10: %+v", best, len(steps), steps)
	}
	if got, want := plateau(steps, best), (4348.0+3705+3538+3600)/4; got != want {
		t.Errorf("ceiling %v, want %v", got, want)
	}
}

// TestCalibrationRampStops: a node that serves nothing ends the ramp
// after three steps with no ceiling; a failed step ends it with its error;
// a cancelled context ends it.
func TestCalibrationRampStops(t *testing.T) {
	steps, best, err := calibrationRamp(context.Background(), func(float64) (CalibrationStep, error) {
		return CalibrationStep{}, nil
	})
	if err != nil || best != -1 || len(steps) != 1+calFlatSteps {
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

// TestCalibrationPlateau: the ceiling is the mean of the best step and
// those after it (a capped node's last three steps at 0.3% of a CPU).
func TestCalibrationPlateau(t *testing.T) {
	steps := []CalibrationStep{{AchievedPerSec: 832}, {AchievedPerSec: 1992}, {AchievedPerSec: 7430}, {AchievedPerSec: 6457}, {AchievedPerSec: 5188}}
	if best := ceilingStep(steps); best != 2 {
		t.Fatalf("best %d", best)
	}
	if got, want := plateau(steps, 2), (7430.0+6457+5188)/3; got != want {
		t.Errorf("plateau %v, want %v", got, want)
	}
	if plateau(nil, -1) != 0 {
		t.Error("plateau of nothing")
	}
}

// TestCalibrationHold: the hold step offers the runs' own offer (the
// multiple of the ramp's plateau) when they are offered one, else the
// best step's offer; the ceiling is the hold's achieved rate, or the
// plateau without a hold.
func TestCalibrationHold(t *testing.T) {
	steps := []CalibrationStep{
		{OfferedPerSec: 1000, AchievedPerSec: 1000, Seconds: 1},
		{OfferedPerSec: 64000, AchievedPerSec: 10000, Seconds: 1},
		{OfferedPerSec: 128000, AchievedPerSec: 8000, Seconds: 1},
	}
	if got := holdRate(steps, 1, 3); got != 27000 {
		t.Errorf("hold rate at 3x: %v, want 27000", got)
	}
	if got := holdRate(steps, 1, 0); got != 64000 {
		t.Errorf("hold rate without a multiple: %v, want the best step's 64000", got)
	}
	// Runs offered less than twice the ceiling: the hold offers twice the
	// plateau all the same, so that the node is the limit, not the offer.
	if got := holdRate(steps, 1, 0.5); got != 18000 {
		t.Errorf("hold rate at 0.5x: %v, want twice the plateau, 18000", got)
	}
	low := []CalibrationStep{{OfferedPerSec: 1000, AchievedPerSec: 1000}, {OfferedPerSec: 2000, AchievedPerSec: 1500}}
	if got := holdRate(low, 1, 0); got != 3000 {
		t.Errorf("hold rate after a best step offered less than twice its plateau: %v, want 3000", got)
	}
	if got := holdRate(nil, -1, 3); got != 0 {
		t.Errorf("hold rate without steps: %v", got)
	}
	if got := ceiling(steps, 1); got != 9000 {
		t.Errorf("ceiling without a hold: %v, want the plateau 9000", got)
	}
	held := append(steps, CalibrationStep{OfferedPerSec: 27000, AchievedPerSec: 7000, Seconds: 6, Hold: true})
	if got := ceiling(held, 1); got != 7000 {
		t.Errorf("ceiling with a hold: %v, want its 7000", got)
	}
	// A hold that kept up did not find the node's limit: the ceiling is at
	// least the plateau.
	kept := append(steps, CalibrationStep{OfferedPerSec: 18000, AchievedPerSec: 8000, Seconds: 6, Hold: true, KeptUp: true})
	if got := ceiling(kept, 1); got != 9000 {
		t.Errorf("ceiling with a hold that kept up below the plateau: %v, want the plateau 9000", got)
	}
	kept[len(kept)-1].AchievedPerSec = 17500
	if got := ceiling(kept, 1); got != 17500 {
		t.Errorf("ceiling with a hold that kept up above the plateau: %v, want its 17500", got)
	}
	failed := append(steps, CalibrationStep{OfferedPerSec: 27000, Hold: true})
	if got := ceiling(failed, 1); got != 9000 {
		t.Errorf("ceiling with an empty hold: %v, want the plateau 9000", got)
	}
}

// TestCalibrationKeyOn: the calibration key lands on the node of the
// single run's key, on a topology of many nodes, and is the base key
// without a topology.
func TestCalibrationKeyOn(t *testing.T) {
	for _, n := range []int{1, 3, 8, 100} {
		nodes := make([]string, n)
		for i := range nodes {
			nodes[i] = "10.0.0." + strconv.Itoa(i) + ":6379"
		}
		topo := store.Even(nodes)
		for _, single := range []string{"k:single:a", "story:single:mxa3bpc6", "x"} {
			key := calibrationKeyOn(topo, "k:calibrate:a", single)
			if !strings.HasPrefix(key, "k:calibrate:a") {
				t.Fatalf("key %q", key)
			}
			if got, want := topo.NodeOf(keyspace.SubKey(key, "0")), topo.NodeOf(keyspace.SubKey(single, "0")); got != want {
				t.Errorf("%d nodes: %q is on %s, %q on %s", n, key, got, single, want)
			}
		}
	}
	if got := calibrationKeyOn(nil, "k:calibrate:a", "k:single:a"); got != "k:calibrate:a" {
		t.Errorf("no topology: %q", got)
	}
}
