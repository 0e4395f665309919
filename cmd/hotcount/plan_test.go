package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// runHC runs hotcount in-process through run and returns its exit status
// and output.
func runHC(args ...string) (code int, stdout, stderr string) {
	var out, errb bytes.Buffer
	code = run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

func TestPlanUsage(t *testing.T) {
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"nothing", []string{"plan"}, "--rate, --node-capacity, --nodes required"},
		{"missing nodes", []string{"plan", "--rate", "1000", "--node-capacity", "10"}, "--nodes required"},
		{"bad number", []string{"plan", "--rate", "x", "--node-capacity", "10", "--nodes", "3"}, "invalid value"},
		{"bad duration", []string{"plan", "--rate", "1", "--node-capacity", "10", "--nodes", "3", "--flush", "5"}, "invalid value"},
		{"zero rate", []string{"plan", "--rate", "0", "--node-capacity", "10", "--nodes", "3"}, "rate must be"},
		{"bad headroom", []string{"plan", "--rate", "1", "--node-capacity", "10", "--nodes", "3", "--headroom", "0.5"}, "headroom"},
		{"positional", []string{"plan", "--rate", "1", "--node-capacity", "10", "--nodes", "3", "extra"}, "unexpected argument"},
		{"unknown flag", []string{"plan", "--bogus"}, "not defined"},
		// --flush sizes buffering, which is evaluated only with --procs:
		// alone it was ignored.
		{"flush without procs", []string{"plan", "--rate", "40000", "--node-capacity", "10000", "--nodes", "20", "--flush", "200ms"}, "--flush needs --procs"},
		{"flush with procs 0", []string{"plan", "--rate", "40000", "--node-capacity", "10000", "--nodes", "20", "--procs", "0", "--flush", "200ms"}, "--flush needs --procs"},
	}
	for _, c := range cases {
		code, out, errs := runHC(c.args...)
		if code != exitUsage {
			t.Errorf("%s: exit %d, want %d", c.name, code, exitUsage)
		}
		if out != "" {
			t.Errorf("%s: stdout %q, want nothing", c.name, out)
		}
		if strings.Count(errs, "\n") != 1 || !strings.Contains(errs, c.want) {
			t.Errorf("%s: stderr %q, want one line containing %q", c.name, errs, c.want)
		}
	}
}

func TestPlanJSON(t *testing.T) {
	cases := []struct {
		name string
		args []string
		mode string
		n    float64
	}{
		// P/D = 100/0.5 = 200 ≤ 10000 → buffered, n=8 given.
		{"buffered", []string{"--n", "8", "--procs", "100", "--flush", "500ms"}, "buffered", 8},
		// No procs: sharded, ceil(40000·1.5/10000) = 6.
		{"sharded", []string{"--headroom", "1.5"}, "sharded", 6},
		// --loss-window 0 is stated: durable, n = 4.
		{"durable", []string{"--procs", "100", "--loss-window", "0"}, "durable", 4},
		// W = 100ms < D = 500ms: no buffering, n = 4.
		{"short window", []string{"--procs", "100", "--loss-window", "100ms"}, "sharded", 4},
	}
	for _, c := range cases {
		args := append([]string{"plan", "--rate", "40000", "--node-capacity", "10000", "--nodes", "20", "--json"}, c.args...)
		code, out, errs := runHC(args...)
		if code != exitOK || errs != "" {
			t.Fatalf("%s: exit %d, stderr %q", c.name, code, errs)
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(out), &m); err != nil {
			t.Fatalf("%s: %v in %s", c.name, err, out)
		}
		if m["recommended_mode"] != c.mode || m["n"] != c.n || m["min_n"] != 4.0 {
			t.Errorf("%s: mode %v n %v min_n %v; want %s %v 4", c.name, m["recommended_mode"], m["n"], m["min_n"], c.mode, c.n)
		}
		for _, k := range []string{"per_subcounter_rate", "p_all_distinct", "expected_collisions", "read_keys",
			"buffered_writes_per_sec", "reason"} {
			if _, ok := m[k]; !ok {
				t.Errorf("%s: JSON lacks %q", c.name, k)
			}
		}
		for _, obj := range []string{"per_node_rate", "per_node_rate_random"} {
			l, _ := m[obj].(map[string]any)
			if _, ok := l["expected"]; !ok {
				t.Errorf("%s: %s lacks expected: %v", c.name, obj, m[obj])
			}
			if _, ok := l["worst_case"]; !ok {
				t.Errorf("%s: %s lacks worst_case: %v", c.name, obj, m[obj])
			}
		}
		cr, _ := m["cache_reads_per_sec"].(map[string]any)
		if _, ok := cr["cached"]; !ok {
			t.Errorf("%s: cache_reads_per_sec lacks cached: %v", c.name, m["cache_reads_per_sec"])
		}
	}
}

func TestPlanText(t *testing.T) {
	code, out, errs := runHC("plan", "--rate", "40000", "--node-capacity", "10000", "--nodes", "20", "--n", "8")
	if code != exitOK || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	for _, want := range []string{"Recommended: sharded with n=8", "19.8%"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if code, out, _ := runHC("help", "plan"); code != exitOK || !strings.Contains(out, "-node-capacity") || !strings.Contains(out, "Examples:") {
		t.Errorf("help plan: exit %d, stdout %q", code, out)
	}
}
