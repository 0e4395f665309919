package redis

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// TestWatchdogLate checks, on explicit times, when the watchdog reports a
// round: not before Timeout has passed since the end of the epoch it
// started in, at the first tick after that, and never once it is over,
// whether the ticks come on time or late.
func TestWatchdogLate(t *testing.T) {
	const timeout = 320 * time.Millisecond
	tick := timeout / watchTicks
	for _, tt := range []struct {
		name  string
		every time.Duration // between ticks
	}{
		{"on time", tick},
		{"late ticks", 3 * tick},
		{"ticks rarer than Timeout", 2 * timeout},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t0 := time.Unix(1000, 0)
			w := newWatchdog(timeout, t0)
			nc := new(nodeCounters)
			done, _ := w.begin(nc) // a quick round, over before the first tick
			done.done.Add(1)
			f, _ := w.begin(nc) // a round with no reply
			now, ended := t0, time.Time{}
			var flagged time.Time
			for i := 0; i < 4*watchSlots && flagged.IsZero(); i++ {
				now = now.Add(tt.every)
				if ended.IsZero() {
					ended = now // epoch 0, the round's, ends at the first tick
				}
				if from, to := w.advance(now); late(nc, from, to) {
					flagged = now
				}
			}
			switch {
			case flagged.IsZero():
				t.Fatal("a round in flight was never reported")
			case flagged.Sub(ended) < timeout:
				t.Fatalf("reported %v after its epoch ended, before Timeout %v", flagged.Sub(ended), timeout)
			case flagged.Sub(ended) >= timeout+tt.every:
				t.Fatalf("reported %v after its epoch ended, later than the first tick past Timeout %v", flagged.Sub(ended), timeout)
			}
			f.done.Add(1)
			for range 4 * watchSlots {
				now = now.Add(tt.every)
				if from, to := w.advance(now); late(nc, from, to) {
					t.Fatal("a round that is over was reported")
				}
				if _, cut := w.begin(nc); cut != 0 {
					t.Fatal("cut count moved without a cut")
				}
				nc.flights[w.epoch.Load()%watchSlots].done.Add(1)
			}
		})
	}
}

// TestIncrByTimeoutQueued checks the bound of increments that rueidis
// queues behind one another (many callers at once) with a context that
// cannot be cancelled: the server stops answering for far longer than
// Config.Timeout, and every IncrBy returns store.ErrUnavailable wrapping
// context.DeadlineExceeded, not the answer the server gives when the pause
// ends; the store works again afterwards.
func TestIncrByTimeoutQueued(t *testing.T) {
	ctx := ctxT(t)
	n, s := shortTimeoutStore(ctx, t)
	key := keyspace.SubKey("queued", "0")
	if _, err := s.IncrBy(context.Background(), key, 1); err != nil {
		t.Fatal(err)
	}
	const callers = 16
	// Calls that nothing bounds would be answered when the pause ends.
	mustDo(t, n.Addr, "CLIENT", "PAUSE", "3000", "ALL")
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { _, errs[i] = s.IncrBy(context.Background(), key, 1) })
	}
	wg.Wait()
	for i, err := range errs {
		if !errors.Is(err, store.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("caller %d on a paused server: %v, want ErrUnavailable and DeadlineExceeded", i, err)
		}
	}
	for { // until the pause ends, through the watchdog's path again
		_, err := s.IncrBy(context.Background(), key, 1)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("IncrBy after the pause: %v", err)
		}
	}
	if st := s.Stats()[n.Addr]; st.Rounds < callers+2 || st.Commands != st.Rounds {
		t.Fatalf("stats %+v: IncrBy's rounds are not counted", st)
	}
}
