package main

import (
	"context"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/hotcount/hotcount/internal/testenv"
)

// TestServeBinaryClusterPostgres runs the server as a separate process
// against a real 3-primary Redis Cluster (1 replica each) and PostgreSQL:
// fast and durable namespaces, placement on distinct primaries, a resent id,
// and the same values after SIGTERM and a restart.
func TestServeBinaryClusterPostgres(t *testing.T) {
	ctx := context.Background()
	cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	schema := testenv.PostgresSchema(t)
	conn, err := pgx.Connect(ctx, testenv.PostgresURL())
	if err != nil {
		t.Fatalf("PostgreSQL at %s: %v", testenv.PostgresURL(), err)
	}
	if _, err := conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	pg, err := url.Parse(testenv.PostgresURL())
	if err != nil {
		t.Fatal(err)
	}
	q := pg.Query()
	q.Set("search_path", schema)
	pg.RawQuery = q.Encode()

	cfgFile := filepath.Join(t.TempDir(), "hotcount.yaml")
	yaml := "namespaces:\n  - {prefix: \"paid:\", mode: durable}\n  - {prefix: \"views:\", buffered: true}\n  - {prefix: \"likes:\", cold_start: false}\n"
	if err := os.WriteFile(cfgFile, []byte(yaml), 0o600); err != nil {
		t.Fatal(err)
	}
	bin := buildBinary(t)
	args := []string{"--redis", strings.Join(cl.Seeds(), ","), "--postgres", pg.String(), "--config", cfgFile}
	cmd, base, stderr := startBinary(t, bin, args...)
	for i := range 30 {
		for _, req := range []struct{ key, body string }{
			{"likes:post:1", `{"by":1}`},
			{"views:video:1", `{"by":2}`},
			{"paid:orders:1", fmt.Sprintf(`{"by":3,"id":"o-%d"}`, i%10)}, // 10 ids, each 3 times
		} {
			if code, m := request(t, "POST", base+"/v1/counters/"+req.key+"/incr", req.body); code != 200 {
				t.Fatalf("incr %s: %d %v", req.key, code, m)
			}
		}
	}
	want := map[string]float64{"likes:post:1": 30, "views:video:1": 60, "paid:orders:1": 30}
	check := func(when string) {
		t.Helper()
		for key, v := range want {
			deadline := time.Now().Add(5 * time.Second) // buffered and durable views settle within a flush
			for {
				code, m := request(t, "GET", base+"/v1/counters/"+key, "")
				if code == 200 && m["value"] == v {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s: %s = %d %v, want %v", when, key, code, m, v)
				}
				time.Sleep(100 * time.Millisecond)
			}
		}
		if code, m := request(t, "GET", base+"/v1/counters/paid:orders:1?consistency=exact", ""); code != 200 || m["value"] != 30.0 {
			t.Fatalf("%s: exact read %d %v", when, code, m)
		}
	}
	check("before stop")
	code, rep := request(t, "GET", base+"/v1/counters/likes:post:1/shards", "")
	if code != 200 || rep["distinct_nodes"] != 3.0 || rep["collisions"] != 0.0 {
		t.Fatalf("shards: %d %v", code, rep)
	}
	stopBinary(t, cmd, stderr)

	cmd, base, stderr = startBinary(t, bin, args...)
	check("after restart")
	stopBinary(t, cmd, stderr)
}
