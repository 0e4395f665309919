package server

import (
	"context"
	"errors"
	"strings"
	"testing"
)

// scopeTokens are the tokens of the scope tests: one per scope, and one
// with every scope that is limited to another namespace.
var scopeTokens = []Token{
	{Name: "reader", Secret: "r-secret", Scopes: []Scope{ScopeRead}},
	{Name: "writer", Secret: "w-secret", Scopes: []Scope{ScopeWrite}},
	{Name: "admin", Secret: "a-secret", Scopes: []Scope{ScopeAdmin}},
	{Name: "scraper", Secret: "m-secret", Scopes: []Scope{ScopeMetrics}},
	{Name: "other-tenant", Secret: "o-secret", Scopes: []Scope{ScopeRead, ScopeWrite, ScopeAdmin}, Prefixes: []string{"other:"}},
}

// TestTokenScopes: every route × {no token, read, write, admin, metrics,
// a token of another namespace} answers the expected status. The table
// must name every route the server serves.
func TestTokenScopes(t *testing.T) {
	s, c := newTestServer(t, nil, Config{Tokens: scopeTokens})
	ctx := context.Background()
	if err := c.Incr(ctx, "tenant:k", 5); err != nil {
		t.Fatal(err)
	}
	type want struct{ none, read, write, admin, metrics, other int }
	cases := []struct {
		route        string
		method, path string
		body         string
		want         want
	}{
		{"POST /v1/counters/{key}/incr", "POST", "/v1/counters/tenant:k/incr", `{"by":1}`, want{401, 403, 200, 403, 403, 403}},
		{"GET /v1/counters/{key}", "GET", "/v1/counters/tenant:k", "", want{401, 200, 403, 403, 403, 403}},
		{"POST /v1/counters:get", "POST", "/v1/counters:get", `{"keys":["tenant:k"]}`, want{401, 200, 403, 403, 403, 403}},
		{"GET /v1/counters/{key}/shards", "GET", "/v1/counters/tenant:k/shards", "", want{401, 403, 403, 200, 403, 403}},
		{"PUT /v1/counters/{key}/shards", "PUT", "/v1/counters/tenant:k/shards", `{"n":4}`, want{401, 403, 403, 200, 403, 403}},
		{"GET /v1/counters/{key}/ttl", "GET", "/v1/counters/tenant:k/ttl", "", want{401, 200, 403, 403, 403, 403}},
		{"PUT /v1/counters/{key}/ttl", "PUT", "/v1/counters/tenant:k/ttl", `{"ttl_ms":600000}`, want{401, 403, 403, 200, 403, 403}},
		{"DELETE /v1/counters/{key}/ttl", "DELETE", "/v1/counters/tenant:k/ttl", "", want{401, 403, 403, 200, 403, 403}},
		{"DELETE /v1/counters/{key}", "DELETE", "/v1/counters/tenant:k", "", want{401, 403, 403, 200, 403, 403}},
		{"GET /v1/nodes", "GET", "/v1/nodes", "", want{401, 403, 403, 200, 403, 403}},
		{"GET /v1/hotkeys", "GET", "/v1/hotkeys", "", want{401, 403, 403, 200, 403, 200}},
		{"GET /v1/stats", "GET", "/v1/stats", "", want{401, 403, 403, 200, 403, 403}},
		{"GET /metrics", "GET", "/metrics", "", want{401, 403, 403, 200, 200, 403}},
		{"GET /v1/openapi.json", "GET", "/v1/openapi.json", "", want{200, 200, 200, 200, 200, 200}},
		{"GET /healthz", "GET", "/healthz", "", want{200, 200, 200, 200, 200, 200}},
		{"GET /readyz", "GET", "/readyz", "", want{200, 200, 200, 200, 200, 200}},
		{"GET /{$}", "GET", "/", "", want{200, 200, 200, 200, 200, 200}},
		{"GET /favicon.ico", "GET", "/favicon.ico", "", want{200, 200, 200, 200, 200, 200}},
		{"GET /assets/{file...}", "GET", "/assets/dashboard.js", "", want{200, 200, 200, 200, 200, 200}},
	}
	covered := map[string]bool{}
	for _, tc := range cases {
		covered[tc.route] = true
		for _, who := range []struct {
			name, auth string
			want       int
		}{
			{"no token", "", tc.want.none},
			{"read", "Bearer r-secret", tc.want.read},
			{"write", "Bearer w-secret", tc.want.write},
			{"admin", "Bearer a-secret", tc.want.admin},
			{"metrics", "Bearer m-secret", tc.want.metrics},
			{"other namespace", "Bearer o-secret", tc.want.other},
		} {
			var hdr []string
			if who.auth != "" {
				hdr = []string{"Authorization", who.auth}
			}
			r := call(t, s, tc.method, tc.path, tc.body, hdr...)
			if r.status != who.want {
				t.Errorf("%s %s with %s: %d, want %d (%s)", tc.method, tc.path, who.name, r.status, who.want, strings.TrimSpace(r.raw))
				continue
			}
			switch r.status {
			case 401:
				if !strings.HasPrefix(r.header.Get("WWW-Authenticate"), "Bearer") || r.body["error"] == nil {
					t.Errorf("%s %s with %s: 401 without a Bearer challenge or a JSON error", tc.method, tc.path, who.name)
				}
			case 403:
				if r.body["error"] == nil {
					t.Errorf("%s %s with %s: 403 without a JSON error", tc.method, tc.path, who.name)
				}
			}
			if tc.route == "GET /v1/hotkeys" && who.name == "other namespace" && strings.Contains(r.raw, "tenant:k") {
				t.Errorf("a token limited to other: sees tenant:k in /v1/hotkeys: %s", r.raw)
			}
		}
	}
	for _, rt := range s.Routes() {
		if !covered[rt] {
			t.Errorf("route %s is not in the scope table", rt)
		}
	}
}

