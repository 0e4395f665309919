package hotcount_test

import (
	"context"
	"math/rand/v2"
	"net"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/store/redis"
)

// incrBenchN is the sub-counter count of BenchmarkIncrVsHandRolled.
const incrBenchN = 8

// incrBenchParallelism is goroutines per GOMAXPROCS: enough concurrent
// callers for rueidis to pipeline them, as a hot key sees (16 on 2 cores).
const incrBenchParallelism = 8

// BenchmarkIncrVsHandRolled compares an unbuffered Client.Incr on the test
// cluster with what a user would write by hand: INCRBY on a random one of
// the same N sub-keys, through a plain rueidis cluster client with the
// store's options. Both run in the same process, on the same cluster, with
// the same parallelism, and pass the caller's context (Background) as it
// is; run them in one invocation and compare ns/op and allocs/op:
//
//	go test -run '^$' -bench IncrVsHandRolled -count 5 .
func BenchmarkIncrVsHandRolled(b *testing.B) {
	ctx := context.Background()
	const key = "bench:vs:handrolled"
	st, err := redis.New(ctx, redis.Config{Addrs: cluster.Seeds()})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	c, err := hotcount.New(ctx, hotcount.Config{Store: st, Defaults: hotcount.Namespace{N: incrBenchN, NoColdStart: true}})
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close(ctx)
	// The hand-rolled client writes the very sub-keys the Client writes.
	subs, err := c.SubKeys(ctx, key)
	if err != nil {
		b.Fatal(err)
	}
	if len(subs) != incrBenchN {
		b.Fatalf("%d sub-keys, want %d", len(subs), incrBenchN)
	}
	// The same rueidis options as the store's client (store/redis New),
	// without the store's dialer, which only records connections for its
	// watchdog: default pipelining, no flush delay.
	rc, err := rueidis.NewClient(rueidis.ClientOption{
		InitAddress:      cluster.Seeds(),
		Dialer:           net.Dialer{Timeout: redis.DefaultDialTimeout, KeepAlive: rueidis.DefaultTCPKeepAlive},
		ConnWriteTimeout: redis.DefaultTimeout + redis.DefaultDialTimeout,
		DisableCache:     true,
		ClientSetInfo:    rueidis.DisableClientSetInfo,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer rc.Close()

	hotcountIncr := func() error { return c.Incr(ctx, key, 1) }
	handrolledIncr := func() error {
		k := subs[rand.IntN(len(subs))]
		return rc.Do(ctx, rc.B().Incrby().Key(k).Increment(1).Build()).Error()
	}
	parallel := func(b *testing.B, incr func() error) {
		b.ReportAllocs()
		b.SetParallelism(incrBenchParallelism)
		b.RunParallel(func(pb *testing.PB) {
			for pb.Next() {
				if err := incr(); err != nil {
					b.Error(err)
					return
				}
			}
		})
	}
	b.Run("hotcount", func(b *testing.B) { parallel(b, hotcountIncr) })
	b.Run("handrolled", func(b *testing.B) { parallel(b, handrolledIncr) })
	// ratio alternates the two in short slices, so that a busy machine
	// slows both alike, and reports hotcount's time per increment over
	// the hand-rolled one's.
	b.Run("ratio", func(b *testing.B) {
		hc, hr := alternate(b, hotcountIncr, handrolledIncr)
		b.ReportMetric(float64(hc)/float64(b.N), "hotcount-ns/op")
		b.ReportMetric(float64(hr)/float64(b.N), "handrolled-ns/op")
		b.ReportMetric(float64(hc)/float64(hr), "ratio")
	})
}

// alternate runs b.N calls of x and b.N calls of y, in alternating slices
// of sliceOps calls, each slice from GOMAXPROCS×incrBenchParallelism
// goroutines, and returns the time spent in each.
func alternate(b *testing.B, x, y func() error) (tx, ty time.Duration) {
	const sliceOps = 4096
	workers := runtime.GOMAXPROCS(0) * incrBenchParallelism
	run := func(f func() error, ops int) time.Duration {
		var next atomic.Int64
		var wg sync.WaitGroup
		start := time.Now()
		for range workers {
			wg.Go(func() {
				for next.Add(1) <= int64(ops) {
					if err := f(); err != nil {
						b.Error(err)
						return
					}
				}
			})
		}
		wg.Wait()
		return time.Since(start)
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += sliceOps {
		ops := min(sliceOps, b.N-done)
		tx += run(x, ops)
		ty += run(y, ops)
	}
	return tx, ty
}

// BenchmarkBufferedIncrVsAtomic compares a buffered Client.Incr on one hot
// key with a bare atomic add on one int64, in alternating slices of the
// same run, one goroutine per GOMAXPROCS (run with -cpu 1,2), and reports
// both times and their ratio. "distinct-key" passes a string equal to the
// key but not the one its cell was made from, as a key built per request
// is, without the cost of building it; "per-call-key" concatenates
// "likes:" + id in the loop, and so includes that cost.
func BenchmarkBufferedIncrVsAtomic(b *testing.B) {
	ctx := context.Background()
	id := strings.Clone("post:42")
	for _, tc := range []struct {
		name string
		incr func(c *hotcount.Client, ops int) error
	}{
		{"distinct-key", func(c *hotcount.Client, ops int) error {
			key := "likes:" + id
			for range ops {
				if err := c.Incr(ctx, key, 1); err != nil {
					return err
				}
			}
			return nil
		}},
		{"per-call-key", func(c *hotcount.Client, ops int) error {
			for range ops {
				if err := c.Incr(ctx, "likes:"+id, 1); err != nil {
					return err
				}
			}
			return nil
		}},
	} {
		b.Run(tc.name, func(b *testing.B) {
			c, err := hotcount.New(ctx, hotcount.Config{Defaults: hotcount.Namespace{Buffered: true}})
			if err != nil {
				b.Fatal(err)
			}
			defer c.Close(ctx)
			// A hot key as it is after its first flush (with more than
			// one core, a cut of 2^14 or more gives its cell lanes).
			if err := c.Incr(ctx, "likes:post:42", 1<<14); err != nil {
				b.Fatal(err)
			}
			if err := c.Flush(ctx); err != nil {
				b.Fatal(err)
			}
			var n atomic.Int64
			b.ReportAllocs()
			ti, ta := alternateSlices(b, func(ops int) {
				if err := tc.incr(c, ops); err != nil {
					b.Error(err)
				}
			}, func(ops int) {
				for range ops {
					n.Add(1)
				}
			})
			b.ReportMetric(float64(ti)/float64(b.N), "incr-ns/op")
			b.ReportMetric(float64(ta)/float64(b.N), "atomic-ns/op")
			b.ReportMetric(float64(ti)/float64(ta), "ratio")
		})
	}
}

// alternateSlices runs b.N calls' worth of x and of y in alternating
// slices, each slice shared by GOMAXPROCS goroutines, and returns the time
// spent in each.
func alternateSlices(b *testing.B, x, y func(ops int)) (tx, ty time.Duration) {
	// Calls per slice, over all goroutines: slices of some milliseconds,
	// so that the moment a slice's second goroutine waits for an idle P
	// to wake (when one goroutine runs alone, which favours the contended
	// atomic add) is a small part of it. With 2^16 the atomic slices
	// lasted about 0.3 ms.
	const slice = 1 << 20
	procs := runtime.GOMAXPROCS(0)
	run := func(f func(int), ops int) time.Duration {
		var wg sync.WaitGroup
		start := time.Now()
		for g := range procs {
			n := ops / procs
			if g < ops%procs {
				n++
			}
			wg.Go(func() { f(n) })
		}
		wg.Wait()
		return time.Since(start)
	}
	b.ResetTimer()
	for done := 0; done < b.N; done += slice {
		ops := min(slice, b.N-done)
		tx += run(x, ops)
		ty += run(y, ops)
	}
	return tx, ty
}
