package server

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/store"
)

func TestIncrGetClear(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	r := call(t, s, "POST", "/v1/counters/likes:post:42/incr", `{"by": 5}`)
	if r.status != 200 || r.body["key"] != "likes:post:42" || r.body["accepted"] != true {
		t.Fatalf("incr: %d %s", r.status, r.raw)
	}
	if r := call(t, s, "POST", "/v1/counters/likes:post:42/incr", ""); r.status != 200 {
		t.Fatalf("incr with empty body (by=1): %d %s", r.status, r.raw)
	}
	if r := call(t, s, "POST", "/v1/counters/likes:post:42/incr", `{"by": -2}`); r.status != 200 {
		t.Fatalf("negative incr: %d %s", r.status, r.raw)
	}
	r = call(t, s, "GET", "/v1/counters/likes:post:42", "")
	if r.status != 200 || r.body["value"] != json.Number("4") || r.body["mode"] != "fast" || r.body["n"] != json.Number("8") || r.body["stale_ms"] != json.Number("0") {
		t.Fatalf("get: %d %s", r.status, r.raw)
	}
	if r := call(t, s, "GET", "/v1/counters/likes:post:42?consistency=cached", ""); r.status != 200 || r.body["value"] != json.Number("4") {
		t.Fatalf("get cached: %d %s", r.status, r.raw)
	}
	for i := 0; i < 2; i++ { // clear is idempotent
		if r := call(t, s, "DELETE", "/v1/counters/likes:post:42", ""); r.status != 200 || r.body["cleared"] != true {
			t.Fatalf("clear %d: %d %s", i, r.status, r.raw)
		}
	}
	if v := value(t, c, "likes:post:42"); v != 0 {
		t.Fatalf("after clear: %d", v)
	}
}

// TestIncrByPastBound: a "by" beyond ±(2^53 − 1) is refused (409)
// whatever the counter holds. A sub-counter holding -1 would take 2^53
// within its bound, so the answer used to depend on which sub-counter an
// increment picked.
func TestIncrByPastBound(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	const key = "one:safe" // one sub-counter: the pick cannot differ
	if r := call(t, s, "POST", "/v1/counters/"+key+"/incr", `{"by":-1}`); r.status != 200 {
		t.Fatalf("incr -1: %d %s", r.status, r.raw)
	}
	for _, by := range []string{"9007199254740992", "-9007199254740992", "9223372036854775807"} {
		r := call(t, s, "POST", "/v1/counters/"+key+"/incr", `{"by":`+by+`}`)
		if r.status != 409 || r.body["error"] == nil {
			t.Errorf("incr %s: %d %s, want 409 with an error", by, r.status, r.raw)
		}
	}
	if r := call(t, s, "POST", "/v1/counters/"+key+"/incr", `{"by":9007199254740991}`); r.status != 200 {
		t.Errorf("incr 2^53-1: %d %s", r.status, r.raw)
	}
	if v := value(t, c, key); v != 9007199254740990 {
		t.Errorf("%s holds %d, want 2^53-2", key, v)
	}
}

// TestEscapedKeys: the key is one URL-escaped segment; slashes, spaces,
// "#", "?" and non-ASCII round-trip, and "counters:get" as a key does not
// clash with the batch route.
func TestEscapedKeys(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	for _, key := range []string{"a/b", "with space", "tag#1", "q?x=1", "日本:likes", "counters:get", "%41"} {
		p := "/v1/counters/" + url.PathEscape(key)
		if r := call(t, s, "POST", p+"/incr", `{"by":3}`); r.status != 200 || r.body["key"] != key {
			t.Fatalf("incr %q: %d %s", key, r.status, r.raw)
		}
		if r := call(t, s, "GET", p, ""); r.status != 200 || r.body["key"] != key || r.body["value"] != json.Number("3") {
			t.Fatalf("get %q: %d %s", key, r.status, r.raw)
		}
		if v := value(t, c, key); v != 3 {
			t.Fatalf("%q holds %d", key, v)
		}
	}
}