// TestTokenPrefixes: a token limited to a prefix works inside it; a batch
// read with one key outside it is refused whole; hot keys show only its
// own keys.
func TestTokenPrefixes(t *testing.T) {
	s, c := newTestServer(t, nil, Config{Tokens: scopeTokens})
	other := []string{"Authorization", "Bearer o-secret"}
	if r := call(t, s, "POST", "/v1/counters/other:k/incr", `{"by":2}`, other...); r.status != 200 {
		t.Fatalf("incr inside the prefix: %d %s", r.status, r.raw)
	}
	if err := c.Incr(context.Background(), "tenant:k", 9); err != nil {
		t.Fatal(err)
	}
	if r := call(t, s, "GET", "/v1/counters/other:k", "", other...); r.status != 200 || value(t, c, "other:k") != 2 {
		t.Fatalf("read inside the prefix: %d %s", r.status, r.raw)
	}
	if r := call(t, s, "POST", "/v1/counters:get", `{"keys":["other:k","tenant:k"]}`, other...); r.status != 403 || strings.Contains(r.raw, `"values"`) {
		t.Fatalf("batch with a key outside the prefix: %d %s", r.status, r.raw)
	}
	r := call(t, s, "GET", "/v1/hotkeys", "", other...)
	if r.status != 200 || !strings.Contains(r.raw, "other:k") || strings.Contains(r.raw, "tenant:k") {
		t.Fatalf("hot keys of a limited token: %d %s", r.status, r.raw)
	}
	if r := call(t, s, "GET", "/v1/hotkeys", "", "Authorization", "Bearer a-secret"); !strings.Contains(r.raw, "tenant:k") {
		t.Fatalf("hot keys of an unlimited admin: %s", r.raw)
	}
}

// TestBearerScheme: the scheme is case-insensitive; other schemes, empty
// credentials and a token with trailing junk are refused.
func TestBearerScheme(t *testing.T) {
	s, _ := newTestServer(t, nil, Config{Token: "s3cret"})
	for _, h := range []string{"Bearer s3cret", "bearer s3cret", "BEARER s3cret", "bEaReR   s3cret"} {
		if r := call(t, s, "GET", "/v1/counters/k", "", "Authorization", h); r.status != 200 {
			t.Errorf("%q: %d %s", h, r.status, r.raw)
		}
	}
	for _, h := range []string{"", "Bearer", "Bearer ", "Basic czNjcmV0", "s3cret", "Bearer s3cret x", "Bearer s3cre", "Bearers3cret", "Token s3cret"} {
		if r := call(t, s, "GET", "/v1/counters/k", "", "Authorization", h); r.status != 401 {
			t.Errorf("%q: %d %s, want 401", h, r.status, r.raw)
		}
	}
}

// TestMetricsPublicAndNoDashboard: /metrics can be served without a token
// while the data routes still need one; the dashboard can be turned off.
func TestMetricsPublicAndNoDashboard(t *testing.T) {
	s, _ := newTestServer(t, nil, Config{Token: "s3cret", MetricsPublic: true, NoDashboard: true})
	if r := call(t, s, "GET", "/metrics", ""); r.status != 200 || !strings.Contains(r.raw, "hotcount_cache_up") {
		t.Fatalf("public metrics: %d", r.status)
	}
	if r := call(t, s, "GET", "/v1/counters/k", ""); r.status != 401 {
		t.Fatalf("read without a token: %d", r.status)
	}
	for _, p := range []string{"/", "/assets/dashboard.js", "/favicon.ico"} {
		if r := call(t, s, "GET", p, ""); r.status != 404 {
			t.Errorf("%s with the dashboard off: %d", p, r.status)
		}
	}
}

// TestTokenConfig: bad tokens are refused by New with ErrConfig.
func TestTokenConfig(t *testing.T) {
	c := newClient(t)
	for _, tc := range []struct {
		name   string
		tokens []Token
	}{
		{"empty secret", []Token{{Name: "a", Scopes: []Scope{ScopeRead}}}},
		{"space in secret", []Token{{Name: "a", Secret: "a b", Scopes: []Scope{ScopeRead}}}},
		{"no scopes", []Token{{Name: "a", Secret: "x"}}},
		{"unknown scope", []Token{{Name: "a", Secret: "x", Scopes: []Scope{"root"}}}},
		{"empty prefix", []Token{{Name: "a", Secret: "x", Scopes: []Scope{ScopeRead}, Prefixes: []string{""}}}},
		{"same name", []Token{{Name: "a", Secret: "x", Scopes: []Scope{ScopeRead}}, {Name: "a", Secret: "y", Scopes: []Scope{ScopeRead}}}},
		{"same secret", []Token{{Name: "a", Secret: "x", Scopes: []Scope{ScopeRead}}, {Name: "b", Secret: "x", Scopes: []Scope{ScopeWrite}}}},
	} {
		if _, err := New(Config{Client: c, Tokens: tc.tokens}); !errors.Is(err, ErrConfig) {
			t.Errorf("%s: %v, want ErrConfig", tc.name, err)
		}
	}
}
