package proxy_test

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/proxy"
)

// proxyLoad drives INCR on one counter key and on one plain key through
// the proxy, counting what was acknowledged.
type proxyLoad struct {
	counterAcked, plainAcked, attempted, errs atomic.Int64
	stop                                      chan struct{}
	wg                                        sync.WaitGroup
}

func startProxyLoad(rdb *redis.Client, counterKey, plainKey string, workers int) *proxyLoad {
	l := &proxyLoad{stop: make(chan struct{})}
	for w := 0; w < workers; w++ {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			ctx := context.Background()
			for i := 0; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				if i%4 == 3 {
					if rdb.Incr(ctx, plainKey).Err() == nil {
						l.plainAcked.Add(1)
					} else {
						l.errs.Add(1)
						time.Sleep(10 * time.Millisecond)
					}
					continue
				}
				l.attempted.Add(1)
				if rdb.Incr(ctx, counterKey).Err() == nil {
					l.counterAcked.Add(1)
				} else {
					l.errs.Add(1)
					time.Sleep(10 * time.Millisecond)
				}
			}
		}()
	}
	return l
}

func (l *proxyLoad) halt() { close(l.stop); l.wg.Wait() }

// TestPrimaryKilledUnderLoad kills a primary of a dedicated 3+3 cluster
// while clients increment a buffered counter key and a plain key through
// the proxy: once the primary that owns the plain key (the pass-through is
// hit), once the primary that holds the counter's sub-counter (the
// buffered flushes are hit). The proxy recovers by itself (its rueidis
// clients and the Client's find the promoted replica): commands succeed
// again without a restart, the buffered deltas held meanwhile are flushed,
// and the counter's total is within the namespace's window: Redis
// replicates asynchronously, so what the dead primary acknowledged in its
// last moments may be lost — at most what was acknowledged to the clients
// in the last second and one flush interval before the kill — and nothing
// is counted twice.
func TestPrimaryKilledUnderLoad(t *testing.T) {
	for _, victim := range []string{"plain", "counter"} {
		t.Run("owner of the "+victim+" key", func(t *testing.T) { primaryKilledUnderLoad(t, victim == "counter") })
	}
}

