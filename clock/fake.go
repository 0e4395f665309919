package clock

import (
	"sync"
	"time"
)

// Start is the time a Fake made by NewFake stands at.
var Start = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Fake is a Clock that moves only when Advance or Set is called. It is safe
// for concurrent use.
type Fake struct {
	mu      sync.Mutex
	now     time.Time
	waiters []*waiter
	changed chan struct{} // closed and replaced whenever waiters change
}

// waiter is one ticker or After channel.
type waiter struct {
	at     time.Time
	period time.Duration // 0: a one-shot After
	ch     chan time.Time
	fake   *Fake
}

// NewFake returns a Fake standing at Start.
func NewFake() *Fake { return NewFakeAt(Start) }

// NewFakeAt returns a Fake standing at t.
func NewFakeAt(t time.Time) *Fake { return &Fake{now: t, changed: make(chan struct{})} }

// Now returns the fake time.
func (f *Fake) Now() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.now
}

// After returns a channel that receives once the clock has been advanced by
// d or more (at once when d <= 0).
func (f *Fake) After(d time.Duration) <-chan time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	ch := make(chan time.Time, 1)
	if d <= 0 {
		ch <- f.now
		return ch
	}
	f.addLocked(&waiter{at: f.now.Add(d), ch: ch, fake: f})
	return ch
}

// NewTicker returns a ticker that ticks each time the clock passes another
// multiple of d since now. It panics if d <= 0, as time.NewTicker does.
func (f *Fake) NewTicker(d time.Duration) Ticker {
	if d <= 0 {
		panic("clock: non-positive interval for NewTicker")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	w := &waiter{at: f.now.Add(d), period: d, ch: make(chan time.Time, 1), fake: f}
	f.addLocked(w)
	return w
}

// C implements Ticker.
func (w *waiter) C() <-chan time.Time { return w.ch }

// Stop implements Ticker.
func (w *waiter) Stop() {
	f := w.fake
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, x := range f.waiters {
		if x == w {
			f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
			f.signalLocked()
			return
		}
	}
}

func (f *Fake) addLocked(w *waiter) {
	f.waiters = append(f.waiters, w)
	f.signalLocked()
}

func (f *Fake) signalLocked() {
	close(f.changed)
	f.changed = make(chan struct{})
}

// Advance moves the clock forward by d, firing every ticker and timer that
// comes due on the way, in time order.
func (f *Fake) Advance(d time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.setLocked(f.now.Add(d))
}

// Set moves the clock to t (never backwards) and fires what comes due.
func (f *Fake) Set(t time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if t.After(f.now) {
		f.setLocked(t)
	}
}

func (f *Fake) setLocked(target time.Time) {
	for {
		var next *waiter
		for _, w := range f.waiters {
			if !w.at.After(target) && (next == nil || w.at.Before(next.at)) {
				next = w
			}
		}
		if next == nil {
			break
		}
		f.now = next.at
		select {
		case next.ch <- f.now:
		default: // a tick its reader has not taken: dropped, like time.Ticker
		}
		if next.period > 0 {
			next.at = next.at.Add(next.period)
			continue
		}
		for i, x := range f.waiters {
			if x == next {
				f.waiters = append(f.waiters[:i], f.waiters[i+1:]...)
				break
			}
		}
	}
	f.now = target
	f.signalLocked()
}

// Waiters returns the number of tickers and pending After channels.
func (f *Fake) Waiters() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.waiters)
}

// BlockUntil waits until at least n tickers and After channels are
// pending, so that a test advances the clock only once the goroutines
// under test wait on it. It does not sleep: it waits for them to register.
func (f *Fake) BlockUntil(n int) {
	for {
		f.mu.Lock()
		if len(f.waiters) >= n {
			f.mu.Unlock()
			return
		}
		ch := f.changed
		f.mu.Unlock()
		<-ch
	}
}

// BlockUntilContext is BlockUntil with a way out: it returns false when
// done is closed first.
func (f *Fake) BlockUntilContext(done <-chan struct{}, n int) bool {
	for {
		f.mu.Lock()
		if len(f.waiters) >= n {
			f.mu.Unlock()
			return true
		}
		ch := f.changed
		f.mu.Unlock()
		select {
		case <-ch:
		case <-done:
			return false
		}
	}
}
