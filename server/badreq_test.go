package server

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/hotcount/hotcount"
)

// TestBadRequests sends malformed or unauthorised requests to a server over
// the real embedded Client. Each gets its documented status and a JSON
// error, and none changes the counter "k" (which holds 7) or creates
// another.
func TestBadRequests(t *testing.T) {
	const token = "tok-123"
	s, c := newTestServer(t, nil, Config{Token: token, MaxKeys: 1000})
	if err := c.Incr(context.Background(), "k", 7); err != nil {
		t.Fatal(err)
	}
	auth := []string{"Authorization", "Bearer " + token}
	long := strings.Repeat("x", 513)
	tooMany := `{"keys":["k"` + strings.Repeat(`,"k"`, 1000) + `]}`
	huge := `{"by":1,"id":"` + strings.Repeat("a", 70<<10) + `"}`
	cases := []struct {
		name, method, path, body string
		header                   []string
		status                   int
	}{
		{"malformed JSON", "POST", "/v1/counters/k/incr", `{"by":`, auth, 400},
		{"not an object", "POST", "/v1/counters/k/incr", `[1]`, auth, 400},
		{"JSON null", "POST", "/v1/counters/k/incr", `null`, auth, 400},
		{"unknown field", "POST", "/v1/counters/k/incr", `{"by":1,"extra":true}`, auth, 400},
		{"trailing garbage", "POST", "/v1/counters/k/incr", `{"by":1} x`, auth, 400},
		{"two objects", "POST", "/v1/counters/k/incr", `{"by":1}{"by":1}`, auth, 400},
		{"huge body", "POST", "/v1/counters/k/incr", huge, auth, 413},
		{"huge body, not JSON", "POST", "/v1/counters/k/incr", "{" + strings.Repeat("x", 70<<10), auth, 413},
		{"by not an integer", "POST", "/v1/counters/k/incr", `{"by":1.5}`, auth, 400},
		{"by as a string", "POST", "/v1/counters/k/incr", `{"by":"5"}`, auth, 400},
		{"by overflows int64", "POST", "/v1/counters/k/incr", `{"by":9223372036854775808}`, auth, 400},
		{"by in exponent form", "POST", "/v1/counters/k/incr", `{"by":1e3}`, auth, 400},
		{"by zero", "POST", "/v1/counters/k/incr", `{"by":0}`, auth, 400},
		{"empty id", "POST", "/v1/counters/k/incr", `{"id":""}`, auth, 400},
		{"id with a space", "POST", "/v1/counters/k/incr", `{"id":"a b"}`, auth, 400},
		{"key too long", "POST", "/v1/counters/" + long + "/incr", ``, auth, 400},
		{"braces in key", "POST", "/v1/counters/" + url.PathEscape("{k}") + "/incr", ``, auth, 400},
		{"NUL in key", "POST", "/v1/counters/k%00/incr", ``, auth, 400},
		{"empty key segment", "POST", "/v1/counters//incr", `{"by":1}`, auth, 400},
		{"dot key", "POST", "/v1/counters/./incr", `{"by":1}`, auth, 400},
		{"dot-dot key", "GET", "/v1/counters/..", ``, auth, 400},
		{"newline in key", "GET", "/v1/counters/k%0A", ``, auth, 400},
		{"invalid UTF-8 key", "POST", "/v1/counters/k%FF/incr", ``, auth, 400},
		{"wrong method on incr", "GET", "/v1/counters/k/incr", ``, auth, 405},
		{"wrong method on counter", "PATCH", "/v1/counters/k", `{}`, auth, 405},
		{"wrong method on batch", "PUT", "/v1/counters:get", `{"keys":["k"]}`, auth, 405},
		{"missing token on incr", "POST", "/v1/counters/k/incr", `{"by":1}`, nil, 401},
		{"wrong token on incr", "POST", "/v1/counters/k/incr", `{"by":1}`, []string{"Authorization", "Bearer tok-124"}, 401},
		{"token without Bearer", "POST", "/v1/counters/k/incr", `{"by":1}`, []string{"Authorization", token}, 401},
		{"missing token on clear", "DELETE", "/v1/counters/k", ``, nil, 401},
		{"missing token on resize", "PUT", "/v1/counters/k/shards", `{"n":4}`, nil, 401},
		{"too many keys", "POST", "/v1/counters:get", tooMany, auth, 400},
		{"empty keys list", "POST", "/v1/counters:get", `{"keys":[]}`, auth, 400},
		{"keys missing", "POST", "/v1/counters:get", `{}`, auth, 400},
		{"bad key in batch", "POST", "/v1/counters:get", `{"keys":["k","{x}"]}`, auth, 400},
		{"empty batch body", "POST", "/v1/counters:get", ``, auth, 400},
		{"bad consistency", "GET", "/v1/counters/k?consistency=strong", ``, auth, 400},
		{"resize n zero", "PUT", "/v1/counters/k/shards", `{"n":0}`, auth, 400},
		{"resize n too big", "PUT", "/v1/counters/k/shards", `{"n":100000}`, auth, 400},
		{"resize n missing", "PUT", "/v1/counters/k/shards", `{}`, auth, 400},
		{"resize n not an integer", "PUT", "/v1/counters/k/shards", `{"n":"4"}`, auth, 400},
		{"bad hotkeys n", "GET", "/v1/hotkeys?n=0", ``, auth, 400},
		{"unknown route", "GET", "/v1/nothing", ``, nil, 404},
	}
	if len(cases) < 20 {
		t.Fatalf("only %d cases", len(cases))
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, tc.method, tc.path, tc.body, tc.header...)
			if r.status != tc.status {
				t.Errorf("status %d, want %d (%s)", r.status, tc.status, r.raw)
			}
			if msg, _ := r.body["error"].(string); msg == "" {
				t.Errorf("no JSON error: %q", r.raw)
			}
			if v := value(t, c, "k"); v != 7 {
				t.Errorf("counter k changed to %d", v)
			}
		})
	}
	if n := countStoredKeys(t, s); n != 1 {
		t.Errorf("the bad requests created counters: %d keys have values", n)
	}
}

// countStoredKeys returns how many distinct counters hold sub-counters in
// the embedded store behind s.
func countStoredKeys(t *testing.T, s *Server) int {
	t.Helper()
	b := s.c.(*hotcount.Client)
	type keyLister interface{ Keys() []string }
	kl, ok := b.Store().(keyLister)
	if !ok {
		t.Fatalf("store %T cannot list keys", b.Store())
	}
	seen := map[string]bool{}
	for _, k := range kl.Keys() {
		if i := strings.LastIndex(k, "#"); strings.HasPrefix(k, "{") && i > 0 {
			seen[k[1:i]] = true
		} else {
			seen[k] = true
		}
	}
	if len(seen) != 1 {
		t.Logf("stored: %v", fmt.Sprint(kl.Keys()))
	}
	return len(seen)
}
