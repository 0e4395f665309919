package bench

import (
	"bytes"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestHistBuckets(t *testing.T) {
	for d := time.Duration(128); d < 100*time.Second; d = d*17/16 + 1 {
		mid := bucketMid(bucketOf(d))
		if rel := math.Abs(float64(mid-d)) / float64(d); rel > 1.0/16 {
			t.Fatalf("%v lands in a bucket whose middle is %v (%.1f%% off)", d, mid, 100*rel)
		}
	}
	if bucketOf(-time.Second) != 0 || bucketOf(time.Nanosecond) != 0 || bucketOf(time.Hour) != histBuckets-1 {
		t.Error("out-of-range latencies are not clamped to the first and last bucket")
	}
	var h hist
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Millisecond)
	}
	l := h.latency()
	if l.Samples != 1000 || math.Abs(l.P50Ms-500)/500 > 0.07 || math.Abs(l.P99Ms-990)/990 > 0.07 {
		t.Errorf("latency %+v, want 1000 samples, p50 ~500 ms, p99 ~990 ms", l)
	}
	var m hist
	m.merge(&h)
	m.merge(&h)
	if got := m.latency(); got.Samples != 2000 || got.P50Ms != l.P50Ms {
		t.Errorf("merged %+v", got)
	}
	if (&hist{}).latency() != (Latency{}) {
		t.Error("an empty histogram has samples")
	}
}

func TestParseCPU(t *testing.T) {
	got, err := parseCPU("# CPU\r\nused_cpu_sys:1.250000\r\nused_cpu_user:2.500000\r\nused_cpu_sys_children:9\r\n")
	if err != nil || got != 3.75 {
		t.Errorf("parseCPU = %v, %v; want 3.75", got, err)
	}
	for _, bad := range []string{"", "used_cpu_sys:1\r\n", "used_cpu_sys:x\r\nused_cpu_user:1\r\n"} {
		if _, err := parseCPU(bad); err == nil {
			t.Errorf("parseCPU(%q) succeeded", bad)
		}
	}
}

func TestValidateSweep(t *testing.T) {
	now := time.UnixMilli(1_700_000_000_000)
	s, err := Config{Key: "k", Modes: []Mode{Single, Sharded, Buffered, Combined}, Ns: []int{1, 8}, Duration: 8 * time.Second}.validate(now)
	if err != nil {
		t.Fatal(err)
	}
	want := []variant{{Single, 1}, {Sharded, 1}, {Sharded, 8}, {Buffered, 1}, {Combined, 1}, {Combined, 8}}
	if !slices.Equal(s.variants, want) || !s.sweep {
		t.Fatalf("variants %v (sweep %v), want %v", s.variants, s.sweep, want)
	}
	if got := s.runKey(variant{Sharded, 8}); got != "k:sharded-n8:"+s.RunID {
		t.Errorf("sweep key %q", got)
	}
	if got := s.label(variant{Combined, 8}); got != "combined n=8" {
		t.Errorf("label %q", got)
	}
	if got := s.label(variant{Single, 1}); got != "single" {
		t.Errorf("label %q", got)
	}
	s, err = Config{Key: "k", Modes: []Mode{Sharded}, Ns: []int{5}}.validate(now)
	if err != nil || s.N != 5 || s.sweep || !slices.Equal(s.variants, []variant{{Sharded, 5}}) {
		t.Errorf("one N: %+v, %v", s, err)
	}
	if s.runKey(variant{Sharded, 5}) != "k:sharded:"+s.RunID {
		t.Errorf("one N changes the key: %q", s.runKey(variant{Sharded, 5}))
	}
	for _, bad := range []Config{
		{Key: "k", Ns: []int{1, 1}},
		{Key: "k", Ns: []int{0}},
		{Key: "k", Calibrate: -time.Second},
		{Key: "k", RateCeilings: 4},                                    // needs the calibration
		{Key: "k", RateCeilings: 4, Calibrate: time.Second, Rate: 100}, // both
		{Key: "k", RateCeilings: -1, Calibrate: time.Second},           // negative
		{Key: "k", RateCeilings: math.NaN(), Calibrate: time.Second},   // not a number
	} {
		if _, err := bad.validate(now); !errors.Is(err, ErrConfig) {
			t.Errorf("validate(%+v) = %v, want ErrConfig", bad, err)
		}
	}
}

