package bench

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
)

// TestLongTail runs the long-tail benchmark at a small scale on the test
// cluster: every case measures its increments, keys and commands, the
// direct cases write one INCR per increment, the hotcount cases no script
// for the cold tail and no idempotency key per counter, and every key of
// the run is removed afterwards.
func TestLongTail(t *testing.T) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		t.Fatalf("redis-benchmark not found (scripts/test installs redis-tools): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := RunLongTail(ctx, LongTailConfig{Redis: cluster.Seeds(), Keys: 50_000, TailClients: 4, ViralClients: 4, Requests: 2000, LibDuration: 300 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Cases) != 8 || len(rep.Ratios) != 4 {
		t.Fatalf("%d cases, %d ratios", len(rep.Cases), len(rep.Ratios))
	}
	if rep.IdleCPUPerSecond <= 0 {
		t.Fatalf("idle cluster: %v CPU seconds per second", rep.IdleCPUPerSecond)
	}
	for _, c := range rep.Cases {
		if c.Increments <= 0 || c.Counters <= 0 || c.KeysAdded <= 0 || c.CPUSeconds <= 0 {
			t.Fatalf("case %+v", c)
		}
		// The idle cluster's share of the window comes off.
		if c.WindowSeconds < c.Seconds || c.CPUPerIncrLessIdleUS >= c.CPUPerIncrUS {
			t.Fatalf("%s %s: window %.3f s for a load of %.3f s; %.3f µs per increment, %.3f less idle", c.Workload, c.Path, c.WindowSeconds, c.Seconds, c.CPUPerIncrUS, c.CPUPerIncrLessIdleUS)
		}
		switch c.Path {
		case "direct", "library direct":
			if c.Commands["incr"] != c.Increments || c.IdempotencyKeys != 0 {
				t.Fatalf("direct case %+v", c)
			}
		default:
			if c.IdempotencyKeys*20 > c.CounterKeys {
				t.Fatalf("%s %s: %d idempotency keys for %d counter keys", c.Workload, c.Path, c.IdempotencyKeys, c.CounterKeys)
			}
		}
	}
	var out bytes.Buffer
	if err := rep.WriteText(&out); err != nil || !strings.Contains(out.String(), "tail, proxy against direct") {
		t.Fatalf("report: %v\n%s", err, out.String())
	}
	// Nothing of the run is left.
	be, err := openBackend(ctx, hotcount.RedisConfig{Addrs: cluster.Seeds()})
	if err != nil {
		t.Fatal(err)
	}
	defer be.close()
	rc := be.(*redisBackend).rc
	for _, n := range rep.Primaries {
		for _, match := range []string{"lt*:tail:*", "lt*:mixed:*", "{lt*:tail:*", "{lt*:mixed:*"} {
			e, err := rc.Nodes()[n].Do(ctx, rc.B().Scan().Cursor(0).Match(match).Count(1_000_000).Build()).AsScanEntry()
			if err != nil {
				t.Fatal(err)
			}
			if len(e.Elements) > 0 {
				t.Fatalf("%s keeps %d keys of the run, e.g. %s", n, len(e.Elements), e.Elements[0])
			}
		}
	}
	if _, err := RunLongTail(ctx, LongTailConfig{}); !errors.Is(err, ErrConfig) {
		t.Fatalf("no --redis: %v", err)
	}
	if _, err := RunLongTail(ctx, LongTailConfig{Redis: cluster.Seeds(), Workloads: []string{"writes"}}); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown workload: %v", err)
	}
}

// TestLongTailReads: the reads workload writes the tail, then reads it
// with GETs; a GET straight to the cluster is one command, and a cold
// counter's GET through the proxy costs the cache its cold read: the
// counter's one key and its label record (and, for a counter never
// written, whether it exists), in one round, and no write.
func TestLongTailReads(t *testing.T) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		t.Fatalf("redis-benchmark not found (scripts/test installs redis-tools): %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := RunLongTail(ctx, LongTailConfig{Redis: cluster.Seeds(), Keys: 2000, TailClients: 4, Requests: 4000, Workloads: []string{"reads"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Cases) != 2 || len(rep.Ratios) != 1 {
		t.Fatalf("%d cases, %d ratios: %+v", len(rep.Cases), len(rep.Ratios), rep.Cases)
	}
	direct, proxied := rep.Cases[0], rep.Cases[1]
	if direct.Path != "direct" || direct.Commands["get"] != direct.Increments || direct.Commands["incr"] != 0 {
		t.Fatalf("direct reads %+v", direct)
	}
	// A counter read again within the proxy's estimate TTL costs nothing.
	if proxied.Path != "proxy" || proxied.Commands["get"] == 0 || proxied.WritesPerIncr > 3 || proxied.Commands["incrby"]+proxied.Commands["evalsha"] != 0 {
		t.Fatalf("proxy reads: %.2f commands per GET: %+v", proxied.WritesPerIncr, proxied)
	}
}

// TestLongTailStore: with the embedded store the hotcount
// side of the proxy and library cases takes fast-mode checkpoints, and
// the last round, run as the Client closes, is in the case's figures: the
// store holds a checkpoint for every counter written, and the proxy
// case's cache saw a GET of each (the proxy itself sends the cold tail
// none); with none (the default) there is no checkpoint and the proxy
// case no GET.
// Every case says which store it ran with.
func TestLongTailStore(t *testing.T) {
	if _, err := exec.LookPath("redis-benchmark"); err != nil {
		t.Fatalf("redis-benchmark not found (scripts/test installs redis-tools): %v", err)
	}
	for _, store := range []string{StoreEmbedded, ""} {
		t.Run(cmp.Or(store, "default"), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			rep, err := RunLongTail(ctx, LongTailConfig{Redis: cluster.Seeds(), Keys: 500, TailClients: 4, Requests: 1000, LibDuration: 200 * time.Millisecond, Workloads: []string{"tail"}, Store: store})
			if err != nil {
				t.Fatal(err)
			}
			want := cmp.Or(store, StoreNone)
			if rep.Store != want || len(rep.Cases) != 4 {
				t.Fatalf("store %q, %d cases", rep.Store, len(rep.Cases))
			}
			for _, c := range rep.Cases {
				if c.Path == "direct" || c.Path == "library direct" {
					if c.Store != "" || c.CheckpointRows != 0 {
						t.Fatalf("direct case with a store: %+v", c)
					}
					continue
				}
				if c.Store != want || c.Counters == 0 {
					t.Fatalf("%s case: %+v", want, c)
				}
				gets := c.Commands["get"]
				if c.Path == "library" {
					gets = -1 // the library case reads its counters itself
				}
				switch {
				case want == StoreEmbedded && (c.CheckpointRows < c.Counters || gets >= 0 && gets < c.Counters):
					t.Fatalf("%s: %d checkpoint rows and %d GETs for %d counters", c.Path, c.CheckpointRows, gets, c.Counters)
				case want == StoreNone && (c.CheckpointRows != 0 || gets > 0):
					t.Fatalf("%s without a store: %d checkpoint rows, %d GETs", c.Path, c.CheckpointRows, gets)
				}
			}
			var out bytes.Buffer
			if err := rep.WriteText(&out); err != nil || !strings.Contains(out.String(), "durable store of the hotcount cases: "+want) {
				t.Fatalf("report: %v\n%s", err, out.String())
			}
		})
	}
	if _, err := RunLongTail(context.Background(), LongTailConfig{Redis: cluster.Seeds(), Store: "sqlite"}); !errors.Is(err, ErrConfig) {
		t.Fatalf("unknown store: %v", err)
	}
}
