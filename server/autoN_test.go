package server

import (
	"context"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
)

// TestHotKeysShowAutoNDecisions: with automatic N on, a hot key's growth is
// listed with its reason in /v1/hotkeys, and the key's N follows.
func TestHotKeysShowAutoNDecisions(t *testing.T) {
	ctx := context.Background()
	c, err := hotcount.New(ctx, hotcount.Config{Defaults: hotcount.Namespace{N: 2, NoColdStart: true}, Meta: hotcount.MetaConfig{TTL: 10 * time.Millisecond}, AutoN: hotcount.AutoNConfig{Enabled: true, Budget: 5, MaxN: 8}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	s, _ := newTestServer(t, c, Config{})
	deadline := time.Now().Add(20 * time.Second)
	for {
		for range 20 {
			if r := call(t, s, "POST", "/v1/counters/viral/incr", ""); r.status != 200 {
				t.Fatalf("incr: %d %s", r.status, r.raw)
			}
		}
		r := call(t, s, "GET", "/v1/hotkeys", "")
		ds, _ := r.body["decisions"].([]any)
		if len(ds) > 0 {
			d := ds[0].(map[string]any)
			keys := r.body["keys"].([]any)
			k := keys[0].(map[string]any)
			if d["key"] != "viral" || d["action"] != "grow" || d["reason"] == "" || k["reason"] != d["reason"] {
				t.Fatalf("decision %v, key %v", d, k)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no automatic-N decision: %s", r.raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
