package main

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
)

func TestBenchBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--mode", "single"},
		{"--key", "k"},
		{"--key", "k", "--mode", "single", "--compare", "single,sharded"},
		{"--key", "k", "--mode", "fast"},
		{"--key", "k", "--mode", "single,combined"},
		{"--key", "k", "--compare", "single,single"},
		{"--key", "k", "--mode", "single", "--n", "0"},
		{"--key", "k", "--mode", "single", "--procs", "0"},
		{"--key", "k", "--mode", "single", "--duration", "0s"},
		{"--key", "k", "--mode", "single", "--flush", "0s"},
		{"--key", "k", "--mode", "single", "--rate", "-5"},
		{"--key", "k", "--mode", "single", "--rounds", "-1"},
		{"--key", "k", "--compare", "single,sharded", "--duration", "10ms"},
		{"--key", "a{b}", "--mode", "single"},
		{"--key", "k", "--mode", "single", "--nosuchflag"},
		{"--key", "k", "--mode", "single", "extra"},
		{"--key", "k", "--mode", "single", "--rate", "4x"}, // no --redis: no calibration
		{"--key", "k", "--mode", "single", "--rate", "0x", "--redis", "127.0.0.1:1"},
		{"--key", "k", "--mode", "single", "--rate", "fast"},
		{"--key", "k", "--mode", "single", "--redis", "127.0.0.1:1", "--rate", "4x", "--calibrate", "0s"},
		{"--key", "k", "--mode", "single", "--calibrate", "-1s"},
		{"--key", "k", "--mode", "sharded", "--n", "1,2,2"},
		{"--key", "k", "--mode", "sharded", "--n", "1,x"},
		// An SVG file that cannot be written is refused before the runs
		// (it was found after them, exit 1).
		{"--key", "k", "--mode", "single", "--duration", "300ms", "--svg", filepath.Join(t.TempDir(), "missing", "x.svg")},
		{"--key", "k", "--mode", "single", "--duration", "300ms", "--svg", t.TempDir()},
	} {
		var out, errb bytes.Buffer
		code := run(t.Context(), append([]string{"bench"}, args...), &out, &errb)
		lines := strings.Split(strings.TrimRight(errb.String(), "\n"), "\n")
		if code != exitUsage || len(lines) != 1 || lines[0] == "" || out.Len() != 0 {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want 2 and one line", args, code, out.String(), errb.String())
		}
	}
}

// benchJSON is the part of the JSON report the tests look at.
type benchJSON struct {
	Backend     string   `json:"backend"`
	Primaries   []string `json:"primaries"`
	Calibration *struct {
		Node       string  `json:"node"`
		IncrPerSec float64 `json:"incr_per_sec"`
	} `json:"calibration"`
	Runs []struct {
		Mode              string           `json:"mode"`
		IncrPerSec        float64          `json:"incr_per_sec"`
		CacheWritesPerSec float64          `json:"cache_writes_per_sec"`
		WritesByNode      map[string]int64 `json:"writes_by_node"`
		MaxNodeShare      float64          `json:"max_node_share"`
		IdealNodeShare    float64          `json:"ideal_node_share"`
		Exact             *bool            `json:"exact"`
		Sent              int64            `json:"sent"`
		Total             int64            `json:"total"`
	} `json:"runs"`
	RatioBase string                        `json:"ratio_base"`
	Ratios    map[string]map[string]float64 `json:"ratios"`
}

func runBenchJSON(t *testing.T, args ...string) (benchJSON, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(t.Context(), append([]string{"bench", "--json"}, args...), &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	var rep benchJSON
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("stdout is not JSON: %v\n%s", err, out.String())
	}
	return rep, errb.String()
}

