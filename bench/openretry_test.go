package bench

import (
	"context"
	"errors"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/faultproxy"
	"github.com/hotcount/hotcount/store"
)

// hangingSeed is a backend whose only seed is a fault proxy in front of
// one node of the test cluster; the proxy holds every connection silent
// (as a capped node that is not given the CPU to answer) until resumed.
func hangingSeed(t *testing.T, ctx context.Context) (backend, *faultproxy.Proxy) {
	t.Helper()
	p, err := faultproxy.New(faultproxy.Config{Target: cluster.Seeds()[0]})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Close() })
	b, err := openBackend(ctx, hotcount.RedisConfig{Addrs: []string{p.Addr()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.close)
	p.Pause(faultproxy.PauseHang)
	return b, p
}

// resumeOnFailure opens through its backend and, when an open fails,
// resumes the proxy and keeps the error: the seed answers again once the
// first connection has timed out.
type resumeOnFailure struct {
	backend
	proxy *faultproxy.Proxy
	mu    sync.Mutex
	errs  []error
}

func (r *resumeOnFailure) open(ctx context.Context, cfg hotcount.Config) (*hotcount.Client, error) {
	c, err := r.backend.open(ctx, cfg)
	if err != nil {
		r.mu.Lock()
		r.errs = append(r.errs, err)
		r.mu.Unlock()
		r.proxy.Resume()
	}
	return c, err
}

// TestOpenInstancesRetriesTimedOutConnect: instances whose seed leaves
// their handshake unanswered past the dial timeout (a bench run once
// failed so: "opening 8 instances: backend unavailable: connect
// [127.0.0.1:7600]: context deadline exceeded", its seed a node capped at
// 0.3% of a CPU) are opened again once the seed answers, and the run's
// instances all open. Before openInstances retried, it returned the first
// attempts' errors.
func TestOpenInstancesRetriesTimedOutConnect(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	b, p := hangingSeed(t, ctx)
	rb := &resumeOnFailure{backend: b, proxy: p}
	ins, err := openInstances(ctx, rb, hotcount.Config{Defaults: hotcount.Namespace{N: 1, NoColdStart: true}}, 3, openRetry{within: time.Minute, pause: 10 * time.Millisecond})
	if err != nil {
		t.Fatalf("opening 3 instances: %v (failed attempts: %v)", err, rb.errs)
	}
	defer closeInstances(ins)
	if len(rb.errs) == 0 {
		t.Fatal("no attempt failed: the proxy did not hold the seed silent")
	}
	for _, e := range rb.errs {
		if !openTimedOut(e) {
			t.Errorf("a timed-out open is not taken for one: %v", e)
		}
	}
	for i, in := range ins {
		if in == nil {
			t.Fatalf("instance %d not opened", i)
		}
		if err := in.c.Incr(ctx, "bench:openretry", 1); err != nil {
			t.Errorf("instance %d: %v", i, err)
		}
	}
	if err := ins[0].c.Clear(ctx, "bench:openretry"); err != nil {
		t.Error(err)
	}
}

// TestOpenInstancesGivesUp: a seed that never answers fails the open
// once the retry time has passed, with an error that says how many
// attempts were made and wraps the last one's (backend unavailable, a
// timeout).
func TestOpenInstancesGivesUp(t *testing.T) {
	ctx := testCtx(t, 2*time.Minute)
	b, _ := hangingSeed(t, ctx)
	_, err := openInstances(ctx, b, hotcount.Config{}, 2, openRetry{within: time.Second, pause: 10 * time.Millisecond})
	if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), "connection still timing out after 1 attempt(s)") {
		t.Fatalf("got %v, want the timeout of one attempt of each instance", err)
	}
}

// countingBackend counts the opens and fails each with err.
type countingBackend struct {
	backend
	n   atomic.Int64
	err error
}

func (c *countingBackend) open(context.Context, hotcount.Config) (*hotcount.Client, error) {
	c.n.Add(1)
	return nil, c.err
}

// TestOpenInstancesNoRetry: an open that failed other than by a timeout,
// or whose context ended, is not made again.
func TestOpenInstancesNoRetry(t *testing.T) {
	timedOut := errors.Join(store.ErrUnavailable, context.DeadlineExceeded)
	done, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name string
		ctx  context.Context
		err  error
	}{
		{"refused", context.Background(), errors.Join(store.ErrUnavailable, errors.New("connection refused"))},
		{"bad config", context.Background(), hotcount.ErrConfig},
		{"context ended", done, timedOut},
	} {
		cb := &countingBackend{err: tc.err}
		_, err := openInstances(tc.ctx, cb, hotcount.Config{}, 1, openRetry{within: time.Minute, pause: time.Millisecond})
		if !errors.Is(err, tc.err) || cb.n.Load() != 1 {
			t.Errorf("%s: %d attempts, %v", tc.name, cb.n.Load(), err)
		}
	}
}
