package hotcount_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
)

// BenchmarkMemoryPerCounter measures what a counter costs in Redis memory:
// HOTCOUNT_MEMORY_COUNTERS (default 1,000,000) unbuffered counters with a
// 48 h TTL, each written once and then under Zipf traffic so that a few
// hundred turn hot and shard, against the same keys kept as plain Redis
// counters (INCR, then EXPIRE) with the same TTL, on a fresh standalone
// redis-server, in one run. It reports the bytes per counter of each and
// their ratio (target: at most 1.3). It is slow (minutes): run it alone,
//
//	go test -run '^$' -bench MemoryPerCounter -benchtime 1x .
func BenchmarkMemoryPerCounter(b *testing.B) {
	counters := 1_000_000
	if v := os.Getenv("HOTCOUNT_MEMORY_COUNTERS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1000 {
			b.Fatalf("HOTCOUNT_MEMORY_COUNTERS=%q: want an integer of at least 1000", v)
		}
		counters = n
	}
	ctx := context.Background()
	node, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		b.Skipf("no redis-server: %v", err)
	}
	defer node.Stop()
	used := func() int64 {
		info, err := testenv.Do(ctx, node.Addr, "INFO", "memory")
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(info, "\n") {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "used_memory:"); ok {
				n, _ := strconv.ParseInt(v, 10, 64)
				return n
			}
		}
		b.Fatal("INFO memory has no used_memory")
		return 0
	}
	key := func(i int) string { return "likes:post:" + strconv.Itoa(i) }
	const ttl = 48 * time.Hour
	parallel := func(n int, f func(i int) error) {
		var wg sync.WaitGroup
		const workers = 64
		for w := range workers {
			wg.Go(func() {
				for i := w; i < n; i += workers {
					if err := f(i); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
	}
	// Zipf traffic over the counters: a few hundred get most of it.
	zipf := rand.NewZipf(rand.New(rand.NewPCG(1, 2)), 1.2, 1, uint64(counters-1))
	extra := make([]int, counters/2)
	for i := range extra {
		extra[i] = int(zipf.Uint64())
	}
	for b.Loop() {
		base := used()
		c, err := hotcount.New(ctx, hotcount.Config{
			Redis:    hotcount.RedisConfig{Addrs: []string{node.Addr}},
			Defaults: hotcount.Namespace{TTL: ttl, HotRate: 10},
			AutoN:    hotcount.AutoNConfig{Hysteresis: time.Hour},
			Timeout:  10 * time.Second,
		})
		if err != nil {
			b.Fatal(err)
		}
		start := time.Now()
		parallel(counters, func(i int) error { return c.Incr(ctx, key(i), 1) })
		// Zipf traffic in three rounds: the controller grows the hot
		// counters between them, and later rounds write their new labels.
		third := len(extra) / 3
		for r := range 3 {
			part := extra[r*third : (r+1)*third]
			parallel(len(part), func(i int) error { return c.Incr(ctx, key(part[i]), 1) })
			time.Sleep(2 * time.Second)
		}
		hot := 0
		for _, h := range c.HotKeys(ctx, 1000) {
			if h.N > 1 {
				hot++
			}
		}
		if err := c.Close(ctx); err != nil {
			b.Fatal(err)
		}
		hc := used() - base
		dbsize, _ := testenv.Do(ctx, node.Addr, "DBSIZE")
		b.Logf("hotcount: %d counters (%d sharded among the 1,000 hottest) in %v, %s keys, %d bytes", counters, hot, time.Since(start).Round(time.Second), dbsize, hc)

		if _, err := testenv.Do(ctx, node.Addr, "FLUSHALL"); err != nil {
			b.Fatal(err)
		}
		base = used()
		rc, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{node.Addr}, DisableCache: true})
		if err != nil {
			b.Fatal(err)
		}
		sec := int64(ttl.Seconds())
		parallel(counters, func(i int) error {
			k := key(i)
			for _, r := range rc.DoMulti(ctx, rc.B().Incr().Key(k).Build(), rc.B().Expire().Key(k).Seconds(sec).Build()) {
				if err := r.Error(); err != nil {
					return err
				}
			}
			return nil
		})
		parallel(len(extra), func(i int) error { return rc.Do(ctx, rc.B().Incr().Key(key(extra[i])).Build()).Error() })
		rc.Close()
		plain := used() - base
		if _, err := testenv.Do(ctx, node.Addr, "FLUSHALL"); err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(hc)/float64(counters), "B/counter")
		b.ReportMetric(float64(plain)/float64(counters), "B/plain-key")
		b.ReportMetric(float64(hc)/float64(plain), "ratio")
		fmt.Fprintf(os.Stderr, "memory per counter: hotcount %.1f B, plain keys %.1f B, ratio %.3f (%d counters, %d sharded)\n",
			float64(hc)/float64(counters), float64(plain)/float64(counters), float64(hc)/float64(plain), counters, hot)
	}
}
