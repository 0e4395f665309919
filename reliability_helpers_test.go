package hotcount_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/faultproxy"
	"github.com/hotcount/hotcount/internal/testenv"
)

// childModeEnv names the environment variable that makes the test binary
// a child process of TestReliabilityKill (see reliability_child_test.go).
// TestMain then runs the tests without starting the shared cluster.
const childModeEnv = "HOTCOUNT_RELIABILITY_CHILD"

// proxied is one standalone redis-server behind a fault proxy.
type proxied struct {
	node  *testenv.Node
	proxy *faultproxy.Proxy
}

// startProxied starts a standalone Redis and a fault proxy in front of it;
// both end with the test.
func startProxied(t *testing.T) *proxied {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	p, err := faultproxy.New(faultproxy.Config{Target: n.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	return &proxied{node: n, proxy: p}
}

// client opens a Client that reaches the node through the proxy. The test
// closes it itself (Close is idempotent; a cleanup closes it too).
func (px *proxied) client(t *testing.T, cfg hotcount.Config) *hotcount.Client {
	t.Helper()
	cfg.Redis.Addrs = []string{px.proxy.Addr()}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := hotcount.New(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = c.Close(ctx)
	})
	return c
}

// totals reads the counters keys with a fresh Client of their own (no read
// cache, no buffer), directly from addrs: what the cache holds.
func totals(t *testing.T, addrs []string, n int, keys []string) map[string]int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: addrs}, Defaults: hotcount.Namespace{NoColdStart: true, N: n}, Reads: hotcount.ReadConfig{NoCache: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	out := make(map[string]int64, len(keys))
	for _, k := range keys {
		r, err := c.Get(ctx, k)
		if err != nil {
			t.Fatalf("read %s: %v", k, err)
		}
		out[k] = r.Value
	}
	return out
}

// noLeak snapshots the goroutines now and, at the end of the test, fails
// it if any goroutine started since is still running. Call it first.
//
// One rueidis goroutine is allowed: after a topology refresh drops
// connections (e.g. to replicas given as seeds), rueidis closes them from a
// goroutine that sleeps 5 s first, even when the client was closed. It
// ends by itself and holds nothing of hotcount.
func noLeak(t *testing.T) {
	t.Helper()
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		goleak.VerifyNone(t, before, goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"))
	})
}

// load runs workers goroutines that increment keys (round robin, +1 each)
// until stop is closed, pacing themselves with a short sleep every pace
// increments. Every acknowledged increment is counted per key; errors are
// counted by kind.
type load struct {
	c    *hotcount.Client
	keys []string

	acked   []atomic.Int64 // by key index
	unknown []atomic.Int64 // ErrUnavailable: the increment may or may not have landed
	backp   atomic.Int64   // ErrBackpressure
	other   atomic.Int64   // any other error
	lastErr atomic.Value   // error

	stop chan struct{}
	wg   sync.WaitGroup
}

func startLoad(c *hotcount.Client, keys []string, workers, pace int, pause time.Duration) *load {
	l := &load{
		c: c, keys: keys,
		acked:   make([]atomic.Int64, len(keys)),
		unknown: make([]atomic.Int64, len(keys)),
		stop:    make(chan struct{}),
	}
	for w := range workers {
		l.wg.Add(1)
		go func() {
			defer l.wg.Done()
			ctx := context.Background()
			for i := w; ; i++ {
				select {
				case <-l.stop:
					return
				default:
				}
				k := i % len(keys)
				err := c.Incr(ctx, keys[k], 1)
				switch {
				case err == nil:
					l.acked[k].Add(1)
				case errors.Is(err, hotcount.ErrUnavailable):
					l.unknown[k].Add(1)
				case errors.Is(err, hotcount.ErrBackpressure):
					l.backp.Add(1)
				default:
					l.other.Add(1)
					l.lastErr.Store(err)
				}
				if i%pace == 0 {
					time.Sleep(pause)
				}
			}
		}()
	}
	return l
}

// halt stops the workers and waits for them.
func (l *load) halt() {
	close(l.stop)
	l.wg.Wait()
}

func (l *load) totalAcked() (n int64) {
	for i := range l.acked {
		n += l.acked[i].Load()
	}
	return n
}

func (l *load) totalUnknown() (n int64) {
	for i := range l.unknown {
		n += l.unknown[i].Load()
	}
	return n
}

// checkOther fails the test if a worker saw an unexpected error.
func (l *load) checkOther(t *testing.T) {
	t.Helper()
	if n := l.other.Load(); n > 0 {
		t.Fatalf("%d increments failed with unexpected errors; last: %v", n, l.lastErr.Load())
	}
}

// checkExact fails the test unless the cache holds exactly the
// acknowledged increments of every key.
func (l *load) checkExact(t *testing.T, addrs []string, n int) int64 {
	t.Helper()
	got := totals(t, addrs, n, l.keys)
	var sum int64
	for i, k := range l.keys {
		want := l.acked[i].Load()
		sum += got[k]
		if got[k] != want {
			t.Errorf("%s: cache holds %d, %d increments were acknowledged (%+d)", k, got[k], want, got[k]-want)
		}
	}
	return sum
}

func keysFor(t *testing.T, n int) []string {
	base := uniqueKey(t)
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s:%d", base, i)
	}
	return out
}

// closeWithin closes c with a deadline and fails the test on error.
func closeWithin(t *testing.T, c *hotcount.Client, d time.Duration) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	start := time.Now()
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close after %v: %v (stats %+v)", time.Since(start).Round(time.Millisecond), err, c.Stats().Buffer)
	}
}
