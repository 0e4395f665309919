package hotkeys

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// newFakeClock returns a fake clock at a fixed start.
func newFakeClock() *clock.Fake { return clock.NewFakeAt(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) }

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
