package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotcount/hotcount/internal/testenv"
)

// TestProxyTLSCluster runs the proxy against a Redis Cluster that serves
// TLS (3 primaries with a replica each, TLS on the cluster bus and for
// replication too), reached through its TLS ports with the test CA: a
// counter of 4 sub-counters spread over the primaries counts exactly,
// and plain keys of every node, a cross-slot MGET and DEL pass through;
// after a primary is killed and its replica (fed over TLS) takes over,
// the proxy finds the new primary's TLS port and counts on exactly.
func TestProxyTLSCluster(t *testing.T) {
	clearServeEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, files, err := testenv.StartTLSCluster(ctx, testenv.ClusterOptions{Primaries: 3, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(); os.RemoveAll(files.Dir) })
	conf := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(conf, []byte("namespaces: [{prefix: \"tc:\", n: 4, cold_start: false}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	addr, _, stop := inProcessProxy(t, "--redis", strings.Join(c.TLSSeeds(), ","), "--redis-tls-ca", files.CA, "--config", conf)
	rc := redis.NewClient(&redis.Options{Addr: addr})
	defer rc.Close()

	const counter = "tc:likes"
	for range 40 {
		if err := rc.IncrBy(ctx, counter, 3).Err(); err != nil {
			t.Fatal(err)
		}
	}
	if v, err := rc.Get(ctx, counter).Int64(); err != nil || v != 120 {
		t.Fatalf("GET %s through the proxy: %d %v, want 120", counter, v, err)
	}
	keys := make([]string, 30)
	for i := range keys {
		keys[i] = fmt.Sprintf("plain:%d", i)
		if err := rc.Set(ctx, keys[i], "v"+keys[i], 0).Err(); err != nil {
			t.Fatalf("SET %s: %v", keys[i], err)
		}
	}
	vals, err := rc.MGet(ctx, keys...).Result()
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range vals {
		if v != "v"+keys[i] {
			t.Fatalf("MGET %s: %v", keys[i], v)
		}
	}
	if n, err := rc.Del(ctx, keys...).Result(); err != nil || n != int64(len(keys)) {
		t.Fatalf("DEL: %d %v, want %d", n, err, len(keys))
	}

	// A failover: the first primary, once its replica holds all it
	// wrote, is killed; the replica takes over.
	victim := c.Nodes()[0]
	if err := replicaCaughtUp(ctx, victim.Addr); err != nil {
		t.Fatal(err)
	}
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	for {
		v, err := rc.Get(ctx, counter).Int64()
		if err == nil {
			if v != 120 {
				t.Fatalf("GET %s after the failover: %d, want 120", counter, v)
			}
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("GET %s after the failover: %v", counter, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for range 40 {
		if err := rc.IncrBy(ctx, counter, 3).Err(); err != nil {
			t.Fatalf("INCRBY after the failover: %v", err)
		}
	}
	if v, err := rc.Get(ctx, counter).Int64(); err != nil || v != 240 {
		t.Fatalf("GET %s after the failover: %d %v, want 240", counter, v, err)
	}
	rc.Close()
	if code, stderr := stop(); code != exitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}

	// What the cluster holds, read on the plain ports: the sub-counters
	// on more than one primary, summing to the count, and the plain keys
	// gone.
	primaries, err := c.Primaries(ctx) // the replica that took over among them
	if err != nil {
		t.Fatal(err)
	}
	holding, plain := 0, 0
	for _, p := range primaries {
		subs, err := testenv.Do(ctx, p, "KEYS", "{"+counter+"#*}")
		if err != nil {
			t.Fatal(err)
		}
		if subs != "" {
			holding++
		}
		left, err := testenv.Do(ctx, p, "KEYS", "plain:*")
		if err != nil {
			t.Fatal(err)
		}
		if left != "" {
			plain++
		}
	}
	if holding < 2 || plain != 0 {
		t.Fatalf("%d primaries hold sub-counters of %s (want 2 or more), %d still hold plain keys", holding, counter, plain)
	}
}

// replicaCaughtUp waits until the replica of the primary at addr (read on
// its plain port) has replicated everything the primary holds.
func replicaCaughtUp(ctx context.Context, addr string) error {
	for {
		info, err := testenv.Do(ctx, addr, "INFO", "replication")
		if err != nil {
			return err
		}
		var master, replica string
		for _, l := range strings.Split(info, "\n") {
			l = strings.TrimSpace(l)
			if v, ok := strings.CutPrefix(l, "master_repl_offset:"); ok {
				master = v
			}
			if strings.HasPrefix(l, "slave0:") && strings.Contains(l, "state=online") {
				for _, f := range strings.Split(l, ",") {
					if v, ok := strings.CutPrefix(f, "offset="); ok {
						replica = v
					}
				}
			}
		}
		if master != "" && master == replica {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the replica of %s did not catch up (primary at %s, replica at %q): %w", addr, master, replica, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}
