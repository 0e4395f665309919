package bench

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
)

// cluster is the 3-primary, 3-replica cluster of this package's tests.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	code := testenv.Main(m, testenv.ClusterOptions{Primaries: 3, Replicas: 1}, &cluster)
	if code == 0 {
		// rueidis closes the connections a topology refresh superseded
		// after a 5 s sleep in a goroutine of its own; that one may
		// outlive a closed client. A connection that closes (one whose
		// handshake timed out, in the open-retry tests) schedules a
		// refresh after a random delay of up to about a second, in a
		// goroutine that may outlive the client too.
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"), goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// evenRunID returns a run id for which the naive labels of key:sharded:id
// spread n sub-counters evenly over the 3 primaries, and logs how often
// naive labels do that for arbitrary keys (the slots depend only on the
// key; the cluster's slot ranges are fixed).
func evenRunID(t *testing.T, ctx context.Context, key string, n int) string {
	t.Helper()
	c, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: cluster.Seeds()}, Defaults: hotcount.Namespace{NoColdStart: true, N: n}, Reads: hotcount.ReadConfig{NoCache: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	topo, err := c.Store().Topology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	even := func(k string) bool {
		per := map[string]int{}
		for _, l := range keyspace.NaiveLabels(n) {
			per[topo.NodeOf(keyspace.SubKey(k, l))]++
		}
		for _, v := range per {
			if v != n/3 {
				return false
			}
		}
		return len(per) == 3
	}
	hits := 0
	const tries = 1000
	id := ""
	for i := range tries {
		cand := "t" + strconv.Itoa(i)
		if even(key + ":" + string(Sharded) + ":" + cand) {
			hits++
			if id == "" {
				id = cand
			}
		}
	}
	t.Logf("naive labels: %d of %d keys spread %d sub-counters evenly over 3 primaries", hits, tries, n)
	if id == "" {
		t.Fatalf("no key among %d spreads evenly", tries)
	}
	return id
}

func TestRunShardedNaiveLabels(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	const key = "bench:naive"
	for _, id := range []string{evenRunID(t, ctx, key, 6), "any"} {
		rep, err := Run(ctx, Config{
			Redis: cluster.Seeds(), Key: key, Modes: []Mode{Sharded}, N: 6, NaiveLabels: true,
			Procs: 4, Rate: 4000, Duration: time.Second, RunID: id,
		})
		if err != nil {
			t.Fatal(err)
		}
		r := rep.Runs[0]
		t.Logf("run id %s: labels by node %v, placed share %.3f, max node share %.3f", id, r.LabelsByNode, r.PlacementNodeShare, r.MaxNodeShare)
		if !r.Exact || math.Abs(r.MaxNodeShare-r.PlacementNodeShare) > 0.05 {
			t.Errorf("exact %v, max node share %v, want within 0.05 of the placement's %v", r.Exact, r.MaxNodeShare, r.PlacementNodeShare)
		}
		if id != "any" && r.PlacementNodeShare != 1.0/3 {
			t.Errorf("even key: placement share %v", r.PlacementNodeShare)
		}
	}
}

func TestRunEveryModeExact(t *testing.T) {
	testenv.Retry(t, testenv.Tries, func(t *testing.T) error {
		ctx := testCtx(t, 90*time.Second)
		const key = "bench:test"
		cfg := Config{
			Redis:    cluster.Seeds(),
			Key:      key,
			Modes:    Modes,
			N:        6,
			Procs:    8,
			Rate:     4000,
			Duration: 2 * time.Second,
			Rounds:   2,
			Flush:    200 * time.Millisecond,
		}
		var progress int
		cfg.Progress = func(p Progress) {
			if p.Steps != 8 || p.Step < 1 || p.Step > 8 || p.Elapsed > p.Window {
				t.Errorf("progress %+v", p)
			}
			progress++
		}
		rep, err := Run(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		if progress == 0 {
			t.Error("Progress was never called")
		}
		if rep.Backend != "redis" || len(rep.Primaries) != 3 || rep.Rounds != 2 || len(rep.Runs) != 4 {
			t.Fatalf("report %+v", rep)
		}
		// The keys were cleared, whatever else happened.
		defer func() {
			for _, r := range rep.Runs {
				c, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: cluster.Seeds()}, Defaults: hotcount.Namespace{NoColdStart: true, N: r.N}, Reads: hotcount.ReadConfig{NoCache: true}, Timeout: 10 * time.Second})
				if err != nil {
					t.Fatal(err)
				}
				if got, err := c.Get(ctx, r.Key); err != nil || got.Value != 0 {
					t.Errorf("%s: %q after the run = %d, %v; want 0", r.Mode, r.Key, got.Value, err)
				}
				c.Close(ctx)
			}
		}()
		for _, r := range rep.Runs {
			t.Logf("%s: n %d sent %d total %d exact %v incr/s %.0f writes %d (drain %d) writes/s %.1f share %.3f placed %.3f by node %v reads cached %+v uncached %+v raw %+v %v",
				r.Mode, r.N, r.Sent, r.Total, r.Exact, r.IncrPerSec, r.CacheWrites, r.DrainWrites, r.CacheWritesPerSec,
				r.MaxNodeShare, r.PlacementNodeShare, r.WritesByNode, r.ReadCached, r.ReadUncached, r.ReadRaw, r.Problems)
		}
		// On a busy machine an Incr or a sampled read can time out: the
		// increment's outcome is unknown, so the total can only be
		// bounded, not checked for exactness. Such a run is tried again.
		if err := timedOut(t, rep.Runs); err != nil {
			return err
		}
		byMode := map[Mode]Result{}
		for _, r := range rep.Runs {
			byMode[r.Mode] = r
			if !r.Exact || r.Total != r.Sent || r.Sent == 0 || r.Errors != 0 {
				t.Errorf("%s: sent %d, total %d, errors %d, exact %v", r.Mode, r.Sent, r.Total, r.Errors, r.Exact)
			}
			if r.IdealNodeShare != 1.0/3 {
				t.Errorf("%s: ideal share %v, want 1/3", r.Mode, r.IdealNodeShare)
			}
			if r.ReadCached.Samples == 0 || r.ReadUncached.Samples == 0 || r.ReadRaw.Samples == 0 || r.ReadErrors != 0 {
				t.Errorf("%s: read samples %+v %+v %+v, %d errors", r.Mode, r.ReadCached, r.ReadUncached, r.ReadRaw, r.ReadErrors)
			}
			if !strings.HasPrefix(r.Key, key+":"+string(r.Mode)+":") {
				t.Errorf("%s: key %q", r.Mode, r.Key)
			}
		}
		single, sharded, buffered, combined := byMode[Single], byMode[Sharded], byMode[Buffered], byMode[Combined]
		// Unbuffered, every increment is one INCRBY.
		for _, r := range []Result{single, sharded} {
			if r.CacheWrites != r.Sent || r.CacheWritesPerIncr != 1 || r.DrainWrites != 0 {
				t.Errorf("%s: %d writes for %d increments", r.Mode, r.CacheWrites, r.Sent)
			}
		}
		if single.MaxNodeShare != 1 || single.PlacementNodeShare != 1 {
			t.Errorf("single: max node share %v, placed %v; want 1", single.MaxNodeShare, single.PlacementNodeShare)
		}
		// Placed labels put 2 of the 6 sub-counters on each primary.
		if sharded.PlacementNodeShare != 1.0/3 || math.Abs(sharded.MaxNodeShare-1.0/3) > 0.05 {
			t.Errorf("sharded: max node share %v (placed %v), want within 0.05 of 1/3", sharded.MaxNodeShare, sharded.PlacementNodeShare)
		}
		if len(sharded.WritesByNode) != 3 {
			t.Errorf("sharded writes by node %v", sharded.WritesByNode)
		}
		// Buffered: at most one write per instance per flush (plus the
		// drain), far below one per increment.
		for _, r := range []Result{buffered, combined} {
			limit := int64(cfg.Procs) * (int64(cfg.Duration/cfg.Flush) + 2*int64(cfg.Rounds))
			if r.CacheWrites == 0 || r.CacheWrites > limit || r.CacheWrites*20 > r.Sent {
				t.Errorf("%s: %d writes for %d increments (limit %d)", r.Mode, r.CacheWrites, r.Sent, limit)
			}
			if r.CacheWritesPerIncr >= 0.05 {
				t.Errorf("%s: %v writes per increment", r.Mode, r.CacheWritesPerIncr)
			}
		}
		if buffered.MaxNodeShare != 1 {
			t.Errorf("buffered writes one key, max node share %v", buffered.MaxNodeShare)
		}
		if rep.RatioBase != string(Single) || len(rep.Ratios) != 4 || rep.Ratios[string(Single)].IncrPerSec != 1 {
			t.Errorf("ratios %v against %q", rep.Ratios, rep.RatioBase)
		}
		return nil
	})
}

