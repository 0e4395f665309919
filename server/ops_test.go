package server

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable/sqlite"
)

// The files of deploy/, checked against what the server exports.
const (
	rulesFile     = "../deploy/prometheus/hotcount-rules.yml"
	rulesTestFile = "../deploy/prometheus/hotcount-rules.test.yml"
	dashboardFile = "../deploy/grafana/hotcount-dashboard.json"
)

// trafficKeys are the counters the live server of liveMetrics is driven
// with; no label value may name them.
var trafficKeys = []string{"likes:post:zq7", "views:zq7", "orders:zq7", "other:zq7"}

// promtool finds promtool (Debian package prometheus). The tests fail
// without it: scripts/test installs it.
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install it with `apt-get install -y prometheus` (scripts/test does)")
	}
	return p
}

// liveMetrics runs a server over a Client with a buffered, a durable and
// a default namespace on a real loopback listener, drives every kind of
// request at it (increments, reads, batch and exact reads, a resize, a
// clear, errors), waits for a flush and a checkpoint, and returns one
// scrape of /metrics.
func liveMetrics(t *testing.T) string {
	t.Helper()
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "hc.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	c, err := hotcount.New(ctx, hotcount.Config{
		Namespaces: []hotcount.Namespace{
			{Prefix: "likes:", Buffered: true, FlushInterval: 20 * time.Millisecond},
			{Prefix: "orders:", Mode: hotcount.ModeDurable},
		},
		Meta:       hotcount.MetaConfig{TTL: 10 * time.Millisecond},
		Durability: hotcount.DurabilityConfig{Store: db, CheckpointInterval: 20 * time.Millisecond},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(ctx) })
	// The links of a region's server are exported too: a region needs
	// Redis clusters (tested in the root package), so their figures are
	// given here.
	s, _ := newTestServer(t, inRegion{c}, Config{Token: "scrape-me"})
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	do := func(method, path, body string, auth bool) {
		req, _ := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if auth {
			req.Header.Set("Authorization", "Bearer scrape-me")
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	for i := range 30 {
		for _, k := range trafficKeys {
			body := `{"by":2}`
			if strings.HasPrefix(k, "orders:") {
				body = fmt.Sprintf(`{"by":2,"id":"o-%d"}`, i)
			}
			do("POST", "/v1/counters/"+k+"/incr", body, true)
		}
	}
	do("GET", "/v1/counters/views:zq7", "", true)
	do("GET", "/v1/counters/orders:zq7?consistency=exact", "", true)
	do("POST", "/v1/counters:get", `{"keys":["views:zq7","likes:post:zq7"]}`, true)
	do("PUT", "/v1/counters/other:zq7/shards", `{"n":4}`, true)
	do("GET", "/v1/counters/views:zq7/shards", "", true)
	do("DELETE", "/v1/counters/other:zq7", "", true)
	do("GET", "/v1/hotkeys", "", true)
	do("GET", "/v1/nodes", "", true)
	do("GET", "/v1/stats", "", true)
	do("POST", "/v1/counters/views:zq7/incr", `{"BY":1}`, true)
	do("POST", "/v1/counters/views:zq7/incr", `{"by":1}`, false)
	do("GET", "/nope", "", false)
	if err := c.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for i := 0; c.Stats().Durability.LastCheckpoint.IsZero(); i++ {
		if i == 500 {
			t.Fatal("no checkpoint in 10 s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := c.Cleanup(ctx); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest("GET", ts.URL+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer scrape-me")
	resp, err := ts.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}

// families parses an exposition.
func families(t *testing.T, text string) map[string]*dto.MetricFamily {
	t.Helper()
	p := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("parsing /metrics: %v", err)
	}
	return fams
}

// exportedNames returns every series name an exposition holds, with the
// _bucket, _sum and _count series of histograms.
func exportedNames(fams map[string]*dto.MetricFamily) map[string]bool {
	names := map[string]bool{}
	for n, f := range fams {
		names[n] = true
		if f.GetType() == dto.MetricType_HISTOGRAM || f.GetType() == dto.MetricType_SUMMARY {
			names[n+"_bucket"], names[n+"_sum"], names[n+"_count"] = true, true, true
		}
	}
	return names
}

// stateGauges are the hotcount_* gauges, each a state, not a count of
// events (those are *_total counters). A new gauge must be added here.
var stateGauges = []string{
	"hotcount_buffer_unflushed_delta", "hotcount_buffer_unflushed_abs_delta", "hotcount_buffer_unflushed_keys",
	"hotcount_buffer_in_flight_ops", "hotcount_buffer_held_keys", "hotcount_buffer_oldest_unflushed_seconds",
	"hotcount_buffer_dropped_delta", "hotcount_cold_dropped_delta", "hotcount_counters_cold", "hotcount_counters_sharded", "hotcount_placement_collisions", "hotcount_checkpoint_tracked_counters", "hotcount_restored_amount",
	"hotcount_view_repaired_amount", "hotcount_view_behind_counters",
	"hotcount_checkpoint_last_success_timestamp_seconds", "hotcount_cache_up", "hotcount_node_budget_writes_per_second",
	"hotcount_cleanup_pending_deadlines", "hotcount_cleanup_last_success_timestamp_seconds", "hotcount_durable_store_rows",
	"hotcount_durable_store_bytes", "hotcount_cache_keys", "hotcount_cache_memory_bytes",
	"hotcount_region_lag_seconds", "hotcount_region_last_success_timestamp_seconds", "hotcount_region_shipping",
}

// allowedLabels are the label names of hotcount_* series: none takes a
// counter key as its value.
var allowedLabels = []string{"route", "code", "namespace", "class", "op", "node", "table", "peer"}

// TestMetricsConventions: a scrape of a server with traffic passes
// `promtool check metrics`, has the Go and process series, names every
// counter *_total and every *_total a counter, has no other gauges than
// the known state gauges, and labels nothing with a counter key.
func TestMetricsConventions(t *testing.T) {
	bin := promtool(t)
	text := liveMetrics(t)
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = strings.NewReader(text)
	if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	fams := families(t, text)
	for _, want := range []string{"go_goroutines", "go_memstats_heap_inuse_bytes", "process_resident_memory_bytes",
		"process_cpu_seconds_total", "process_open_fds", "hotcount_http_increments_total", "hotcount_cache_writes_total",
		"hotcount_checkpoint_last_success_timestamp_seconds", "hotcount_client_call_duration_seconds", "hotcount_http_request_duration_seconds",
		"hotcount_cleanup_passes_total", "hotcount_cleanup_last_success_timestamp_seconds", "hotcount_durable_store_rows",
		"hotcount_durable_store_bytes", "hotcount_durable_clears_total"} {
		if fams[want] == nil {
			t.Errorf("no %s", want)
		}
	}
	for name, f := range fams {
		if !strings.HasPrefix(name, "hotcount_") {
			continue
		}
		typ := f.GetType()
		switch {
		case strings.HasSuffix(name, "_total") && typ != dto.MetricType_COUNTER:
			t.Errorf("%s ends in _total but is a %v", name, typ)
		case typ == dto.MetricType_COUNTER && !strings.HasSuffix(name, "_total"):
			t.Errorf("counter %s does not end in _total", name)
		case typ == dto.MetricType_GAUGE && !slices.Contains(stateGauges, name):
			t.Errorf("gauge %s is not a known state gauge: a count of events must be a *_total counter", name)
		case typ == dto.MetricType_UNTYPED:
			t.Errorf("%s is untyped", name)
		}
		for _, m := range f.GetMetric() {
			for _, lp := range m.GetLabel() {
				if !slices.Contains(allowedLabels, lp.GetName()) {
					t.Errorf("%s has the label %s", name, lp.GetName())
				}
				if lp.GetName() == "namespace" && !slices.Contains([]string{"likes:", "orders:", "default"}, lp.GetValue()) {
					t.Errorf("%s{namespace=%q}: not a configured prefix", name, lp.GetValue())
				}
			}
		}
	}
	for _, k := range trafficKeys {
		if i := strings.Index(text, strings.SplitN(k, ":", 2)[1]); i >= 0 || strings.Contains(text, k) {
			t.Errorf("the scrape names the counter %q", k)
		}
	}
}

// promqlMetricNames returns the metric names a PromQL expression uses:
// identifiers outside strings, label matchers, grouping lists and range
// selectors that are neither functions nor keywords.
func promqlMetricNames(expr string) []string {
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`"(?:[^"\\]|\\.)*"`), // strings
		regexp.MustCompile(`\{[^}]*\}`),         // label matchers
		regexp.MustCompile(`\[[^\]]*\]`),        // ranges
		regexp.MustCompile(`\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)`), // label lists
		regexp.MustCompile(`\b[0-9][0-9.e]*[a-z]*`),                                           // numbers, durations
	} {
		expr = re.ReplaceAllString(expr, " ")
	}
	keywords := map[string]bool{"and": true, "or": true, "unless": true, "bool": true, "offset": true, "inf": true, "nan": true}
	var out []string
	ident := regexp.MustCompile(`[a-zA-Z_:][a-zA-Z0-9_:]*(\s*\()?`)
	for _, m := range ident.FindAllStringSubmatch(expr, -1) {
		name := strings.TrimRight(strings.TrimSuffix(strings.TrimSpace(m[0]), "("), " ")
		if m[1] != "" || keywords[strings.ToLower(name)] {
			continue // a function or a keyword
		}
		out = append(out, name)
	}
	return out
}

