package hotcount_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/server"
)

// TestExactReadWithoutCache: with every cache node stopped, an exact read
// of a durable counter answers from the durable store: the library's
// Reading with the right value and N unknown, and the HTTP API's 200 with
// "n": null, never 503.
func TestExactReadWithoutCache(t *testing.T) {
	ctx := context.Background()
	node, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer node.Stop()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: filepath.Join(t.TempDir(), "hotcount.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	c, err := hotcount.New(ctx, hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: []string{node.Addr}},
		Defaults:   hotcount.Namespace{Mode: hotcount.ModeDurable},
		Durability: hotcount.DurabilityConfig{Store: db},
		Timeout:    500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// The cache is gone: Close gives up on it soon.
		cctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		c.Close(cctx)
	}()
	const key = "paid:orders:1"
	for i := range 7 {
		if err := c.Incr(ctx, key, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if r, err := c.GetExact(ctx, key); err != nil || r.Value != 28 || r.N != 1 || r.NUnknown {
		t.Fatalf("exact read with the cache up: %+v %v", r, err)
	}
	srv, err := server.New(server.Config{Client: c, NoDashboard: true})
	if err != nil {
		t.Fatal(err)
	}
	ts := httptest.NewServer(srv)
	defer ts.Close()

	if err := node.Stop(); err != nil {
		t.Fatal(err)
	}
	r, err := c.GetExact(ctx, key)
	if err != nil || r.Value != 28 || !r.NUnknown || r.N != 0 {
		t.Fatalf("exact read with every cache node stopped: %+v %v; want value 28, N unknown", r, err)
	}
	resp, err := http.Get(ts.URL + "/v1/counters/" + key + "?consistency=exact")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var got map[string]any
	if resp.StatusCode != 200 || json.Unmarshal(body, &got) != nil || got["value"] != float64(28) {
		t.Fatalf("GET ?consistency=exact with the cache down: %d %s; want 200 and value 28", resp.StatusCode, body)
	}
	if n, ok := got["n"]; !ok || n != nil {
		t.Fatalf(`"n" is %v (present %v), want null: %s`, n, ok, body)
	}
}
