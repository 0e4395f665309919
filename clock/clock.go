// Package clock is the one time source of hotcount. Every ticker, timer and
// timestamp of the library — buffered flushes, checkpoints, rollups, the
// hot-key sketch, automatic N, re-placement, fold waits, token expiry —
// comes from one Clock, so a test can inject a Fake and drive all of them
// by advancing it instead of sleeping.
//
// The package is public because backends built outside a Client's Config
// (durable/postgres, durable/sqlite, store/mem) take a Clock too.
//
// A Fake keeps a list of waiters (tickers and After channels) ordered by
// due time. Advance moves the time forward and fires, in time order, every
// waiter that came due on the way; a ticker fires at most once per call to
// Advance for each period crossed but, like a time.Ticker, drops ticks its
// reader has not taken (its channel holds one tick). BlockUntil lets a test
// wait, without sleeping, until the goroutines under test have started the
// tickers and timers it is about to fire.
package clock

import (
	"context"
	"time"
)

// Clock tells the time and makes tickers and timers.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTicker returns a ticker that ticks every d (d > 0).
	NewTicker(d time.Duration) Ticker
	// After returns a channel that receives the time once d has elapsed.
	After(d time.Duration) <-chan time.Time
}

// Ticker delivers ticks until it is stopped.
type Ticker interface {
	// C returns the channel the ticks arrive on.
	C() <-chan time.Time
	// Stop turns the ticker off; no tick is sent after it returns.
	Stop()
}

// Real returns the system clock.
func Real() Clock { return realClock{} }

// OrReal returns c, or the system clock when c is nil.
func OrReal(c Clock) Clock {
	if c == nil {
		return realClock{}
	}
	return c
}

type realClock struct{}

func (realClock) Now() time.Time                         { return time.Now() }
func (realClock) After(d time.Duration) <-chan time.Time { return time.After(d) }
func (realClock) NewTicker(d time.Duration) Ticker       { return realTicker{time.NewTicker(d)} }

type realTicker struct{ t *time.Ticker }

func (t realTicker) C() <-chan time.Time { return t.t.C }
func (t realTicker) Stop()               { t.t.Stop() }

// Sleep waits d on c, or until ctx is done (then it returns ctx.Err()).
func Sleep(ctx context.Context, c Clock, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	select {
	case <-c.After(d):
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