func TestBenchCompareJSONEmbedded(t *testing.T) {
	rep, stderr := runBenchJSON(t, "--key", "cli:bench", "--compare", "single,combined",
		"--procs", "2", "--rate", "2000", "--duration", "600ms", "--rounds", "2", "--flush", "100ms")
	if !strings.Contains(stderr, "embedded store") {
		t.Errorf("stderr %q does not mention the embedded store", stderr)
	}
	if rep.Backend != "embedded" || len(rep.Primaries) != 3 || len(rep.Runs) != 2 {
		t.Fatalf("report %+v", rep)
	}
	for i, want := range []string{"single", "combined"} {
		r := rep.Runs[i]
		if r.Mode != want || r.Exact == nil || !*r.Exact || r.Sent == 0 || r.Sent != r.Total ||
			r.IncrPerSec <= 0 || len(r.WritesByNode) != 3 || r.MaxNodeShare <= 0 || r.IdealNodeShare != 1.0/3 {
			t.Errorf("run %d: %+v", i, r)
		}
	}
	if rep.RatioBase != "single" || len(rep.Ratios) != 2 {
		t.Fatalf("ratios %v against %q", rep.Ratios, rep.RatioBase)
	}
	for _, k := range []string{"incr_per_sec", "cache_writes_per_incr", "max_node_share"} {
		if rep.Ratios["single"][k] != 1 {
			t.Errorf("ratio of single to itself %s = %v", k, rep.Ratios["single"][k])
		}
		if _, ok := rep.Ratios["combined"][k]; !ok {
			t.Errorf("combined ratio lacks %s", k)
		}
	}
	if rep.Ratios["combined"]["cache_writes_per_incr"] >= 0.5 {
		t.Errorf("combined writes per increment ratio %v", rep.Ratios["combined"]["cache_writes_per_incr"])
	}
}

func TestBenchTextEmbedded(t *testing.T) {
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"bench", "--key", "cli:text", "--mode", "sharded", "--procs", "2",
		"--rate", "1000", "--duration", "300ms"}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	for _, want := range []string{"mode", "achieved/s", "writes/s", "sharded", "true", "writes by node", "embedded backend", "offered open-loop"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(errb.String(), "\r") {
		t.Errorf("progress bar drawn on a non-terminal: %q", errb.String())
	}
}

func TestBenchRedisStandalone(t *testing.T) {
	if _, err := testenv.RedisServer(); err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	rep, _ := runBenchJSON(t, "--redis", n.Addr, "--key", "cli:redis", "--mode", "buffered",
		"--procs", "3", "--rate", "3000", "--duration", "500ms", "--flush", "100ms", "--calibrate", "300ms")
	if rep.Backend != "redis" || len(rep.Primaries) != 1 || len(rep.Runs) != 1 {
		t.Fatalf("report %+v", rep)
	}
	if c := rep.Calibration; c == nil || c.Node != n.Addr || c.IncrPerSec <= 0 {
		t.Errorf("calibration %+v, want one of %s", c, n.Addr)
	}
	r := rep.Runs[0]
	if r.Exact == nil || !*r.Exact || r.Sent == 0 || r.MaxNodeShare != 1 || r.WritesByNode[n.Addr] == 0 {
		t.Errorf("run %+v", r)
	}
	// Roughly 3 instances × 5 flushes: far fewer writes than increments.
	if w := r.CacheWritesPerSec * float64(time.Second/(500*time.Millisecond)) / 2; w > float64(r.Sent)/20 {
		t.Errorf("%.1f writes/s for %d increments", r.CacheWritesPerSec, r.Sent)
	}
}

// TestBenchSweepSVG runs a sweep over N on the embedded store and checks
// the chart it writes: well-formed SVG with one point per N.
func TestBenchSweepSVG(t *testing.T) {
	// A run that achieved nothing in its 300 ms (a stalled, busy machine)
	// has no point by design; such an attempt is run again, up to 3 times.
	var last string
	for attempt := 1; attempt <= 3; attempt++ {
		circles, b := benchSweepSVG(t)
		if circles == 3 { // sharded n=1 (single's point too), 2, 4
			return
		}
		last = fmt.Sprintf("attempt %d: %d points, want 3:\n%s", attempt, circles, b)
		t.Log(last)
	}
	t.Error(last)
}

// benchSweepSVG runs the sweep once and counts the points of its chart.
func benchSweepSVG(t *testing.T) (int, []byte) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "chart.svg")
	var out, errb bytes.Buffer
	code := run(t.Context(), []string{"bench", "--key", "cli:svg", "--compare", "single,sharded", "--n", "1,2,4",
		"--procs", "2", "--rate", "1000", "--duration", "300ms", "--rounds", "1", "--svg", file}, &out, &errb)
	if code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, errb.String())
	}
	for _, want := range []string{"sharded n=1", "sharded n=4"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text report lacks %q:\n%s", want, out.String())
		}
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b))
	circles := 0
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("chart is not well-formed XML: %v\n%s", err, b)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "circle" {
			circles++
		}
	}
	return circles, b
}
