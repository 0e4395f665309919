package main

import (
	"encoding/csv"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// quick keeps simulate runs in tests small.
var quick = []string{"--keys", "2000", "--seconds", "10", "--trials", "20000"}

func TestSimulateJSON(t *testing.T) {
	svg := filepath.Join(t.TempDir(), "peak.svg")
	args := append([]string{"simulate", "--json", "--seed", "3", "--svg", svg}, quick...)
	code, out, errs := runHC(args...)
	if code != exitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	var r struct {
		Config struct {
			Nodes int `json:"nodes"`
			N     int `json:"n"`
		} `json:"config"`
		Exact      *float64 `json:"p_all_distinct_exact"`
		MonteCarlo *float64 `json:"p_all_distinct_monte_carlo"`
		Strategies []struct {
			Strategy string   `json:"strategy"`
			Peak     *float64 `json:"peak_utilisation"`
			Over     *int     `json:"seconds_over_capacity"`
			ReadKeys *int     `json:"read_keys"`
			Coll     *int     `json:"collisions"`
		} `json:"strategies"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v in %s", err, out)
	}
	if r.Config.Nodes != 20 || r.Config.N != 8 || r.Exact == nil || r.MonteCarlo == nil {
		t.Fatalf("JSON: %s", out)
	}
	// 8 on 20: exact 0.198403; 20,000 trials agree within 0.02.
	if d := *r.Exact - *r.MonteCarlo; *r.Exact < 0.1984 || *r.Exact > 0.1985 || d > 0.02 || d < -0.02 {
		t.Errorf("exact %v, Monte Carlo %v", *r.Exact, *r.MonteCarlo)
	}
	want := []string{"single", "sharded-random", "sharded-placed", "buffered", "combined", "auto"}
	if len(r.Strategies) != len(want) {
		t.Fatalf("strategies: %s", out)
	}
	for i, s := range r.Strategies {
		if s.Strategy != want[i] || s.Peak == nil || s.Over == nil || s.ReadKeys == nil || s.Coll == nil {
			t.Errorf("strategy %d: %+v", i, s)
		}
	}
	b, err := os.ReadFile(svg)
	if err != nil || !strings.HasPrefix(string(b), "<svg") || strings.Count(string(b), "<title>") != len(want) {
		t.Errorf("SVG file: %v, %.200s", err, b)
	}
}

func TestSimulateCSVAndText(t *testing.T) {
	code, out, errs := runHC(append([]string{"simulate", "--csv", "--nodes", "5", "--n", "3"}, quick...)...)
	if code != exitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	rows, err := csv.NewReader(strings.NewReader(out)).ReadAll()
	if err != nil || len(rows) != 7 || rows[0][0] != "strategy" || rows[3][0] != "sharded-placed" || rows[3][1] != "3" {
		t.Errorf("CSV (%v): %q", err, rows)
	}
	code, out, errs = runHC(append([]string{"simulate"}, quick...)...)
	if code != exitOK || errs != "" || !strings.Contains(out, "0.1984 exact") || !strings.Contains(out, "auto") {
		t.Errorf("text: exit %d, stderr %q, out:\n%s", code, errs, out)
	}
}

func TestSimulateUsage(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"json and csv", []string{"--json", "--csv"}, "exclusive"},
		{"zero nodes", []string{"--nodes", "0"}, "--nodes must not be 0"},
		{"zero flush", []string{"--flush", "0s"}, "--flush must not be 0"},
		{"negative nodes", []string{"--nodes", "-2"}, "nodes must be"},
		{"too many sub-counters", []string{"--n", "5000"}, "n must be"},
		{"bad budget", []string{"--key-budget", "3"}, "key budget"},
		{"bad number", []string{"--capacity", "lots"}, "invalid value"},
		{"positional", []string{"now"}, "unexpected argument"},
	}
	for _, c := range cases {
		code, out, errs := runHC(append([]string{"simulate"}, c.args...)...)
		if code != exitUsage || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 2 and %q", c.name, code, out, errs, c.want)
		}
	}
	// An SVG path that cannot be written is a usage error found before the
	// simulation runs (nothing printed), as serve's --data that is not a
	// folder is: it was found only after the run, exit 1.
	dir := t.TempDir()
	for _, bad := range []string{filepath.Join(dir, "missing", "dir", "x.svg"), dir} {
		code, out, errs := runHC(append([]string{"simulate", "--svg", bad}, quick...)...)
		if code != exitUsage || out != "" || strings.Count(errs, "\n") != 1 || !strings.Contains(errs, "--svg") || !strings.Contains(errs, bad) {
			t.Errorf("bad svg path %s: exit %d, stdout %q, stderr %q; want exit 2, nothing printed, one line naming --svg and the path", bad, code, out, errs)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "missing")); err == nil {
		t.Error("the check created a folder")
	}
}
