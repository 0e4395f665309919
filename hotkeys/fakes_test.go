package hotkeys

import (
	"context"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeClock is a Clock that moves only when Advance is called.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*fakeTicker
}

type fakeTicker struct {
	c       chan time.Time
	every   time.Duration
	next    time.Time
	stopped bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTicker(d time.Duration) Ticker {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTicker{c: make(chan time.Time, 1), every: d, next: c.now.Add(d)}
	c.tickers = append(c.tickers, t)
	return &fakeTickerHandle{c: c, t: t}
}

// Advance moves the clock by d and fires the tickers that came due
// (dropping ticks a slow reader missed, like time.Ticker).
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.tickers {
		for !t.stopped && !t.next.After(c.now) {
			select {
			case t.c <- t.next:
			default:
			}
			t.next = t.next.Add(t.every)
		}
	}
}

type fakeTickerHandle struct {
	c *fakeClock
	t *fakeTicker
}

func (h *fakeTickerHandle) C() <-chan time.Time { return h.t.c }
func (h *fakeTickerHandle) Stop() {
	h.c.mu.Lock()
	defer h.c.mu.Unlock()
	h.t.stopped = true
}

// fakeResizer records resizes and applies them to sizes.
type fakeResizer struct {
	mu    sync.Mutex
	calls []resizeCall
	sizes map[string]int
	fail  error
	block chan struct{} // when set, Resize waits for it (or ctx)
}

type resizeCall struct {
	key string
	n   int
}

func newFakeResizer() *fakeResizer { return &fakeResizer{sizes: map[string]int{}} }

func (f *fakeResizer) Resize(ctx context.Context, key string, n int) error {
	f.mu.Lock()
	f.calls = append(f.calls, resizeCall{key, n})
	block, fail := f.block, f.fail
	f.mu.Unlock()
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	if fail != nil {
		return fail
	}
	f.mu.Lock()
	f.sizes[key] = n
	f.mu.Unlock()
	return nil
}

func (f *fakeResizer) Calls() []resizeCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]resizeCall(nil), f.calls...)
}

// settle waits until c has no resize in flight.
func settle(t testing.TB, c *Controller) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		c.mu.Lock()
		n := len(c.inflight)
		c.mu.Unlock()
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("resizes still in flight")
		}
		time.Sleep(time.Millisecond) // waiting for a goroutine, not for time to pass
	}
}

// lastN returns the N of key as of the last finished resize, or 0.
func (c *Controller) lastN(key string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.known[key]
}
