package server

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestHostileRequests sends 1,000 random malformed requests to a server on
// a real loopback listener: none may answer 5xx or panic, the server stays
// healthy, and no counter changes. Every request is malformed by
// construction (bad key, bad body, bad token or wrong method), so a 2xx on
// a write would be a bug too.
func TestHostileRequests(t *testing.T) {
	const token = "t0ken"
	s, c := newTestServer(t, nil, Config{Token: token})
	ts := httptest.NewServer(s)
	defer ts.Close()
	ctx := context.Background()
	seeded := map[string]int64{"likes:1": 7, "views:2": -3, "one:x": 11}
	for k, v := range seeded {
		if err := c.Incr(ctx, k, v); err != nil {
			t.Fatal(err)
		}
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(xs []string) string { return xs[rng.IntN(len(xs))] }
	badKeys := []string{"a%7Bb", "%7D", "k%00", "k%0A", "%FF", strings.Repeat("x", 600), "", ".", ".."}
	goodKeys := []string{"likes:1", "views:2", "one:x"}
	badBodies := []string{`{`, `[]`, `"x"`, `{"by":0}`, `{"by":"1"}`, `{"by":1.5}`, `{"by":9223372036854775808}`,
		`{"by":-9223372036854775809}`, `{"by":1,"x":2}`, `{"by":1}{}`, `{"id":5}`, "\x00\xff", `{"n":"3"}`, `{"keys":[1]}`,
		`{"keys":"likes:1"}`, `{"by":1e400}`, strings.Repeat("[", 5000), `{"by":1,"by":{}}`}
	tokens := []string{"", "Bearer wrong", "Basic dDBrZW4=", "Bearer " + token + "x", "bearer"}
	var statuses = map[int]int{}
	for i := range 1000 {
		var method, path, body, auth string
		switch rng.IntN(6) {
		case 0: // a write with a bad key, right token
			method, path, body, auth = "POST", "/v1/counters/"+pick(badKeys)+"/incr", `{"by":1}`, "Bearer "+token
		case 1: // a write with a bad body, right token
			method, path, body, auth = pick([]string{"POST", "PUT"}), "/v1/counters/"+pick(goodKeys)+pick([]string{"/incr", "/shards"}), pick(badBodies), "Bearer "+token
		case 2: // a good write without the right token
			method, path, body, auth = pick([]string{"POST", "DELETE", "PUT"}), "/v1/counters/"+pick(goodKeys)+pick([]string{"/incr", "", "/shards"}), `{"by":1,"n":2}`, pick(tokens)
		case 3: // wrong methods and unknown routes
			method, path = pick([]string{"PATCH", "TRACE", "OPTIONS", "POST", "DELETE"}), pick([]string{"/v1/counters", "/v1/nodes", "/v1/hotkeys", "/metrics", "/v1/counters:get", "/nope", "/v1/counters/likes:1/incr/x"})
			if method == "POST" && path == "/v1/counters:get" {
				body = pick(badBodies)
			}
		case 4: // reads with odd queries, bodies and keys
			method, path, body = "GET", "/v1/counters/"+pick(append(badKeys, goodKeys...))+pick([]string{"?consistency=exact", "?consistency=bogus", "?x=%zz", ""}), pick(badBodies)
		case 5: // a huge body
			method, path, body, auth = "POST", "/v1/counters/"+pick(goodKeys)+"/incr", `{"by":1,"id":"`+strings.Repeat("z", 70<<10)+`"}`, "Bearer "+token
		}
		req, err := http.NewRequest(method, ts.URL+path, strings.NewReader(body))
		if err != nil {
			continue // not even a request: nothing was sent
		}
		if auth != "" {
			req.Header.Set("Authorization", auth)
		}
		resp, err := ts.Client().Do(req)
		if err != nil {
			t.Fatalf("request %d %s %s: %v", i, method, path, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		statuses[resp.StatusCode]++
		if resp.StatusCode >= 500 || (resp.StatusCode < 300 && method != "GET") {
			t.Errorf("request %d %s %s body %.60q: status %d", i, method, path, body, resp.StatusCode)
		}
	}
	if r := call(t, s, "GET", "/healthz", ""); r.status != 200 {
		t.Fatalf("healthz after the barrage: %d", r.status)
	}
	for k, want := range seeded {
		if got := value(t, c, k); got != want {
			t.Errorf("%s changed: %d, want %d", k, got, want)
		}
	}
	t.Logf("statuses: %v", statuses)
}