// timedOut checks runs that met errors: every error must be a timeout
// (the cache unavailable, a deadline exceeded) and the total must lie
// between the acknowledged increments and those plus the failed ones. It
// returns nil if no run met an error, else why the runs prove no exact
// total.
func timedOut(t *testing.T, runs []Result) error {
	t.Helper()
	var errs, reads int64
	for _, r := range runs {
		if r.Errors == 0 && r.ReadErrors == 0 && len(r.Problems) == 0 {
			continue
		}
		errs += r.Errors
		reads += int64(r.ReadErrors)
		for _, p := range r.Problems {
			if !strings.Contains(p, "unavailable") && !strings.Contains(p, "deadline exceeded") {
				t.Errorf("%s: %s, want only timeouts", r.Mode, p)
			}
		}
		if r.Total < r.Sent || r.Total > r.Sent+r.Errors {
			t.Errorf("%s: total %d, want between the %d acknowledged and %d (with the %d of unknown outcome)",
				r.Mode, r.Total, r.Sent, r.Sent+r.Errors, r.Errors)
		}
	}
	if errs == 0 && reads == 0 {
		return nil
	}
	return fmt.Errorf("%d increments and %d sampled reads timed out on a busy machine, so no total could be checked for exactness", errs, reads)
}

func TestRunUnpacedKeep(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	rep, err := Run(ctx, Config{
		Redis: cluster.Seeds(), Key: "bench:unpaced", Modes: []Mode{Combined},
		Procs: 4, Duration: 500 * time.Millisecond, Keep: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Runs[0]
	if !r.Exact || r.Sent == 0 || r.Total != r.Sent {
		t.Errorf("run %+v", r)
	}
	if rep.Ratios != nil || rep.RatioBase != "" {
		t.Errorf("one mode has ratios %v", rep.Ratios)
	}
	c, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: cluster.Seeds()}, Defaults: hotcount.Namespace{NoColdStart: true, N: r.N}, Reads: hotcount.ReadConfig{NoCache: true}, Timeout: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	if got, err := c.Get(ctx, r.Key); err != nil || got.Value != r.Sent {
		t.Errorf("kept %q = %d, %v; want %d", r.Key, got.Value, err, r.Sent)
	}
	if err := c.Clear(ctx, r.Key); err != nil {
		t.Fatal(err)
	}
}

func TestRunCancelledReportsWhatRan(t *testing.T) {
	ctx, cancel := context.WithCancel(testCtx(t, 30*time.Second))
	cfg := Config{
		Redis: cluster.Seeds(), Key: "bench:cancel", Modes: []Mode{Buffered, Single},
		Procs: 2, Rate: 1000, Duration: 20 * time.Second, Rounds: 1,
	}
	cfg.Progress = func(p Progress) {
		if p.Elapsed >= 300*time.Millisecond {
			cancel()
		}
	}
	rep, err := Run(ctx, cfg)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	if len(rep.Runs) != 1 || rep.Runs[0].Mode != Buffered || !rep.Runs[0].Exact || rep.Runs[0].Sent == 0 {
		t.Fatalf("report %+v", rep.Runs)
	}
	if rep.Runs[0].Seconds >= 10 {
		t.Errorf("the cancelled window ran %v s", rep.Runs[0].Seconds)
	}
}

func TestRunEmbedded(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	rep, err := Run(ctx, Config{Key: "bench:mem", Modes: []Mode{Single, Buffered}, Procs: 3, Rate: 3000, Duration: 400 * time.Millisecond, Rounds: 2})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Backend != "embedded" || len(rep.Primaries) != hotcount.DefaultEmbeddedNodes {
		t.Fatalf("report %+v", rep)
	}
	single, buffered := rep.Runs[0], rep.Runs[1]
	if !single.Exact || single.CacheWrites != single.Sent || single.MaxNodeShare != 1 {
		t.Errorf("single %+v", single)
	}
	if !buffered.Exact || buffered.CacheWrites == 0 || buffered.CacheWrites*20 > buffered.Sent {
		t.Errorf("buffered %+v", buffered)
	}
}

func TestRunBadConfig(t *testing.T) {
	if _, err := Run(t.Context(), Config{}); !errors.Is(err, ErrConfig) {
		t.Errorf("no key: %v", err)
	}
}

// TestRunCalibratedSweep calibrates on the test cluster, offers half the
// ceiling open-loop to sharded and combined at N = 1 and 3, and checks
// the accounting: the offered rate follows from the ceiling, every run is
// exact, every acknowledged increment was timed, the achieved ones are
// among those acknowledged, and utilisation is the nodes' write rates over
// the ceiling.
func TestRunCalibratedSweep(t *testing.T) {
	ctx := testCtx(t, 60*time.Second)
	rep, err := Run(ctx, Config{
		Redis: cluster.Seeds(), Key: "bench:sweep", Modes: []Mode{Sharded, Combined}, Ns: []int{1, 3},
		Procs: 2, Workers: 8, RateCeilings: 0.5, Calibrate: 500 * time.Millisecond,
		Duration: 600 * time.Millisecond, Rounds: 1, Flush: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	c := rep.Calibration
	if c == nil || c.IncrPerSec <= 0 || !slices.Contains(rep.Primaries, c.Node) || c.Procs != 2 || c.Workers != 8 || c.Errors != 0 {
		t.Fatalf("calibration %+v (primaries %v)", c, rep.Primaries)
	}
	if c.Latency.Samples == 0 || c.NodeWritesPerSec <= 0 || c.NodeCPU <= 0 {
		t.Errorf("calibration lacks figures: %+v", c)
	}
	// The last step holds twice the ramp's plateau (the runs' offer, half
	// of it, would not find the node's limit) for at least Calibrate, and
	// sets the ceiling.
	ramp, hold := c.Steps[:len(c.Steps)-1], c.Steps[len(c.Steps)-1]
	best := ceilingStep(ramp)
	if !hold.Hold || hold.OfferedPerSec != math.Round(2*plateau(ramp, best)) || hold.Seconds < 0.5 || c.IncrPerSec != ceiling(c.Steps, best) || slices.ContainsFunc(ramp, func(st CalibrationStep) bool { return st.Hold }) {
		t.Errorf("hold %+v, ceiling %v, steps %+v", hold, c.IncrPerSec, c.Steps)
	}
	// The hold's slices: calHoldSlices, or one fewer when the hold's
	// window ended at its last tick.
	if n := len(hold.SliceRates); n < calHoldSlices-1 || n > calHoldSlices || slices.ContainsFunc(hold.SliceRates, func(r float64) bool { return r < 0 }) {
		t.Errorf("hold's slice rates %v", hold.SliceRates)
	}
	if slices.ContainsFunc(ramp, func(st CalibrationStep) bool { return st.SliceRates != nil }) {
		t.Errorf("ramp steps have slice rates: %+v", ramp)
	}
	if want := math.Round(0.5 * c.IncrPerSec); rep.OfferedPerSec != want {
		t.Errorf("offered %v, want half the ceiling %v", rep.OfferedPerSec, want)
	}
	var labels []string
	for _, r := range rep.Runs {
		labels = append(labels, r.Label)
		t.Logf("%s: offered %.0f achieved %.0f (%.3f) latency %+v writes/s by node %v util %v dropped %d unserved %d",
			r.Label, r.OfferedPerSec, r.AchievedPerSec, r.Achieved, r.Latency, r.NodeWritesPerSec, r.NodeUtilisation, r.Dropped, r.Unserved)
		if !r.Exact || r.Sent == 0 || r.Errors != 0 {
			t.Errorf("%s: exact %v sent %d errors %d", r.Label, r.Exact, r.Sent, r.Errors)
		}
		if r.Latency.Samples != int(r.Sent) {
			t.Errorf("%s: %d latencies for %d increments", r.Label, r.Latency.Samples, r.Sent)
		}
		// Achieved counts per second of window (0.6 s, one round).
		if achieved := r.AchievedPerSec * 0.6; achieved > float64(r.Sent)*1.001 || r.AchievedPerSec > r.OfferedPerSec*1.001 {
			t.Errorf("%s: achieved %.0f/s over 0.6 s, sent %d, offered %.0f/s", r.Label, r.AchievedPerSec, r.Sent, r.OfferedPerSec)
		}
		for n, w := range r.NodeWritesPerSec {
			if u := r.NodeUtilisation[n]; math.Abs(u-w/c.IncrPerSec) > 0.001*max(1, u) {
				t.Errorf("%s: node %s utilisation %v, writes/s %v, ceiling %v", r.Label, n, u, w, c.IncrPerSec)
			}
		}
		if r.N > 1 && (r.ReadCached.Samples == 0 || r.ReadUncached.Samples == 0 || r.CachedVsUncached <= 0) {
			t.Errorf("%s: reads %+v %+v ratio %v", r.Label, r.ReadCached, r.ReadUncached, r.CachedVsUncached)
		}
	}
	if want := []string{"sharded n=1", "sharded n=3", "combined n=1", "combined n=3"}; !slices.Equal(labels, want) {
		t.Errorf("runs %v, want %v", labels, want)
	}
	if rep.RatioBase != "sharded n=1" || len(rep.Ratios) != 4 {
		t.Errorf("ratios %v against %q", rep.Ratios, rep.RatioBase)
	}
	var svg, text strings.Builder
	if err := rep.WriteSVG(&svg); err != nil || !strings.Contains(svg.String(), "<polyline") {
		t.Errorf("WriteSVG: %v", err)
	}
	if err := rep.WriteText(&text); err != nil || !strings.Contains(text.String(), "calibration: one node ("+c.Node+")") || !strings.Contains(text.String(), "held (the ceiling)") || !strings.Contains(text.String(), " slices: ") {
		t.Errorf("WriteText: %v\n%s", err, text.String())
	}
}