func primaryKilledUnderLoad(t *testing.T, counterOwner bool) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	const interval = 50 * time.Millisecond
	p := uniq(t)
	ns := []hotcount.Namespace{{Prefix: p + "likes:", Buffered: true, ReadCacheTTL: readCacheTTL, FlushInterval: interval}}
	hc, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: cl.Seeds()}, Namespaces: ns, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer hc.Close(context.Background())
	srv, err := proxy.New(ctx, proxy.Config{Counters: hc, Redis: hotcount.RedisConfig{Addrs: cl.Seeds()}, Timeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveOn(t, srv)
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 8, MaxRetries: -1})
	defer rdb.Close()

	counterKey, plainKey := p+"likes:post:42", "{"+p+"}plain"
	victim := ownerOfIn(t, cl, plainKey)
	l := startProxyLoad(rdb, counterKey, plainKey, 8)
	var (
		mu      sync.Mutex
		samples []struct {
			at    time.Time
			acked int64
		}
	)
	sampDone := make(chan struct{})
	go func() {
		defer close(sampDone)
		for {
			select {
			case <-l.stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			mu.Lock()
			samples = append(samples, struct {
				at    time.Time
				acked int64
			}{time.Now(), l.counterAcked.Load()})
			mu.Unlock()
		}
	}()
	// Two seconds of load first: the counter's metadata, pinned by its
	// first increment, is then long replicated when the primary dies.
	time.Sleep(2 * time.Second)
	if counterOwner {
		sub, err := hc.SubKeys(ctx, counterKey)
		if err != nil || len(sub) == 0 {
			t.Fatalf("sub-counters of %s: %v %v", counterKey, sub, err)
		}
		victim = ownerOfIn(t, cl, sub[0])
	}
	killAt := time.Now()
	if err := cl.Node(victim).Kill(); err != nil {
		t.Fatal(err)
	}
	ackedAtKill := l.counterAcked.Load()
	plainBefore := l.plainAcked.Load()

	// Recovery: plain INCRs on the dead primary's slot succeed again, and
	// the buffered deltas are all acknowledged.
	const hang = 60 * time.Second // a hang check, not a target
	deadline := time.Now().Add(hang)
	for l.plainAcked.Load() < plainBefore+50 {
		if time.Now().After(deadline) {
			t.Fatalf("pass-through not working %v after the kill (errors %d)", hang, l.errs.Load())
		}
		time.Sleep(20 * time.Millisecond)
	}
	recovered := time.Since(killAt)
	time.Sleep(300 * time.Millisecond) // more load on the new topology
	l.halt()
	<-sampDone
	for {
		if err := hc.Flush(ctx); err == nil && hc.Stats().Buffer.Unflushed == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("buffered deltas not flushed %v after the kill", hang)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The total as the cluster holds it, read afresh.
	rd, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: cl.Seeds()}, Reads: hotcount.ReadConfig{NoCache: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close(ctx)
	got, err := rd.Get(ctx, counterKey)
	if err != nil {
		t.Fatal(err)
	}
	var window int64
	mu.Lock()
	for _, s := range samples {
		if !s.at.Before(killAt.Add(-time.Second - interval)) {
			window = ackedAtKill - s.acked
			break
		}
	}
	mu.Unlock()
	acked, attempted := l.counterAcked.Load(), l.attempted.Load()
	loss := acked - got.Value
	t.Logf("killed %s (counter's owner: %v); pass-through working again after %v; counter: acked %d, attempted %d, cluster %d, loss %d (bound %d); errors seen by clients %d",
		victim, counterOwner, recovered.Round(time.Millisecond), acked, attempted, got.Value, loss, window, l.errs.Load())
	if got.Value > attempted {
		t.Fatalf("the cluster holds %d, more than the %d increments sent: double count", got.Value, attempted)
	}
	if loss > window {
		after, _ := cl.Primaries(ctx)
		for _, a := range after {
			keys, err := testenv.Do(ctx, a, "KEYS", "{"+counterKey+"#*")
			t.Logf("DEBUG %s: %q %v", a, keys, err)
			for _, k := range strings.Fields(keys) {
				v, err := testenv.Do(ctx, a, "GET", k)
				t.Logf("DEBUG   %s = %q %v", k, v, err)
			}
		}
		sub, _ := hc.SubKeys(ctx, counterKey)
		t.Logf("DEBUG proxy client subkeys %v; stats %+v", sub, hc.Stats().Buffer)
		t.Fatalf("lost %d, more than the %d acknowledged in the last %v before the kill", loss, window, time.Second+interval)
	}
	// Reads through the proxy work again too.
	if v, err := rdb.Get(ctx, counterKey).Int64(); err != nil || v < got.Value-1 {
		t.Fatalf("GET through the proxy after recovery: %d, %v", v, err)
	}
	if err := rdb.Get(ctx, plainKey).Err(); err != nil && !errors.Is(err, redis.Nil) {
		t.Fatalf("GET of the plain key: %v", err)
	}
	ctxS, cancelS := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancelS()
	if err := srv.Shutdown(ctxS); err != nil {
		t.Fatal(err)
	}
}

// serveOn serves srv on a free loopback port until the test ends.
func serveOn(t *testing.T, srv *proxy.Server) string {
	t.Helper()
	ln, err := netListen()
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { srv.Serve(ln); close(done) }()
	t.Cleanup(func() { srv.Close(); <-done })
	return ln.Addr().String()
}

// ownerOfIn returns the primary of cl that owns key's slot.
func ownerOfIn(t *testing.T, cl *testenv.Cluster, key string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := cl.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range ps {
		if _, err := testenv.Do(ctx, p, "EXISTS", key); err == nil {
			return p
		}
	}
	t.Fatalf("no primary owns %q", key)
	return ""
}
