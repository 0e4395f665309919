package server

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable/sqlite"
)

// TestDurableModeOverHTTP runs the API over a real Client in durable mode
// on a SQLite file: an increment resent with the same id counts once, and
// an exact read sees every acknowledged increment.
func TestDurableModeOverHTTP(t *testing.T) {
	ctx := context.Background()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "hc.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := hotcount.New(ctx, hotcount.Config{Namespaces: []hotcount.Namespace{{Prefix: "orders:", Mode: hotcount.ModeDurable}}, Durability: hotcount.DurabilityConfig{Store: db}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	s, _ := newTestServer(t, c, Config{})
	for i := 0; i < 3; i++ {
		if r := call(t, s, "POST", "/v1/counters/orders:1/incr", `{"by":4,"id":"req-1"}`); r.status != 200 {
			t.Fatalf("incr: %d %s", r.status, r.raw)
		}
	}
	if r := call(t, s, "POST", "/v1/counters/orders:1/incr", `{"by":1,"id":"req-2"}`); r.status != 200 {
		t.Fatalf("incr: %d %s", r.status, r.raw)
	}
	r := call(t, s, "GET", "/v1/counters/orders:1?consistency=exact", "")
	if r.status != 200 || r.body["value"] != json.Number("5") || r.body["mode"] != "durable" || r.body["stale_ms"] != json.Number("0") {
		t.Fatalf("exact: %d %s", r.status, r.raw)
	}
	if r := call(t, s, "GET", "/v1/counters/fast:1?consistency=exact", ""); r.status != 400 {
		t.Fatalf("exact on a fast key: %d %s", r.status, r.raw)
	}
}
