package hotcount_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/buffer"
	"github.com/hotcount/hotcount/internal/faultproxy"
)

// TestReliabilityOutage makes Redis unreachable for 5 s in the middle of
// buffered load on 200 keys (every connection reset, new ones refused),
// then reachable again: nothing is lost, the deltas were held (the oldest
// unflushed delta grew past the outage's length), and with the default
// bound no increment met back-pressure.
func TestReliabilityOutage(t *testing.T) {
	t.Parallel()
	const outage = 5 * time.Second
	px := startProxied(t)
	c := px.client(t, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 4, Buffered: true, FlushInterval: 50 * time.Millisecond}, Buffer: hotcount.BufferConfig{HotAt: 1}, Timeout: 300 * time.Millisecond})
	l := startLoad(c, keysFor(t, 200), 4, 20, time.Millisecond)
	time.Sleep(time.Second)
	ackedBefore := l.totalAcked()
	px.proxy.Pause(faultproxy.PauseReset)
	start := time.Now()
	var peak buffer.Stats
	for time.Since(start) < outage {
		time.Sleep(100 * time.Millisecond)
		if s := c.Stats().Buffer; s.OldestUnflushed > peak.OldestUnflushed {
			peak = s
		}
	}
	px.proxy.Resume()
	ackedDuring := l.totalAcked() - ackedBefore
	resumed := time.Now()
	// Let the flusher catch up by itself (retries back off, so this may
	// take a few seconds), then stop.
	recovered := time.Duration(-1)
	for time.Since(resumed) < 3*time.Second {
		if s := c.Stats().Buffer; s.OldestUnflushed < time.Second {
			recovered = time.Since(resumed)
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	l.halt()
	l.checkOther(t)
	if n := l.backp.Load(); n > 0 {
		t.Errorf("%d increments met ErrBackpressure with the default bound (%d keys held at most)", n, peak.HeldKeys)
	}
	if peak.OldestUnflushed < outage-time.Second {
		t.Errorf("oldest unflushed delta peaked at %v during a %v outage: deltas were not held", peak.OldestUnflushed, outage)
	}
	closeWithin(t, c, 30*time.Second)
	sum := l.checkExact(t, []string{px.node.Addr}, 4)
	s := c.Stats().Buffer
	t.Logf("acked %d (%d during the outage), cache %d; peak while down: unflushed %d on %d keys, oldest %v; back to < 1 s old %v after resume (-1: not within 3 s); flush errors %d, retries %d",
		l.totalAcked(), ackedDuring, sum, peak.Unflushed, peak.PendingKeys, peak.OldestUnflushed.Round(time.Millisecond),
		recovered.Round(time.Millisecond), s.FlushErrors, s.Retries)
}

// TestReliabilityBackpressure: while Redis is unreachable, a buffer bounded
// at MaxPendingKeys refuses a new key with ErrBackpressure only once that
// many entries are held; keys already held still take increments, and
// once Redis is back everything accepted lands.
func TestReliabilityBackpressure(t *testing.T) {
	t.Parallel()
	const bound = 64
	px := startProxied(t)
	c := px.client(t, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 2, Buffered: true, FlushInterval: 20 * time.Millisecond}, Buffer: hotcount.BufferConfig{MaxPendingKeys: bound, HotAt: 1}, Timeout: 300 * time.Millisecond})
	ctx := context.Background()
	base := uniqueKey(t)
	px.proxy.Pause(faultproxy.PauseReset)
	want := map[string]int64{}
	var keys []string
	refusedAt := -1
	for i := range 3 * bound {
		k := fmt.Sprintf("%s:%d", base, i)
		err := c.Incr(ctx, k, 1)
		if errors.Is(err, hotcount.ErrBackpressure) {
			held := c.Stats().Buffer.HeldKeys
			if refusedAt < 0 {
				refusedAt = i
			}
			if held < bound {
				t.Fatalf("key %d refused with %d entries held, below the bound %d", i, held, bound)
			}
			continue
		}
		if err != nil {
			t.Fatalf("Incr of key %d: %v", i, err)
		}
		keys = append(keys, k)
		want[k]++
	}
	if refusedAt < 0 {
		t.Fatalf("%d new keys while Redis is down were all accepted with MaxPendingKeys %d", 3*bound, bound)
	}
	// Keys already held take more.
	for _, k := range keys {
		if err := c.Incr(ctx, k, 2); err != nil {
			t.Fatalf("Incr of held key %s: %v", k, err)
		}
		want[k] += 2
	}
	t.Logf("first refusal at new key %d (bound %d); %d keys accepted; stats %+v", refusedAt, bound, len(keys), c.Stats().Buffer)
	px.proxy.Resume()
	if err := waitOK(20*time.Second, func() error { return c.Flush(ctx) }); err != nil {
		t.Fatalf("Flush after Redis came back: %v", err)
	}
	// Empty cells still count against the bound until the flusher
	// retires them (a flush interval without gain), so a new key may wait
	// a couple of intervals more.
	extra := base + ":after"
	flushed := time.Now()
	if err := waitOK(5*time.Second, func() error { return c.Incr(ctx, extra, 1) }); err != nil {
		t.Fatalf("Incr of a new key once flushed: %v", err)
	}
	t.Logf("a new key was accepted %v after the flush", time.Since(flushed).Round(time.Millisecond))
	keys = append(keys, extra)
	want[extra] = 1
	closeWithin(t, c, 20*time.Second)
	got := totals(t, []string{px.node.Addr}, 2, keys)
	for _, k := range keys {
		if got[k] != want[k] {
			t.Errorf("%s: cache holds %d, want %d", k, got[k], want[k])
		}
	}
}
