package bench

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
)

func TestParseCommandStats(t *testing.T) {
	in := "# Commandstats\r\n" +
		"cmdstat_incrby:calls=12,usec=40,usec_per_call=3.33,rejected_calls=0,failed_calls=1\r\n" +
		"cmdstat_evalsha:calls=5,usec=400,usec_per_call=80.00,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_cluster|slots:calls=2,usec=9,usec_per_call=4.50,rejected_calls=0,failed_calls=0\r\n"
	got, err := parseCommandStats(in)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{"incrby": 12, "evalsha": 5, "cluster|slots": 2}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s = %d, want %d", k, got[k], v)
		}
	}
	for _, bad := range []string{"cmdstat_get:usec=3", "cmdstat_get:calls=x", "cmdstat_get:calls=-1"} {
		if _, err := parseCommandStats(bad); err == nil {
			t.Errorf("%q parsed", bad)
		}
	}
}

func TestWrites(t *testing.T) {
	if got := (&memBackend{}).writes(calls{incrby: 3, evalsha: 5, eval: 1}); got != 9 {
		t.Errorf("embedded writes = %d, want 9", got)
	}
	for _, tc := range []struct {
		calls map[string]int64
		want  int64
	}{
		{map[string]int64{}, 0},
		{map[string]int64{"incrby": 7, "get": 100}, 7},
		// Each script's INCRBY is counted under incrby too.
		{map[string]int64{"incrby": 5, "evalsha": 4, "eval": 1}, 5},
		{map[string]int64{"incrby": 15, "evalsha": 5}, 15},
		// Scripts that found their token used ran no INCRBY.
		{map[string]int64{"incrby": 3, "evalsha": 5}, 5},
	} {
		if got := (&redisBackend{}).writes(writeCalls(tc.calls)); got != tc.want {
			t.Errorf("redis writes(%v) = %d, want %d", tc.calls, got, tc.want)
		}
	}
}

func TestLatency(t *testing.T) {
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i)*time.Millisecond)
	}
	l := latency(ds)
	if l.Samples != 100 || l.P50Ms != 50 || l.P99Ms != 99 {
		t.Errorf("latency = %+v, want 100 samples, p50 50, p99 99", l)
	}
	if l := latency([]time.Duration{3 * time.Microsecond}); l.P50Ms != 0.003 || l.P99Ms != 0.003 {
		t.Errorf("one sample: %+v", l)
	}
	if l := latency(nil); l != (Latency{}) {
		t.Errorf("no samples: %+v", l)
	}
}

func TestParseModes(t *testing.T) {
	got, err := ParseModes(" single, combined ,")
	if err != nil || len(got) != 2 || got[0] != Single || got[1] != Combined {
		t.Fatalf("ParseModes = %v, %v", got, err)
	}
	for _, bad := range []string{"", ",", "fast", "single,single"} {
		if _, err := ParseModes(bad); !errors.Is(err, ErrConfig) {
			t.Errorf("ParseModes(%q) = %v, want ErrConfig", bad, err)
		}
	}
}

func TestValidate(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	s, err := Config{Key: "k"}.validate(now)
	if err != nil {
		t.Fatal(err)
	}
	if s.N != DefaultN || s.Procs != DefaultProcs || s.Duration != DefaultDuration || s.Flush != DefaultFlush ||
		s.Rounds != 1 || s.segment != DefaultDuration || len(s.Modes) != 1 || s.Modes[0] != Combined || s.RunID == "" {
		t.Errorf("defaults: %+v", s)
	}
	if s.workers(Single, 1) != DefaultWorkers || s.workers(Buffered, 1) != 1 {
		t.Errorf("workers: %d, %d", s.workers(Single, 1), s.workers(Buffered, 1))
	}
	if got := s.runKey(variant{Sharded, DefaultN}); got != "k:sharded:"+s.RunID {
		t.Errorf("runKey = %q", got)
	}
	modes := []Mode{Single, Combined}
	c := Config{Key: "k", Modes: modes, Duration: time.Second}
	s, err = c.validate(now)
	if err != nil || s.Rounds != DefaultCompareRounds || s.segment != time.Second/DefaultCompareRounds {
		t.Errorf("compare: %+v, %v", s, err)
	}
	s.Modes[0] = Buffered
	if modes[0] != Single {
		t.Error("validate shares the caller's Modes")
	}
	for _, bad := range []Config{
		{},
		{Key: "a{b}"},
		{Key: "k", Modes: []Mode{"x"}},
		{Key: "k", Modes: []Mode{Single, Single}},
		{Key: "k", N: -1},
		{Key: "k", Procs: MaxProcs + 1},
		{Key: "k", Rate: -1},
		{Key: "k", Duration: -time.Second},
		{Key: "k", Duration: time.Second, Rounds: 20},
		{Key: "k", Flush: -1},
		{Key: "k", Workers: -1},
		{Key: "k", ReadEvery: -1},
		{Key: strings.Repeat("k", 510)},
	} {
		if _, err := bad.validate(now); !errors.Is(err, ErrConfig) {
			t.Errorf("validate(%+v) = %v, want ErrConfig", bad, err)
		}
	}
}