func TestPromQLMetricNames(t *testing.T) {
	got := promqlMetricNames(`sum by (node) (rate(hotcount_cache_writes_total{instance=~"a|b"}[5m])) > on() group_left() max(hotcount_node_budget_writes_per_second) and time() - x_seconds offset 5m`)
	want := []string{"hotcount_cache_writes_total", "hotcount_node_budget_writes_per_second", "x_seconds"}
	if !slices.Equal(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}
}

// checkExprNames fails t for each metric name in exprs that the scrape
// does not hold, and for an expression that names no metric.
func checkExprNames(t *testing.T, what string, exprs []string, exported map[string]bool) {
	t.Helper()
	for _, e := range exprs {
		names := promqlMetricNames(e)
		if len(names) == 0 {
			t.Errorf("%s: %q names no metric", what, e)
		}
		for _, n := range names {
			if !exported[n] {
				t.Errorf("%s: %q uses %s, which the server does not export", what, e, n)
			}
		}
	}
}

// TestAlertRules: promtool accepts the shipped rules and passes their unit
// tests, and every metric they use is exported by a live server.
func TestAlertRules(t *testing.T) {
	bin := promtool(t)
	if out, err := exec.Command(bin, "check", "rules", rulesFile).CombinedOutput(); err != nil {
		t.Fatalf("promtool check rules: %v\n%s", err, out)
	}
	cmd := exec.Command(bin, "test", "rules", filepath.Base(rulesTestFile))
	cmd.Dir = filepath.Dir(rulesTestFile)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	var exprs []string
	for _, m := range regexp.MustCompile(`(?m)^\s+expr: (.+)$`).FindAllStringSubmatch(string(raw), -1) {
		exprs = append(exprs, m[1])
	}
	if len(exprs) < 10 {
		t.Fatalf("only %d rules found", len(exprs))
	}
	exported := exportedNames(families(t, liveMetrics(t)))
	exported["up"] = true
	checkExprNames(t, "rules", exprs, exported)
}