func TestGetMulti(t *testing.T) {
	s, c := newTestServer(t, nil, Config{MaxKeys: 3})
	c.Incr(context.Background(), "a", 2)
	c.Incr(context.Background(), "b", 5)
	r := call(t, s, "POST", "/v1/counters:get", `{"keys":["a","b","missing","a"]}`)
	if r.status != 400 {
		t.Fatalf("4 keys over a limit of 3: %d %s", r.status, r.raw)
	}
	r = call(t, s, "POST", "/v1/counters:get", `{"keys":["a","b","missing"]}`)
	want := map[string]any{"a": json.Number("2"), "b": json.Number("5"), "missing": json.Number("0")}
	if r.status != 200 || fmt.Sprint(r.body["values"]) != fmt.Sprint(want) {
		t.Fatalf("get multi: %d %s", r.status, r.raw)
	}
	// The batch route and the per-key route are distinct.
	if r := call(t, s, "GET", "/v1/counters:get", ""); r.status != 405 || r.header.Get("Allow") != "POST" {
		t.Fatalf("GET /v1/counters:get: %d %s allow=%q", r.status, r.raw, r.header.Get("Allow"))
	}
}

func TestOverflowIsConflict(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	if r := call(t, s, "POST", "/v1/counters/one:k/incr", fmt.Sprintf(`{"by": %d}`, int64(math.MaxInt64))); r.status != 409 {
		t.Fatalf("past the sub-counter bound: %d %s", r.status, r.raw)
	}
	if r := call(t, s, "POST", "/v1/counters/one:k/incr", fmt.Sprintf(`{"by": %d}`, int64(store.MaxValue))); r.status != 200 {
		t.Fatalf("first: %d %s", r.status, r.raw)
	}
	if r := call(t, s, "POST", "/v1/counters/one:k/incr", `{"by": 1}`); r.status != 409 || r.body["error"] == nil {
		t.Fatalf("overflow: %d %s", r.status, r.raw)
	}
	if v := value(t, c, "one:k"); v != store.MaxValue {
		t.Fatalf("value changed on overflow: %d", v)
	}
}

func TestShardsAndPlacementRates(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	for i := 0; i < 4; i++ {
		call(t, s, "POST", "/v1/counters/hot/incr", `{"by":10}`)
	}
	call(t, s, "POST", "/v1/counters/cold/incr", ``)
	r := call(t, s, "GET", "/v1/counters/hot/shards", "")
	if r.status != 200 || r.body["value"] != json.Number("40") || r.body["n"] != json.Number("8") {
		t.Fatalf("shards: %d %s", r.status, r.raw)
	}
	var sum int64
	for _, sh := range r.body["shards"].([]any) {
		m := sh.(map[string]any)
		v, _ := m["value"].(json.Number).Int64()
		sum += v
		if m["node"] == "" || !strings.HasPrefix(m["key"].(string), "{hot#") {
			t.Fatalf("bad shard %v", m)
		}
	}
	if sum != value(t, c, "hot") {
		t.Fatalf("shard sum %d != value", sum)
	}
	r = call(t, s, "GET", "/v1/hotkeys?n=1", "")
	keys := r.body["keys"].([]any)
	if r.status != 200 || len(keys) != 1 || keys[0].(map[string]any)["key"] != "hot" || keys[0].(map[string]any)["n"] != json.Number("8") {
		t.Fatalf("hotkeys: %d %s", r.status, r.raw)
	}
	r = call(t, s, "GET", "/v1/nodes", "")
	nodes := r.body["nodes"].([]any)
	if r.status != 200 || len(nodes) != hotcount.DefaultEmbeddedNodes {
		t.Fatalf("nodes: %d %s", r.status, r.raw)
	}
	var total int64
	var rate float64
	for _, n := range nodes {
		v, _ := n.(map[string]any)["total"].(json.Number).Int64()
		f, _ := n.(map[string]any)["rate"].(json.Number).Float64()
		total, rate = total+v, rate+f
	}
	// 5 unbuffered increments: 5 cache writes.
	if total != 5 || rate <= 0 {
		t.Fatalf("node writes sum to %d at %v/s, want 5", total, rate)
	}
	// Growing is immediate; the value is kept.
	r = call(t, s, "PUT", "/v1/counters/hot/shards", `{"n": 16}`)
	if r.status != 200 || r.body["n"] != json.Number("16") || r.body["value"] != json.Number("40") {
		t.Fatalf("resize: %d %s", r.status, r.raw)
	}
	if v := value(t, c, "hot"); v != 40 {
		t.Fatalf("after resize: %d", v)
	}
}

