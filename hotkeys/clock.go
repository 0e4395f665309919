package hotkeys

import "time"

// Clock is the time source of a Controller. Tests inject a clock they
// advance by hand.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTicker returns a ticker that fires every d.
	NewTicker(d time.Duration) Ticker
}

// Ticker is the part of time.Ticker that a Controller uses.
type Ticker interface {
	// C is the channel the ticks arrive on.
	C() <-chan time.Time
	// Stop stops the ticker.
	Stop()
}

type systemClock struct{}

func (systemClock) Now() time.Time                   { return time.Now() }
func (systemClock) NewTicker(d time.Duration) Ticker { return systemTicker{time.NewTicker(d)} }

type systemTicker struct{ t *time.Ticker }

func (t systemTicker) C() <-chan time.Time { return t.t.C }
func (t systemTicker) Stop()               { t.t.Stop() }
