package durabletest

import (
	"sync"
	"testing"
	"time"
)

// Start is the time every FakeClock starts at.
var Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// FakeClock is a durable.Clock that moves only when Advance is called.
type FakeClock struct {
	mu      sync.Mutex
	now     time.Time
	waiters []waiter
}

type waiter struct {
	at time.Time
	ch chan time.Time
}

// NewFakeClock returns a clock standing at Start.
func NewFakeClock() *FakeClock { return &FakeClock{now: Start} }

// Now returns the clock's time.
func (c *FakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// After returns a channel that receives when the clock has been advanced
// by d or more.
func (c *FakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- c.now
		return ch
	}
	c.waiters = append(c.waiters, waiter{at: c.now.Add(d), ch: ch})
	return ch
}

// Advance moves the clock forward by d and fires the timers that are due.
func (c *FakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	kept := c.waiters[:0]
	for _, w := range c.waiters {
		if w.at.After(c.now) {
			kept = append(kept, w)
			continue
		}
		w.ch <- c.now
	}
	c.waiters = kept
}

// Waiters returns the number of pending timers.
func (c *FakeClock) Waiters() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.waiters)
}

var (
	memoMu sync.Mutex
	memo   = map[*testing.T]map[string]any{}
)

// Clock returns the FakeClock of test t, the same one on every call. An
// open function passed to Run must give it to the backend as its clock.
func Clock(t *testing.T) *FakeClock {
	return Memo(t, "clock", func() any { return NewFakeClock() }).(*FakeClock)
}

// Memo returns the value stored for (t, name), making it with mk on the
// first call. Open functions use it so that a second open in the same test
// reaches the same storage (a data dir, a database schema).
func Memo(t *testing.T, name string, mk func() any) any {
	memoMu.Lock()
	m, ok := memo[t]
	if !ok {
		m = map[string]any{}
		memo[t] = m
		t.Cleanup(func() {
			memoMu.Lock()
			delete(memo, t)
			memoMu.Unlock()
		})
	}
	v, ok := m[name]
	memoMu.Unlock()
	if ok {
		return v
	}
	v = mk() // outside the lock: mk may call Memo or t.Cleanup
	memoMu.Lock()
	defer memoMu.Unlock()
	if old, ok := memo[t][name]; ok {
		return old
	}
	memo[t][name] = v
	return v
}