// TestMeasurementsFromTheClient: /v1/hotkeys and /v1/nodes show what the
// Client measured: the increments arriving per key and the cache writes
// per node.
func TestMeasurementsFromTheClient(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	for range 200 {
		if r := call(t, s, "POST", "/v1/counters/likes:1/incr", ""); r.status != 200 {
			t.Fatalf("incr: %d %s", r.status, r.raw)
		}
	}
	r := call(t, s, "GET", "/v1/hotkeys", "")
	keys, _ := r.body["keys"].([]any)
	if r.status != 200 || len(keys) == 0 {
		t.Fatalf("hotkeys: %d %s", r.status, r.raw)
	}
	k := keys[0].(map[string]any)
	if k["key"] != "likes:1" || k["n"] != json.Number("8") {
		t.Fatalf("hot key %v", k)
	}
	if a, _ := k["arrivals"].(json.Number).Float64(); a <= 0 {
		t.Fatalf("hot key without arrivals: %v", k)
	}
	r = call(t, s, "GET", "/v1/nodes", "")
	nodes, _ := r.body["nodes"].([]any)
	var total int64
	for _, n := range nodes {
		v, _ := n.(map[string]any)["total"].(json.Number).Int64()
		total += v
	}
	if r.status != 200 || len(nodes) != 3 || total != 200 {
		t.Fatalf("nodes: %d %s (total %d, want 200)", r.status, r.raw, total)
	}
	if v := value(t, c, "likes:1"); v != 200 {
		t.Fatalf("value %d", v)
	}
}

// TestFastKeyRefusesDurableFeatures: on the real Client, an idempotency id
// or an exact read on a fast-mode key is a 400 and changes nothing.
func TestFastKeyRefusesDurableFeatures(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	if r := call(t, s, "POST", "/v1/counters/k/incr", `{"id":"x"}`); r.status != 400 {
		t.Fatalf("id on a fast key: %d %s", r.status, r.raw)
	}
	if r := call(t, s, "GET", "/v1/counters/k?consistency=exact", ""); r.status != 400 {
		t.Fatalf("exact on a fast key: %d %s", r.status, r.raw)
	}
	if v := value(t, c, "k"); v != 0 {
		t.Fatalf("counter changed: %d", v)
	}
}

func TestBackendUnavailable(t *testing.T) {
	down := fmt.Errorf("dial: %w", hotcount.ErrUnavailable)
	f := &fake{
		Client: newClient(t),
		incr:   func(context.Context, string, int64) error { return down },
		get:    func(context.Context, string) (hotcount.Reading, error) { return hotcount.Reading{}, down },
	}
	s, _ := newTestServer(t, f, Config{RetryAfter: 3e9})
	for _, tc := range []struct{ method, path, body string }{
		{"POST", "/v1/counters/k/incr", ""},
		{"GET", "/v1/counters/k", ""},
		{"POST", "/v1/counters:get", `{"keys":["k"]}`},
	} {
		r := call(t, s, tc.method, tc.path, tc.body)
		if r.status != 503 || r.header.Get("Retry-After") != "3" || r.body["error"] == nil {
			t.Fatalf("%s %s: %d %s retry-after=%q", tc.method, tc.path, r.status, r.raw, r.header.Get("Retry-After"))
		}
	}
}

func TestPanicIsRecovered(t *testing.T) {
	f := &fake{Client: newClient(t), incr: func(context.Context, string, int64) error { panic("boom") }}
	s, _ := newTestServer(t, f, Config{})
	r := call(t, s, "POST", "/v1/counters/k/incr", "")
	if r.status != 500 || r.body["error"] != "internal error" {
		t.Fatalf("panic: %d %s", r.status, r.raw)
	}
	m := call(t, s, "GET", "/metrics", "")
	if !strings.Contains(m.raw, "hotcount_http_panics_total 1") {
		t.Fatalf("panic not counted:\n%s", m.raw)
	}
}