// grafanaDashboard is the part of the dashboard JSON the test reads.
type grafanaDashboard struct {
	Panels []struct {
		Type        string `json:"type"`
		Title       string `json:"title"`
		FieldConfig struct {
			Defaults struct {
				Min *float64 `json:"min"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
		Targets []struct {
			Expr         string `json:"expr"`
			LegendFormat string `json:"legendFormat"`
		} `json:"targets"`
	} `json:"panels"`
	Templating struct {
		List []struct {
			Name       string `json:"name"`
			Definition string `json:"definition"`
		} `json:"list"`
	} `json:"templating"`
}

// TestGrafanaDashboard: every query of the shipped dashboard is valid
// PromQL (promtool checks it as a recording rule) and uses only metrics a
// live server exports; every chart's y axis starts at zero; the
// absorption chart sets increments arriving against writes per node and
// the node budget.
func TestGrafanaDashboard(t *testing.T) {
	bin := promtool(t)
	raw, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	var d grafanaDashboard
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", dashboardFile, err)
	}
	// Grafana's variables, as Prometheus would see them after expansion.
	expand := strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h", "$instance", ".*")
	var exprs []string
	var rules strings.Builder
	rules.WriteString("groups:\n  - name: dashboard\n    rules:\n")
	absorption := false
	for _, p := range d.Panels {
		if p.Type == "row" {
			continue
		}
		if p.FieldConfig.Defaults.Min == nil || *p.FieldConfig.Defaults.Min != 0 {
			t.Errorf("panel %q: the y axis does not start at 0", p.Title)
		}
		if len(p.Targets) == 0 {
			t.Errorf("panel %q has no query", p.Title)
		}
		var all string
		for _, tg := range p.Targets {
			e := expand.Replace(tg.Expr)
			exprs = append(exprs, e)
			fmt.Fprintf(&rules, "      - record: dashboard:q%d\n        expr: %q\n", len(exprs), e)
			all += e + "\n"
		}
		if strings.Contains(all, "hotcount_http_increments_total") && strings.Contains(all, "sum by (node) (rate(hotcount_cache_writes_total") &&
			strings.Contains(all, "hotcount_node_budget_writes_per_second") {
			absorption = true
		}
	}
	for _, v := range d.Templating.List {
		if v.Definition != "" {
			exprs = append(exprs, strings.TrimSuffix(strings.TrimPrefix(v.Definition, "label_values("), ", instance)"))
		}
	}
	if !absorption {
		t.Error("no absorption chart (increments arriving, writes per node, node budget)")
	}
	f := filepath.Join(t.TempDir(), "dashboard-rules.yml")
	if err := os.WriteFile(f, []byte(rules.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(bin, "check", "rules", f).CombinedOutput(); err != nil {
		t.Fatalf("the dashboard's queries are not valid PromQL: %v\n%s", err, out)
	}
	checkExprNames(t, "dashboard", exprs, exportedNames(families(t, liveMetrics(t))))
}

// inRegion is a Client whose Stats show one link to a peer region.
type inRegion struct{ *hotcount.Client }

func (c inRegion) Stats() hotcount.Stats {
	st := c.Client.Stats()
	st.Regions = []hotcount.RegionLink{{Peer: "us", Shipped: 3, Bytes: 120, LastSuccess: time.Now(), Lag: time.Second, Holder: true}}
	return st
}

// TestAlertRulesDocumented: docs/operations.md names every alert of the
// shipped rules, and every alert name README.md and docs/ quote is one of
// them.
func TestAlertRulesDocumented(t *testing.T) {
	raw, err := os.ReadFile(rulesFile)
	if err != nil {
		t.Fatal(err)
	}
	alerts := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s+- alert: (\S+)\s*$`).FindAllStringSubmatch(string(raw), -1) {
		alerts[m[1]] = true
	}
	if len(alerts) < 10 {
		t.Fatalf("only %d alerts found in %s", len(alerts), rulesFile)
	}
	ops, err := os.ReadFile("../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for a := range alerts {
		names = append(names, a)
	}
	slices.Sort(names)
	for _, a := range names {
		if !strings.Contains(string(ops), "`"+a+"`") {
			t.Errorf("docs/operations.md does not name the alert %s of %s", a, rulesFile)
		}
	}
	docs, err := filepath.Glob("../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(docs, "../README.md") {
		if filepath.Base(f) == "benchmarks-log.md" {
			continue // a dated log: its entries stay as they were run
		}
		text, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range regexp.MustCompile("`(Hotcount[A-Z][A-Za-z]+)`").FindAllStringSubmatch(string(text), -1) {
			if !alerts[m[1]] {
				t.Errorf("%s names the alert %s, which %s does not have", f, m[1], rulesFile)
			}
		}
	}
}
