package simulate

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/xml"
	"errors"
	"io"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// small is a quick configuration for tests.
func small() Config {
	return Config{Keys: 2000, Seconds: 20, Trials: 20_000, Seed: 7}
}

func byName(t *testing.T, r *Result) map[Strategy]StrategyResult {
	t.Helper()
	m := map[Strategy]StrategyResult{}
	for _, s := range r.Strategies {
		m[s.Strategy] = s
	}
	return m
}

func TestRunDefaults(t *testing.T) {
	cfg := small()
	before := cfg
	r, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(cfg, before) {
		t.Error("Run modified its config")
	}
	if len(r.Strategies) != len(AllStrategies) {
		t.Fatalf("%d strategies, want %d", len(r.Strategies), len(AllStrategies))
	}
	for i, s := range r.Strategies {
		if s.Strategy != AllStrategies[i] {
			t.Errorf("strategy %d is %s, want %s", i, s.Strategy, AllStrategies[i])
		}
	}
	c := r.Config
	if c.Nodes != DefaultNodes || c.N != DefaultN || c.Capacity != DefaultCapacity || c.FlushMS != 500 {
		t.Errorf("defaults not applied: %+v", c)
	}
	if math.Abs(r.PAllDistinctExact-0.198403) > 1e-6 || math.Abs(r.PAllDistinctMonteCarlo-r.PAllDistinctExact) > 0.02 {
		t.Errorf("p_all_distinct exact %v, Monte Carlo %v", r.PAllDistinctExact, r.PAllDistinctMonteCarlo)
	}
	m := byName(t, r)
	single, random, placed := m[Single], m[ShardedRandom], m[ShardedPlaced]
	buffered, combined, auto := m[Buffered], m[Combined], m[Auto]
	// Viral 40000/s on one 10000/s node: single is far over capacity.
	if single.PeakUtilisation < 4 || single.SecondsOverCapacity == 0 {
		t.Errorf("single: %+v", single)
	}
	// 8 placed labels on 20 nodes: distinct nodes, 5000/s each.
	if placed.Collisions != 0 || placed.ReadNodes != 8 || placed.ReadKeys != 8 || placed.MaxSubCountersPerNode != 1 {
		t.Errorf("placed spread: %+v", placed)
	}
	if placed.PeakUtilisation >= single.PeakUtilisation || placed.PeakUtilisation > random.PeakUtilisation {
		t.Errorf("placed peak %v, random %v, single %v", placed.PeakUtilisation, random.PeakUtilisation, single.PeakUtilisation)
	}
	if random.ReadKeys != 8 || random.Collisions != random.ReadKeys-random.ReadNodes {
		t.Errorf("random: %+v", random)
	}
	// Buffering: the viral key sends P/D = 200 writes/s instead of 40000.
	if buffered.MeanCacheWritesPerSec >= single.MeanCacheWritesPerSec/2 || buffered.SecondsOverCapacity != 0 {
		t.Errorf("buffered: %+v vs single %+v", buffered, single)
	}
	if buffered.LossWindowMS != 500 || combined.LossWindowMS != 500 || placed.LossWindowMS != 0 {
		t.Errorf("loss windows: %v %v %v", buffered.LossWindowMS, combined.LossWindowMS, placed.LossWindowMS)
	}
	if combined.N != 8 || combined.SecondsOverCapacity != 0 {
		t.Errorf("combined: %+v", combined)
	}
	// Auto: budget 5000/s per sub-counter, 40000/s → 8 sub-counters.
	if auto.N != 8 || auto.SplitKeys < 1 || auto.PeakUtilisation >= single.PeakUtilisation {
		t.Errorf("auto: %+v", auto)
	}
}

func TestRunHandWorkedMeans(t *testing.T) {
	// Ramp 1 (a step): each second the viral key sends 40000/s and the
	// background 0.1·20·10000 = 20000/s, so single's mean cache writes are
	// exactly 60000. Buffered: the viral key sends 200·(1-e^-200) = 200.
	r, err := Run(context.Background(), Config{Keys: 500, Seconds: 5, RampSeconds: 1, Trials: 10, Strategies: []Strategy{Single, Buffered, Auto}})
	if err != nil {
		t.Fatal(err)
	}
	m := byName(t, r)
	if got := m[Single].MeanCacheWritesPerSec; math.Abs(got-60000) > 1e-6 {
		t.Errorf("single mean writes = %v, want 60000", got)
	}
	bg := 0.0
	for _, x := range zipfRates(500, DefaultZipfS, 20000) {
		bg += bufferedRate(x, 100, 0.5)
	}
	if got := m[Buffered].MeanCacheWritesPerSec; math.Abs(got-(bg+200)) > 1e-6 {
		t.Errorf("buffered mean writes = %v, want %v", got, bg+200)
	}
	// Auto sizes from the previous second: at t=0 it saw 0/s, so the step
	// lands on one sub-counter for one second: 4× capacity, 1 s over.
	if a := m[Auto]; a.SecondsOverCapacity != 1 || a.PeakSecond != 0 || a.N != 8 {
		t.Errorf("auto: %+v", a)
	}
}