func TestTokenAccepted(t *testing.T) {
	s, c := newTestServer(t, nil, Config{Token: "s3cret"})
	if r := call(t, s, "POST", "/v1/counters/k/incr", "", "Authorization", "Bearer s3cret"); r.status != 200 {
		t.Fatalf("with token: %d %s", r.status, r.raw)
	}
	// The single token carries every scope, and reads need it too.
	if r := call(t, s, "GET", "/v1/counters/k", ""); r.status != 401 {
		t.Fatalf("read without the token: %d %s", r.status, r.raw)
	}
	if r := call(t, s, "GET", "/v1/counters/k", "", "Authorization", "Bearer s3cret"); r.status != 200 || r.body["value"] != json.Number("1") {
		t.Fatalf("read: %d %s", r.status, r.raw)
	}
	if r := call(t, s, "DELETE", "/v1/counters/k", "", "Authorization", "Bearer s3cret"); r.status != 200 {
		t.Fatalf("clear with token: %d %s", r.status, r.raw)
	}
	if v := value(t, c, "k"); v != 0 {
		t.Fatalf("value %d", v)
	}
}

func TestHealthReadyMetrics(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	if r := call(t, s, "GET", "/healthz", ""); r.status != 200 {
		t.Fatalf("healthz: %d", r.status)
	}
	if r := call(t, s, "GET", "/readyz", ""); r.status != 200 {
		t.Fatalf("readyz: %d %s", r.status, r.raw)
	}
	call(t, s, "POST", "/v1/counters/m/incr", "")
	m := call(t, s, "GET", "/metrics", "")
	for _, want := range []string{
		`hotcount_http_requests_total{code="200",route="POST /v1/counters/{key}/incr"} 1`,
		`hotcount_http_increments_total{namespace="default"} 1`,
		`hotcount_cache_writes_total{node=`,
		"hotcount_cache_up 1",
		`hotcount_http_errors_total{class="bad_request"} 0`,
		`hotcount_client_call_duration_seconds_count{op="incr"} 1`,
		"go_goroutines ",
		"process_resident_memory_bytes ",
		"hotcount_buffer_unflushed_delta 0",
		"hotcount_buffer_oldest_unflushed_seconds 0",
		"hotcount_checkpoints_total",
	} {
		if !strings.Contains(m.raw, want) {
			t.Errorf("metrics lack %q", want)
		}
	}
	for _, line := range strings.Split(m.raw, "\n") {
		if line != "" && !strings.HasPrefix(line, "# ") && !strings.HasPrefix(line, "hotcount_") &&
			!strings.HasPrefix(line, "go_") && !strings.HasPrefix(line, "process_") {
			t.Errorf("metric outside hotcount_, go_ and process_: %q", line)
		}
	}
	c.Close(context.Background())
	if r := call(t, s, "GET", "/readyz", ""); r.status != 503 {
		t.Fatalf("readyz with a closed client: %d %s", r.status, r.raw)
	}
	s2, _ := newTestServer(t, nil, Config{})
	s2.Drain()
	s2.Drain()
	if r := call(t, s2, "GET", "/readyz", ""); r.status != 503 {
		t.Fatalf("readyz while draining: %d", r.status)
	}
}

