package bench

import (
	"errors"
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
	if s.workers(Single) != DefaultWorkers || s.workers(Buffered) != 1 {
		t.Errorf("workers: %d, %d", s.workers(Single), s.workers(Buffered))
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
