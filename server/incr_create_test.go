package server

import (
	"context"
	"testing"
)

// TestIncrWithNRefusedCreatesNothing: an increment with "n" for a counter
// that does not exist yet, refused for its "by" (past the sub-counter
// bound: 409) or its "id" (the key is not in durable mode: 400), leaves
// the counter as it was: it does not exist, and nothing is pinned.
func TestIncrWithNRefusedCreatesNothing(t *testing.T) {
	s, c := newTestServer(t, nil, Config{})
	for _, tc := range []struct {
		name, key, body string
		status          int
	}{
		{"by past the bound", "fresh:by", `{"by":9007199254740992,"n":4}`, 409},
		{"by past the negative bound", "fresh:neg", `{"by":-9007199254740992,"n":4}`, 409},
		{"id on a fast-mode key", "fresh:id", `{"by":1,"id":"x1","n":4}`, 400},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := call(t, s, "POST", "/v1/counters/"+tc.key+"/incr", tc.body)
			if r.status != tc.status {
				t.Errorf("status %d, want %d (%s)", r.status, tc.status, r.raw)
			}
			if msg, _ := r.body["error"].(string); msg == "" {
				t.Errorf("no JSON error: %q", r.raw)
			}
			rep, err := c.Shards(context.Background(), tc.key)
			if err != nil {
				t.Fatal(err)
			}
			if rep.Exists || rep.Pinned {
				t.Errorf("after the refused increment: exists=%v pinned=%v n=%d, want a counter that does not exist", rep.Exists, rep.Pinned, rep.N)
			}
		})
	}
}