func TestDashboardAndAssets(t *testing.T) {
	s, _ := newTestServer(t, nil, Config{})
	for _, tc := range []struct {
		path, ctype string
		status      int
	}{
		{"/", "text/html", 200},
		{"/assets/dashboard.js", "text/javascript", 200},
		{"/assets/vendor/uplot/uPlot.iife.min.js", "text/javascript", 200},
		{"/assets/vendor/uplot/uPlot.min.css", "text/css", 200},
		{"/v1/openapi.json", "application/json", 200},
		{"/assets/nope.js", "application/json", 404},
		{"/assets/../server.go", "", 0}, // cleaned by the mux: a redirect, never the file
	} {
		r := call(t, s, "GET", tc.path, "")
		if tc.status == 0 {
			if r.status == 200 {
				t.Errorf("%s served: %q", tc.path, r.raw[:min(40, len(r.raw))])
			}
			continue
		}
		if r.status != tc.status || !strings.HasPrefix(r.header.Get("Content-Type"), tc.ctype) {
			t.Errorf("%s: %d %q", tc.path, r.status, r.header.Get("Content-Type"))
		}
	}
	if r := call(t, s, "GET", "/", ""); !strings.Contains(r.raw, "uPlot.iife.min.js") || strings.Contains(r.raw, "//cdn") {
		t.Errorf("dashboard page does not load the bundled uPlot")
	}
	if r := call(t, s, "GET", "/nope", ""); r.status != http.StatusNotFound || r.body["error"] == nil {
		t.Errorf("unknown path: %d %s", r.status, r.raw)
	}
}

func TestNewConfig(t *testing.T) {
	if _, err := New(Config{}); err == nil {
		t.Fatal("New without a backend succeeded")
	}
	if _, err := New(Config{Client: newClient(t), MaxKeys: -1}); err == nil {
		t.Fatal("negative MaxKeys accepted")
	}
	if _, err := New(Config{Client: newClient(t), Token: " x"}); err == nil {
		t.Fatal("token with a space accepted")
	}
	if _, err := New(Config{Client: newClient(t)}); err != nil {
		t.Fatalf("New: %v", err)
	}
}

// TestTTLRoutes: a counter's deadline through the API, as Redis PEXPIRE,
// PTTL and PERSIST answer.
func TestTTLRoutes(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	if r := call(t, s, "GET", "/v1/counters/cold:k/ttl", ""); r.status != 200 || r.body["exists"] != false || r.body["ttl_ms"] != nil {
		t.Fatalf("ttl of a missing counter: %d %s", r.status, r.raw)
	}
	if r := call(t, s, "PUT", "/v1/counters/cold:k/ttl", `{"ttl_ms":60000}`); r.status != 200 || r.body["exists"] != false {
		t.Fatalf("expire of a missing counter: %d %s", r.status, r.raw)
	}
	call(t, s, "POST", "/v1/counters/cold:k/incr", `{"by":3}`)
	if r := call(t, s, "PUT", "/v1/counters/cold:k/ttl", `{"ttl_ms":60000}`); r.status != 200 || r.body["exists"] != true {
		t.Fatalf("expire: %d %s", r.status, r.raw)
	}
	r := call(t, s, "GET", "/v1/counters/cold:k/ttl", "")
	ms, _ := r.body["ttl_ms"].(json.Number).Int64()
	if r.status != 200 || r.body["exists"] != true || ms <= 0 || ms > 60000 || r.body["deadline"] == nil {
		t.Fatalf("ttl: %d %s", r.status, r.raw)
	}
	for _, body := range []string{`{}`, `{"ttl_ms":"5"}`, `{"ttl_ms":null}`, `{"TTL_MS":5}`, `{"ttl_ms":99999999999999999}`} {
		if r := call(t, s, "PUT", "/v1/counters/cold:k/ttl", body); r.status != 400 {
			t.Errorf("PUT ttl %s: %d %s", body, r.status, r.raw)
		}
	}
	if r := call(t, s, "DELETE", "/v1/counters/cold:k/ttl", ""); r.status != 200 || r.body["persisted"] != true {
		t.Fatalf("persist: %d %s", r.status, r.raw)
	}
	if r := call(t, s, "GET", "/v1/counters/cold:k/ttl", ""); r.body["ttl_ms"] != nil || r.body["exists"] != true {
		t.Fatalf("after persist: %s", r.raw)
	}
	if r := call(t, s, "PUT", "/v1/counters/cold:k/ttl", `{"ttl_ms":0}`); r.status != 200 || r.body["exists"] != true {
		t.Fatalf("expire now: %d %s", r.status, r.raw)
	}
	if v := value(t, c, "cold:k"); v != 0 {
		t.Fatalf("value after expiring now: %d", v)
	}
}
