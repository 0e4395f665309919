package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/proxy"
)

// readCacheTTL is the read-cache TTL of the test namespaces: estimates are
// re-based on a summed read this often.
const readCacheTTL = 50 * time.Millisecond

// waitValue polls GET key through get until it reads want; an estimate
// taken while increments were still arriving may run ahead of the total
// for up to one read-cache TTL. It fails if a reading is ever below want
// (this proxy made every increment) or want is not read within the tries.
func waitValue(t *testing.T, key string, want int64, get func() (int64, error)) {
	t.Helper()
	var last int64
	for try := 0; try < 100; try++ {
		v, err := get()
		if err != nil {
			t.Fatalf("GET %s: %v", key, err)
		}
		if v < want {
			t.Fatalf("GET %s = %d, below the %d increments this proxy made", key, v, want)
		}
		if v == want {
			return
		}
		last = v
		time.Sleep(readCacheTTL / 2)
	}
	t.Fatalf("GET %s = %d after the load, want %d", key, last, want)
}

// TestGoRedis drives the proxy with go-redis v9, a client other than the
// proxy's own, in RESP2 and RESP3: concurrent INCR and INCRBY on a
// buffered counter key, replies checked for the estimate's promise, then
// the exact total read back; plain keys, MGET across slots and a pipeline
// alongside.
func TestGoRedis(t *testing.T) {
	p := uniq(t)
	ns := []hotcount.Namespace{
		{Prefix: p + "likes:", Buffered: true, ReadCacheTTL: readCacheTTL},
		{Prefix: p + "views:", ReadCacheTTL: readCacheTTL},
	}
	e := startProxy(t, ns, proxy.Config{})
	for _, proto := range []int{2, 3} {
		t.Run(fmt.Sprintf("RESP%d", proto), func(t *testing.T) {
			ctx := context.Background()
			rdb := redis.NewClient(&redis.Options{Addr: e.addr, Protocol: proto, PoolSize: 16})
			defer rdb.Close()
			if got := rdb.Do(ctx, "HELLO").Val(); got == nil {
				t.Fatalf("HELLO: %v", rdb.Do(ctx, "HELLO").Err())
			}
			for _, key := range []string{fmt.Sprintf("%slikes:post:%d", p, proto), fmt.Sprintf("%sviews:post:%d", p, proto)} {
				const workers, each = 8, 250
				var wg sync.WaitGroup
				errs := make(chan error, workers)
				for w := 0; w < workers; w++ {
					wg.Add(1)
					go func() {
						defer wg.Done()
						var own, prev int64
						for i := 0; i < each; i++ {
							var v int64
							var err error
							if i%2 == 0 {
								v, err = rdb.Incr(ctx, key).Result()
								own++
							} else {
								v, err = rdb.IncrBy(ctx, key, 2).Result()
								own += 2
							}
							if err != nil {
								errs <- err
								return
							}
							// Everything this worker added came through this
							// proxy: the estimate is never below it.
							if v < own {
								errs <- fmt.Errorf("INCR answered %d, below the %d this worker added", v, own)
								return
							}
							prev = v
						}
						_ = prev
					}()
				}
				wg.Wait()
				close(errs)
				for err := range errs {
					t.Fatal(err)
				}
				want := int64(workers * each / 2 * 3)
				waitValue(t, key, want, func() (int64, error) { return rdb.Get(ctx, key).Int64() })
			}
			// Plain keys pass through; MGET spans slots and mixes a counter.
			plain := fmt.Sprintf("%splain:%d", p, proto)
			if err := rdb.Set(ctx, plain, "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			vals, err := rdb.MGet(ctx, plain, p+"missing:a", fmt.Sprintf("%slikes:post:%d", p, proto), p+"likes:never").Result()
			if err != nil {
				t.Fatal(err)
			}
			if vals[0] != "x" || vals[1] != nil || vals[2] != strconv.Itoa(3000) || vals[3] != nil {
				t.Fatalf("MGET = %#v", vals)
			}
			pipe := rdb.Pipeline()
			inc := pipe.Incr(ctx, p+"likes:pipe")
			get := pipe.Get(ctx, plain)
			miss := pipe.Get(ctx, p+"none")
			if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
				t.Fatal(err)
			}
			if inc.Val() < 1 || get.Val() != "x" || !errors.Is(miss.Err(), redis.Nil) {
				t.Fatalf("pipeline: %v %v %v", inc, get, miss)
			}
			if err := rdb.Del(ctx, plain, p+"likes:pipe").Err(); err != nil {
				t.Fatal(err)
			}
			if n := rdb.Exists(ctx, plain, p+"likes:pipe").Val(); n != 0 {
				t.Fatalf("EXISTS after DEL = %d", n)
			}
		})
	}
}