func TestRunDeterministic(t *testing.T) {
	a, err := Run(context.Background(), small())
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(context.Background(), small())
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		t.Error("same seed, different results")
	}
	cfg := small()
	cfg.Rand = newRand(7) // the stream Seed 7 selects
	c, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a.Strategies, c.Strategies) || a.PAllDistinctMonteCarlo != c.PAllDistinctMonteCarlo {
		t.Error("injected Rand with the same stream gave a different result")
	}
	cfg = small()
	cfg.Seed = 8
	d, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if d.PAllDistinctMonteCarlo == a.PAllDistinctMonteCarlo {
		t.Error("a different seed gave the same Monte Carlo estimate")
	}
}

func TestRunInvalid(t *testing.T) {
	cases := []struct {
		name string
		mod  func(*Config)
		want string
	}{
		{"negative nodes", func(c *Config) { c.Nodes = -1 }, "nodes"},
		{"too many nodes", func(c *Config) { c.Nodes = MaxNodes + 1 }, "nodes"},
		{"too many keys", func(c *Config) { c.Keys = MaxKeys + 1 }, "keys"},
		{"n", func(c *Config) { c.N = MaxN + 1 }, "n must"},
		{"capacity", func(c *Config) { c.Capacity = -5 }, "capacity"},
		{"infinite viral", func(c *Config) { c.ViralRate = math.Inf(1) }, "viral"},
		{"NaN zipf", func(c *Config) { c.ZipfS = math.NaN() }, "zipf"},
		{"budget", func(c *Config) { c.KeyBudget = 2 }, "budget"},
		{"flush", func(c *Config) { c.Flush = time.Microsecond }, "flush"},
		{"seconds", func(c *Config) { c.Seconds = -1 }, "seconds"},
		{"strategy", func(c *Config) { c.Strategies = []Strategy{"magic"} }, "magic"},
		{"key", func(c *Config) { c.ViralKey = "a{b}" }, "viral key"},
	}
	for _, c := range cases {
		cfg := small()
		c.mod(&cfg)
		_, err := Run(context.Background(), cfg)
		if !errors.Is(err, ErrInvalidConfig) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want ErrInvalidConfig mentioning %q", c.name, err, c.want)
		}
	}
	if _, err := ParseStrategy("auto"); err != nil {
		t.Error(err)
	}
	if _, err := ParseStrategy("nope"); !errors.Is(err, ErrInvalidConfig) {
		t.Errorf("ParseStrategy(nope) = %v", err)
	}
}

func TestRunCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := Run(ctx, small()); !errors.Is(err, context.Canceled) {
		t.Errorf("err = %v, want context.Canceled", err)
	}
}

func TestOutputs(t *testing.T) {
	r, err := Run(context.Background(), small())
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteCSV(&b, r); err != nil {
		t.Fatal(err)
	}
	rows, err := csv.NewReader(&b).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1+len(AllStrategies) || !reflect.DeepEqual(rows[0], csvHeader) || rows[1][0] != "single" {
		t.Errorf("CSV rows: %q", rows)
	}
	b.Reset()
	if err := WriteSVG(&b, r); err != nil {
		t.Fatal(err)
	}
	svg := b.String()
	dec := xml.NewDecoder(strings.NewReader(svg))
	bars := 0
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("SVG is not well-formed XML: %v\n%s", err, svg)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "title" {
			bars++
		}
	}
	if bars != len(AllStrategies) || !strings.HasPrefix(svg, "<svg") {
		t.Errorf("SVG has %d bars:\n%s", bars, svg)
	}
	b.Reset()
	if err := WriteText(&b, r); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "sharded-placed") || !strings.Contains(b.String(), "0.1984 exact") {
		t.Errorf("text output:\n%s", b.String())
	}
	if err := WriteSVG(failWriter{}, r); err == nil {
		t.Error("WriteSVG hid a write error")
	}
}

type failWriter struct{}

func (failWriter) Write([]byte) (int, error) { return 0, errors.New("disk full") }

// BenchmarkSimulate1000Nodes times the full model at 1,000 nodes and
// 1,000,000 keys, 60 s, all strategies, 100,000 Monte Carlo trials.
func BenchmarkSimulate1000Nodes(b *testing.B) {
	cfg := Config{Nodes: 1000, Keys: 1_000_000, Seed: 1}
	for b.Loop() {
		if _, err := Run(context.Background(), cfg); err != nil {
			b.Fatal(err)
		}
	}
}
