package main

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/internal/testenv"
)

func TestRebuildBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--data", "x"},
		{"--redis", "127.0.0.1:1"},
		{"--redis", "127.0.0.1:1", "--data", "x", "--postgres", "postgres://x"},
		{"--redis", "127.0.0.1:1", "--data", "x", "--schema", "s"},
		{"--redis", "127.0.0.1:1", "--data", "x", "--key", "a", "--prefix", "b"},
		{"--redis", "127.0.0.1:1", "--data", "x", "--key", "bad{key"},
		{"--redis", "127.0.0.1:1", "--data", "x", "--n", "0"},
		{"--redis", "127.0.0.1:1", "--data", "x", "extra"},
	} {
		code, _, errOut := clusterCLI(t, t.Context(), append([]string{"rebuild"}, args...)...)
		if code != exitUsage || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || errOut == "" {
			t.Errorf("rebuild %q: exit %d, stderr %q; want exit 2 and one line", args, code, errOut)
		}
	}
}

// TestRebuildCommand writes durable counters, flushes Redis, and checks
// that `hotcount rebuild` brings the cache view back, on SQLite (--data)
// and PostgreSQL (--postgres --schema).
func TestRebuildCommand(t *testing.T) {
	ctx := t.Context()
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (durable.Backend, []string)
	}{
		{"sqlite", func(t *testing.T) (durable.Backend, []string) {
			dir := t.TempDir()
			db, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			return db, []string{"--data", dir}
		}},
		{"postgres", func(t *testing.T) (durable.Backend, []string) {
			url, schema := testenv.PostgresURL(), testenv.PostgresSchema(t)
			db, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			return db, []string{"--postgres", url, "--schema", schema}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be, flags := tc.open(t)
			c, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: []string{n.Addr}}, Defaults: hotcount.Namespace{Mode: hotcount.ModeDurable}, Durability: hotcount.DurabilityConfig{Store: be}})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int64{}
			for i := range 30 {
				k := fmt.Sprintf("cli:rebuild:%d", i%3)
				if err := c.IncrID(ctx, k, int64(i+1), fmt.Sprint("id-", i)); err != nil {
					t.Fatal(err)
				}
				want[k] += int64(i + 1)
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			be.Close()
			if _, err := testenv.Do(ctx, n.Addr, "FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"rebuild", "--redis", n.Addr, "--prefix", "cli:rebuild:", "--json"}, flags...)
			code, out, errOut := clusterCLI(t, ctx, args...)
			if code != exitOK {
				t.Fatalf("rebuild: exit %d, stderr %q", code, errOut)
			}
			var rep struct{ Keys, Corrected int }
			if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Keys != 3 || rep.Corrected != 3 {
				t.Fatalf("rebuild printed %q (%v), want 3 keys corrected", out, err)
			}
			for k, v := range want {
				code, out, errOut := clusterCLI(t, ctx, "get", "--redis", n.Addr, "--key", k, "--json")
				var got struct{ Value int64 }
				if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || got.Value != v {
					t.Fatalf("get %s after rebuild: exit %d, %q %q; want %d", k, code, out, errOut, v)
				}
			}
			// One key, already right: nothing to correct; text output.
			args = append([]string{"rebuild", "--redis", n.Addr, "--key", "cli:rebuild:1"}, flags...)
			code, out, errOut = clusterCLI(t, ctx, args...)
			if code != exitOK || !strings.Contains(out, "1 checked, 0 corrected") {
				t.Fatalf("rebuild --key: exit %d, %q %q", code, out, errOut)
			}
		})
	}
}