// TestOpenWorkers checks the open-loop callers: openInFlight over all
// instances on one node (single mode, the calibration), and on a key
// spread over several nodes enough to carry the offered rate at
// openCallBudget per call, up to openInFlight per node.
func TestOpenWorkers(t *testing.T) {
	budget := openCallBudget.Seconds()
	for _, tc := range []struct {
		procs, workers, nodes int
		rate                  float64
		want                  int
	}{
		{1, 0, 1, 1, openInFlight},
		{8, 0, 1, 1, openInFlight / 8},
		{8, 0, 1, 1e9, openInFlight / 8},
		{8, 0, 0, 1e9, openInFlight / 8},
		{8, 0, 8, 1, openInFlight / 8},
		{8, 0, 8, 15_000, int(15_000*budget+7) / 8},
		{8, 0, 8, 1e9, openInFlight},
		{8, 0, 2, 1e9, 2 * openInFlight / 8},
		{100, 0, 1, 1, (openInFlight + 99) / 100},
		{1, 0, 16, 1e9, MaxWorkers},
		{10_000, 0, 1, 1, DefaultWorkers},
		{8, 3, 8, 1e9, 3},
	} {
		s := settings{Config: Config{Procs: tc.procs, Workers: tc.workers, Rate: tc.rate}}
		if got := s.openWorkers(tc.nodes); got != tc.want {
			t.Errorf("procs %d workers %d nodes %d rate %v: %d open workers, want %d", tc.procs, tc.workers, tc.nodes, tc.rate, got, tc.want)
		}
		if got := s.workers(Sharded, tc.nodes); got != tc.want {
			t.Errorf("procs %d workers %d nodes %d rate %v: paced sharded has %d workers, want %d", tc.procs, tc.workers, tc.nodes, tc.rate, got, tc.want)
		}
	}
	s := settings{Config: Config{Procs: 8}}
	if got := s.workers(Sharded, 8); got != DefaultWorkers {
		t.Errorf("unpaced sharded has %d workers, want %d", got, DefaultWorkers)
	}
}

// TestServeBoundsInFlight checks that an open-loop instance issues each
// queued increment in a call of its own, with at most inFlight calls out
// at once, and that an increment waits in the queue only while they are.
func TestServeBoundsInFlight(t *testing.T) {
	const inFlight, total = 3, 10
	var in instance
	q := make(chan time.Duration, total)
	for k := range total {
		q <- time.Duration(k)
	}
	close(q)
	start := time.Now()
	end := start.Add(time.Hour)
	entered := make(chan time.Duration, total)
	release := make(chan struct{})
	var out, most atomic.Int64
	done := make(chan struct{})
	go func() {
		defer close(done)
		in.serve(t.Context(), q, start, end, inFlight, func(at time.Duration, _ time.Time) {
			n := out.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			entered <- at
			<-release
			out.Add(-1)
		})
	}()
	// The first inFlight calls start without any returning.
	seen := map[time.Duration]bool{}
	for range inFlight {
		seen[<-entered] = true
	}
	select {
	case at := <-entered:
		t.Fatalf("increment %v issued while %d calls were out", at, inFlight)
	default:
	}
	// Each call that returns lets one more start.
	for len(seen) < total {
		release <- struct{}{}
		seen[<-entered] = true
	}
	close(release)
	<-done
	if most.Load() != inFlight {
		t.Errorf("at most %d calls out at once, want %d", most.Load(), inFlight)
	}
	if in.unserved.Load() != 0 || in.wait.latency().Samples != total {
		t.Errorf("%d unserved, %d waits recorded; want 0 and %d", in.unserved.Load(), in.wait.latency().Samples, total)
	}
}