func TestRatios(t *testing.T) {
	runs := []Result{
		{Mode: Sharded, IncrPerSec: 200, CacheWritesPerIncr: 1, MaxNodeShare: 0.5},
		{Mode: Single, IncrPerSec: 100, CacheWritesPerIncr: 1, MaxNodeShare: 1},
		{Mode: Buffered, IncrPerSec: 1500, CacheWritesPerIncr: 0.001, MaxNodeShare: 1},
	}
	base, r := ratios(runs)
	if base != string(Single) {
		t.Fatalf("base %q, want single", base)
	}
	if got := r["sharded"]; got != (Ratio{IncrPerSec: 2, CacheWritesPerIncr: 1, MaxNodeShare: 0.5}) {
		t.Errorf("sharded %+v", got)
	}
	if got := r["buffered"]; got != (Ratio{IncrPerSec: 15, CacheWritesPerIncr: 0.001, MaxNodeShare: 1}) {
		t.Errorf("buffered %+v", got)
	}
	if base, r := ratios(runs[:1]); base != "" || r != nil {
		t.Errorf("one run: %q %v", base, r)
	}
	base, _ = ratios([]Result{{Mode: Combined}, {Mode: Buffered}})
	if base != string(Combined) {
		t.Errorf("without single the base is the first mode, got %q", base)
	}
}

func TestParseProcStat(t *testing.T) {
	in := "cpu  100 10 50 800 40 5 5 0 7 0\ncpu0 50 5 25 400 20 2 3 0 0 0\nintr 1 2 3\n"
	busy, total, err := parseProcStat(in)
	// busy: user nice system irq softirq steal; guest is inside user.
	if err != nil || busy != 170 || total != 1010 {
		t.Errorf("parseProcStat = %v, %v, %v; want 170 busy of 1010", busy, total, err)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5\n", "cpu 1 x 3 4 5\n", "cpu 1 -2 3 4 5\n"} {
		if _, _, err := parseProcStat(bad); err == nil {
			t.Errorf("parseProcStat(%q) parsed", bad)
		}
	}
}

func TestCPUBetween(t *testing.T) {
	t0 := time.Unix(100, 0)
	a := cpuSample{at: t0, proc: time.Second, procOK: true, busy: 1000, total: 4000, statOK: true}
	b := cpuSample{at: t0.Add(2 * time.Second), proc: 2500 * time.Millisecond, procOK: true, busy: 1300, total: 4400, statOK: true}
	if got := cpuBetween(a, b, 2); got != (cpuUse{generator: 0.75, machine: 1.5, cpus: 2}) {
		t.Errorf("cpuBetween = %+v, want generator 0.75, machine 1.5 of 2", got)
	}
	b.procOK, b.statOK = false, false
	if got := cpuBetween(a, b, 2); got != (cpuUse{}) {
		t.Errorf("unread samples: %+v, want nothing", got)
	}
}