// TestServeAfterEnd checks that increments still queued when the window
// has ended are counted as unserved and never issued.
func TestServeAfterEnd(t *testing.T) {
	var in instance
	q := make(chan time.Duration, 5)
	for k := range 5 {
		q <- time.Duration(k)
	}
	close(q)
	end := time.Now()
	in.serve(t.Context(), q, end.Add(-time.Second), end, 2, func(time.Duration, time.Time) {
		t.Error("an increment was issued after the window")
	})
	if in.unserved.Load() != 5 || in.wait.latency().Samples != 0 {
		t.Errorf("%d unserved, %d issued; want 5 and 0", in.unserved.Load(), in.wait.latency().Samples)
	}
}

// TestDispatchOpenLoop checks that the dispatcher schedules every
// increment of the window at k/rate, round robin, and drops (counting)
// what full queues cannot take, without waiting for anyone to serve them.
func TestDispatchOpenLoop(t *testing.T) {
	const rate, window, capacity = 20_000.0, 50 * time.Millisecond, 100
	ins := []*instance{{}, {}}
	queues := []chan time.Duration{make(chan time.Duration, capacity), make(chan time.Duration, capacity)}
	start := time.Now()
	dispatch(t.Context(), ins, queues, rate, start, start.Add(window))
	total := int64(window.Seconds() * rate)
	dropped := ins[0].dropped.Load() + ins[1].dropped.Load()
	if queued := int64(len(queues[0]) + len(queues[1])); queued != 2*capacity || queued+dropped != total {
		t.Fatalf("%d queued, %d dropped; want %d queued of %d", queued, dropped, 2*capacity, total)
	}
	for i, q := range queues {
		close(q)
		k := int64(i)
		for at := range q {
			if want := time.Duration(float64(k) / rate * float64(time.Second)); at != want {
				t.Fatalf("queue %d: increment %d scheduled at %v, want %v", i, k, at, want)
			}
			k += 2
		}
	}
}

func TestWriteSVG(t *testing.T) {
	rep := &Report{
		Primaries:     []string{"a", "b", "c", "d"},
		OfferedPerSec: 20000,
		Calibration:   &Calibration{IncrPerSec: 5000},
		Runs: []Result{
			{Mode: Single, N: 1, AchievedPerSec: 5100},
			{Mode: Sharded, N: 2, AchievedPerSec: 10000},
			{Mode: Sharded, N: 4, AchievedPerSec: 19800},
			{Mode: Combined, N: 2, AchievedPerSec: 20000},
			{Mode: Combined, N: 4, AchievedPerSec: 20000},
		},
	}
	var b bytes.Buffer
	if err := rep.WriteSVG(&b); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	count := map[string]int{}
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, b.String())
		}
		if se, ok := tok.(xml.StartElement); ok {
			count[se.Name.Local]++
		}
	}
	// Points: single, sharded 2 and 4, combined 2 and 4; lines: sharded,
	// combined, capacity.
	if count["svg"] != 1 || count["circle"] != 5 || count["polyline"] != 3 {
		t.Errorf("elements %v:\n%s", count, b.String())
	}
	for _, want := range []string{"20k/s offered", "19.8k", "node ceiling", "5k/s"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("chart lacks %q", want)
		}
	}
	if err := (&Report{}).WriteSVG(io.Discard); !errors.Is(err, ErrNoChart) {
		t.Errorf("empty report: %v, want ErrNoChart", err)
	}
}

func TestSI(t *testing.T) {
	for v, want := range map[float64]string{0: "0", 950: "950", 5400: "5.4k", 20000: "20k", 1_250_000: "1.25M"} {
		if got := si(v); got != want {
			t.Errorf("si(%v) = %q, want %q", v, got, want)
		}
	}
	for v, want := range map[float64]float64{0.9: 1, 1.1: 1.2, 2.3: 2.4, 4: 4, 7: 8, 9: 10, 21000: 24000} {
		if got := niceCeil(v); got != want {
			t.Errorf("niceCeil(%v) = %v, want %v", v, got, want)
		}
	}
}