// TestAggregateOpenLoop checks what a paced run reports beside its
// achieved rate: the increments acknowledged after the window (sent, not
// achieved), the wait for a caller and the call, and the CPU of the
// generator, the machine and the nodes, weighted by each round's time.
func TestAggregateOpenLoop(t *testing.T) {
	s := &settings{Config: Config{Procs: 2, Rate: 1000}, segment: 4 * time.Second}
	wait, call := new(hist), new(hist)
	wait.add(time.Millisecond)
	call.add(200 * time.Millisecond)
	r := func(sent, achieved int64, elapsed time.Duration, gen, node float64) *round {
		return &round{
			tally:   tally{sent: sent, achieved: achieved, unserved: 5},
			total:   sent, // one round each: the base is 0
			lat:     new(hist),
			wait:    wait,
			call:    call,
			elapsed: elapsed,
			workers: 1024,
			cpu:     cpuUse{generator: gen, machine: 1.5, cpus: 2},
			nodeCPU: map[string]float64{"a": node, "b": node / 2},
		}
	}
	run := aggregate(s, variant{Sharded, 8}, []*round{r(4000, 3800, 5*time.Second, 0.2, 0.004)}, nil)
	if run.Late != 200 || run.Unserved != 5 || run.AchievedPerSec != 950 || run.Achieved != 0.95 {
		t.Errorf("late %d, unserved %d, achieved %v/s (%v); want 200, 5, 950/s (0.95)", run.Late, run.Unserved, run.AchievedPerSec, run.Achieved)
	}
	if run.Workers != 1024 {
		t.Errorf("workers %d, want 1024 (the round's)", run.Workers)
	}
	if run.QueueWait.Samples != 1 || run.Call.P50Ms < 190 || run.Call.P50Ms > 210 {
		t.Errorf("queue wait %+v, call %+v", run.QueueWait, run.Call)
	}
	if math.Abs(run.GeneratorCPU-0.2) > 1e-9 || run.MachineCPU != 1.5 || run.CPUs != 2 || run.MaxNodeCPU != 0.004 || run.NodeCPU["b"] != 0.002 {
		t.Errorf("CPU: generator %v, machine %v of %d, nodes %v (max %v)", run.GeneratorCPU, run.MachineCPU, run.CPUs, run.NodeCPU, run.MaxNodeCPU)
	}
	// Two rounds: CPU figures are weighted by the rounds' times.
	two := aggregate(s, variant{Sharded, 8}, []*round{r(4000, 4000, time.Second, 0.1, 0.004), r(4000, 4000, 3*time.Second, 0.5, 0.008)}, nil)
	if math.Abs(two.GeneratorCPU-0.4) > 1e-9 || math.Abs(two.NodeCPU["a"]-0.007) > 1e-9 {
		t.Errorf("two rounds: generator %v, node a %v; want 0.4 and 0.007", two.GeneratorCPU, two.NodeCPU["a"])
	}
	var b strings.Builder
	rep := &Report{Backend: "redis", Rounds: 1, OfferedPerSec: 1000, Runs: []Result{run}}
	if err := rep.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"5 still queued at the end of a window (not sent), 200 acknowledged after it (sent, not achieved)",
		"wait for a caller p50/p99",
		"(2×1024 callers)",
		"generator CPU 0.20, machine busy 1.50 of 2 CPUs, nodes' CPU 0.20%–0.40% of one CPU each",
		"95.0%",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, b.String())
		}
	}
}

// TestInstanceConfig checks the instances' client configuration: an
// unbuffered open-loop run waits openCallTimeout for each call, so that a
// node that falls behind answers late rather than leaving the outcome of
// an increment unknown; other runs keep the client's default.
func TestInstanceConfig(t *testing.T) {
	for _, tc := range []struct {
		rate float64
		v    variant
		want time.Duration
	}{
		{15_000, variant{Sharded, 8}, openCallTimeout},
		{15_000, variant{Single, 1}, openCallTimeout},
		{15_000, variant{Combined, 8}, 0},
		{0, variant{Sharded, 8}, 0},
	} {
		s := &settings{Config: Config{Rate: tc.rate, Flush: time.Second}}
		cfg := s.instanceConfig(tc.v)
		if cfg.Timeout != tc.want || cfg.Defaults.N != tc.v.n || cfg.Defaults.Buffered != tc.v.mode.buffered() || cfg.Defaults.FlushInterval != time.Second {
			t.Errorf("rate %v %v: %+v, want timeout %v", tc.rate, tc.v, cfg, tc.want)
		}
	}
}
