package hotcount_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/buffer"
	"github.com/hotcount/hotcount/internal/faultproxy"
	"github.com/hotcount/hotcount/internal/testenv"
)

// These tests put a fault proxy between a Client and one standalone
// redis-server and check the promises of each mode:
//
//   - buffered: every acknowledged Incr lands exactly once, whatever the
//     network does, because every flush carries a token and a retry of an
//     applied flush is recognised and skipped;
//   - unbuffered: an Incr that returns nil landed exactly once; an Incr
//     that returns ErrUnavailable has an unknown outcome (its command may
//     have run and only the reply been lost), so the cache holds between
//     the acknowledged total and the acknowledged plus unknown total;
//   - no operation hangs: a slow or silent backend fails an operation with
//     ErrUnavailable after about Config.Timeout.

// toggle switches a fault on for on, off for off, repeatedly, until stop
// is closed; the fault is off when it returns.
func toggle(stop <-chan struct{}, on, off time.Duration, set func(bool)) {
	defer set(false)
	for {
		set(true)
		select {
		case <-stop:
			return
		case <-time.After(on):
		}
		set(false)
		select {
		case <-stop:
			return
		case <-time.After(off):
		}
	}
}

// runFaulted runs buffered load on 16 keys through a proxy while fault
// toggles, then stops everything, closes the client and checks that the
// cache holds exactly what was acknowledged.
func runFaulted(t *testing.T, fault func(p *faultproxy.Proxy, on bool)) (*proxied, *hotcount.Client) {
	return runFaultedFor(t, 150*time.Millisecond, fault)
}

// runFaultedFor is runFaulted with the fault on for on at a time.
func runFaultedFor(t *testing.T, on time.Duration, fault func(p *faultproxy.Proxy, on bool)) (*proxied, *hotcount.Client) {
	noLeak(t)
	px := startProxied(t)
	// HotAt 1: every key is hot, so every flush is exactly-once.
	c := px.client(t, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 4, Buffered: true, FlushInterval: 20 * time.Millisecond}, Buffer: hotcount.BufferConfig{HotAt: 1}, Timeout: 300 * time.Millisecond})
	l := startLoad(c, keysFor(t, 16), 8, 50, 200*time.Microsecond)
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		toggle(stop, on, 100*time.Millisecond, func(on bool) { fault(px.proxy, on) })
	}()
	time.Sleep(1500 * time.Millisecond)
	close(stop)
	<-done
	l.halt()
	l.checkOther(t)
	if n := l.backp.Load(); n > 0 {
		t.Errorf("%d increments refused with ErrBackpressure on 16 keys", n)
	}
	closeWithin(t, c, 20*time.Second)
	sum := l.checkExact(t, []string{px.node.Addr}, 4)
	s := c.Stats().Buffer
	t.Logf("acked %d (unknown outcome %d), cache %d; flushes %d, flush errors %d, retries %d, applied %d, skipped (token already used) %d; proxy %+v",
		l.totalAcked(), l.totalUnknown(), sum, s.Flushes, s.FlushErrors, s.Retries, s.OpsApplied, s.OpsSkipped, px.proxy.Stats())
	return px, c
}

// TestReliabilityLostRepliesBuffered drops connections after the command
// was forwarded but before its reply reached the client, again and again,
// under buffered load: the total is exact, and retries of applied flushes
// were recognised by their token. Whether a dropped reply was that of an
// applied flush whose retry then got through is up to timing, so a run
// without that case is tried again (testenv.Retry).
func TestReliabilityLostRepliesBuffered(t *testing.T) {
	testenv.Retry(t, testenv.Tries, func(t *testing.T) error {
		px, c := runFaulted(t, func(p *faultproxy.Proxy, on bool) {
			if on {
				p.DropReplies(1)
			} else {
				p.DropReplies(0)
			}
		})
		if s := px.proxy.Stats(); s.RepliesDropped == 0 {
			return fmt.Errorf("the fault did not happen: no reply was dropped (%+v)", s)
		}
		// The case that matters: a flush was applied, its reply was lost,
		// and its retry was recognised by the token.
		if s := c.Stats().Buffer; s.OpsSkipped == 0 {
			return fmt.Errorf("the fault did not happen: no retry met its own token (stats %+v): the lost-reply case was not exercised", s)
		}
		return nil
	})
}

// TestReliabilityLostRepliesUnbuffered: with plain Incr, an increment whose
// reply is lost fails with ErrUnavailable, and its outcome is unknown.
func TestReliabilityLostRepliesUnbuffered(t *testing.T) {
	testenv.Retry(t, testenv.Tries, func(t *testing.T) error {
		noLeak(t)
		px := startProxied(t)
		c := px.client(t, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 4}, Timeout: 300 * time.Millisecond})
		ctx := context.Background()
		key := uniqueKey(t)
		var acked, unknown int64
		for i := range 3000 {
			// Every 7th reply is lost during the middle third.
			switch i {
			case 1000:
				px.proxy.DropReplies(7)
			case 2000:
				px.proxy.DropReplies(0)
			}
			err := c.Incr(ctx, key, 1)
			switch {
			case err == nil:
				acked++
			case errors.Is(err, hotcount.ErrUnavailable):
				unknown++
			default:
				t.Fatalf("Incr %d: %v, want nil or ErrUnavailable", i, err)
			}
		}
		got := totals(t, []string{px.node.Addr}, 4, []string{key})[key]
		t.Logf("acked %d, unknown outcome %d, cache %d (so %d of the unknown landed); proxy %+v",
			acked, unknown, got, got-acked, px.proxy.Stats())
		if got < acked || got > acked+unknown {
			t.Fatalf("cache holds %d, want between acked %d and acked+unknown %d", got, acked, acked+unknown)
		}
		closeWithin(t, c, 10*time.Second)
		if unknown == 0 {
			return fmt.Errorf("the fault did not happen: no Incr failed (proxy %+v)", px.proxy.Stats())
		}
		return nil
	})
}

// TestReliabilityResets resets every connection repeatedly under buffered
// load: exact total.
func TestReliabilityResets(t *testing.T) {
	testenv.Retry(t, testenv.Tries, func(t *testing.T) error {
		px, _ := runFaulted(t, func(p *faultproxy.Proxy, on bool) {
			if on {
				p.ResetAll()
			}
		})
		if s := px.proxy.Stats(); s.Resets == 0 {
			return fmt.Errorf("the fault did not happen: no connection was reset (%+v)", s)
		}
		return nil
	})
}

// TestReliabilityPartialWrites cuts commands (upstream) and replies
// (downstream) short under buffered load: exact total.
func TestReliabilityPartialWrites(t *testing.T) {
	for _, d := range []faultproxy.Direction{faultproxy.Upstream, faultproxy.Downstream} {
		t.Run(d.String(), func(t *testing.T) {
			testenv.Retry(t, testenv.Tries, func(t *testing.T) error {
				px, _ := runFaulted(t, func(p *faultproxy.Proxy, on bool) {
					if on {
						p.SetPartialWrite(d, 5)
					} else {
						p.SetPartialWrite(d, -1)
					}
				})
				if s := px.proxy.Stats(); s.PartialWrites == 0 {
					return fmt.Errorf("the fault did not happen: no partial write happened (%+v)", s)
				}
				return nil
			})
		})
	}
}

// TestReliabilityHalfOpen holds every connection silent (bytes held, then
// released late) under buffered load, for longer than the Timeout, so that
// flushes time out and are retried while their first attempt is still on
// its way: exact total.
func TestReliabilityHalfOpen(t *testing.T) {
	testenv.Retry(t, testenv.Tries, func(t *testing.T) error {
		_, c := runFaultedFor(t, 700*time.Millisecond, func(p *faultproxy.Proxy, on bool) { p.SetHalfOpen(on) })
		if s := c.Stats().Buffer; s.FlushErrors == 0 {
			return fmt.Errorf("the fault did not happen: no flush timed out (stats %+v)", s)
		}
		return nil
	})
}

// TestReliabilityNoHang: with latency beyond Config.Timeout, and with
// half-open connections, Incr, Get and Flush fail with ErrUnavailable
// after about Timeout instead of hanging. The bound asserted (10 ×
// Timeout) only tells a timeout from a hang.
func TestReliabilityNoHang(t *testing.T) {
	noLeak(t)
	const timeout = 200 * time.Millisecond
	px := startProxied(t)
	plain := px.client(t, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 4}, Reads: hotcount.ReadConfig{NoCache: true}, Timeout: timeout})
	// HotAt 1: its flush is exactly-once, so one without a reply is kept
	// and Flush reports it (a cold key's would be dropped and counted).
	buffered := px.client(t, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 4, Buffered: true, FlushInterval: time.Hour}, Buffer: hotcount.BufferConfig{HotAt: 1}, Reads: hotcount.ReadConfig{NoCache: true}, Timeout: timeout})
	ctx := context.Background()
	key := uniqueKey(t)
	if err := plain.Incr(ctx, key, 1); err != nil {
		t.Fatal(err)
	}
	ops := []struct {
		name string
		do   func() error
	}{
		{"Incr", func() error { return plain.Incr(ctx, key, 1) }},
		{"Get", func() error { _, err := plain.Get(ctx, key); return err }},
		{"Flush", func() error {
			if err := buffered.Incr(ctx, key, 1); err != nil {
				return err
			}
			return buffered.Flush(ctx)
		}},
	}
	faults := []struct {
		name    string
		on, off func()
	}{
		{"latency", func() {
			px.proxy.SetLatency(faultproxy.Downstream, 20*timeout)
		}, func() { px.proxy.SetLatency(faultproxy.Downstream, 0) }},
		{"half-open", func() { px.proxy.SetHalfOpen(true) }, func() { px.proxy.SetHalfOpen(false) }},
		{"paused", func() { px.proxy.Pause(faultproxy.PauseHang) }, px.proxy.Resume},
	}
	for _, f := range faults {
		f.on()
		for _, op := range ops {
			start := time.Now()
			err := op.do()
			d := time.Since(start)
			t.Logf("%s: %s failed after %v: %v", f.name, op.name, d.Round(time.Millisecond), err)
			switch {
			case err == nil:
				t.Errorf("%s: %s succeeded", f.name, op.name)
			case op.name == "Flush" && errors.Is(err, buffer.ErrUnflushed):
				// The delta is kept and retried. (The cause reported may be
				// the failed label lookup rather than ErrUnavailable.)
			case !errors.Is(err, hotcount.ErrUnavailable):
				t.Errorf("%s: %s = %v, want ErrUnavailable", f.name, op.name, err)
			}
			if d > 10*timeout {
				t.Errorf("%s: %s took %v, more than 10 × Timeout (%v): a hang", f.name, op.name, d, timeout)
			}
		}
		f.off()
		// The clients recover by themselves once the fault is gone.
		if err := waitOK(10*time.Second, func() error { return plain.Incr(ctx, key, 1) }); err != nil {
			t.Fatalf("after %s: Incr still fails: %v", f.name, err)
		}
	}
	closeWithin(t, buffered, 10*time.Second)
	closeWithin(t, plain, 10*time.Second)
}

// waitOK retries f until it succeeds or d has passed.
func waitOK(d time.Duration, f func() error) error {
	deadline := time.Now().Add(d)
	for {
		err := f()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestReliabilityLostRepliesCold drops replies under a load of cold keys
// (a few increments per flush interval each, below Buffer.HotAt): their
// flushes are plain INCRBYs, and one whose reply is lost is not sent
// again. The cache never holds more than was acknowledged, and holds at
// least that minus the deltas counted as dropped (the loss-window row of
// a cold flush without a reply).
func TestReliabilityLostRepliesCold(t *testing.T) {
	testenv.Retry(t, testenv.Tries, func(t *testing.T) error {
		noLeak(t)
		px := startProxied(t)
		c := px.client(t, hotcount.Config{Defaults: hotcount.Namespace{NoColdStart: true, N: 1, Buffered: true, FlushInterval: 50 * time.Millisecond}, Timeout: 300 * time.Millisecond})
		// 256 keys, 2 workers pausing 5 ms every 16 increments: a key
		// gets about 1 increment per interval, on a busy machine fewer.
		l := startLoad(c, keysFor(t, 256), 2, 16, 5*time.Millisecond)
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			toggle(stop, 150*time.Millisecond, 100*time.Millisecond, func(on bool) {
				if on {
					px.proxy.DropReplies(1)
				} else {
					px.proxy.DropReplies(0)
				}
			})
		}()
		time.Sleep(1500 * time.Millisecond)
		close(stop)
		<-done
		l.halt()
		l.checkOther(t)
		closeWithin(t, c, 20*time.Second)
		got := totals(t, []string{px.node.Addr}, 1, l.keys)
		s := c.Stats().Buffer
		var sum int64
		for i, k := range l.keys {
			sum += got[k]
			if acked := l.acked[i].Load(); got[k] > acked {
				t.Errorf("%s: cache holds %d, only %d increments were acknowledged: a cold flush counted twice", k, got[k], acked)
			}
		}
		acked := l.totalAcked()
		t.Logf("acked %d, cache %d, cold writes %d, cold dropped %d (delta %d), tokened applied %d; proxy %+v",
			acked, sum, s.ColdWrites, s.ColdDropped, s.ColdDroppedDelta, s.OpsApplied-s.ColdWrites+s.ColdDropped, px.proxy.Stats())
		if sum < acked-s.ColdDroppedDelta || sum > acked {
			t.Fatalf("cache holds %d; acknowledged %d, dropped without reply %d: want %d..%d", sum, acked, s.ColdDroppedDelta, acked-s.ColdDroppedDelta, acked)
		}
		if s.ColdWrites == 0 {
			t.Fatalf("no cold flush: the load was not cold (stats %+v)", s)
		}
		if s.ColdDropped == 0 {
			return fmt.Errorf("the fault did not happen: no cold flush lost its reply (stats %+v, proxy %+v)", s, px.proxy.Stats())
		}
		return nil
	})
}

// TestReliabilityLostRepliesDirect: IncrValue's cold INCRBYs, sent in
// shared batches (RedisConfig.IncrBatchWindow, as `hotcount proxy` sets
// it), while replies are dropped. An increment that returned nil landed
// once (written, or buffered when it was never sent); one that failed
// with ErrUnavailable has an unknown outcome. Every key holds between its
// acknowledged total and that plus its unknown ones, and every exact value
// answered is at most what the key finally holds.
func TestReliabilityLostRepliesDirect(t *testing.T) {
	testenv.Retry(t, testenv.Tries, func(t *testing.T) error {
		noLeak(t)
		px := startProxied(t)
		c := px.client(t, hotcount.Config{
			Redis:    hotcount.RedisConfig{IncrBatchWindow: 2 * time.Millisecond},
			Defaults: hotcount.Namespace{Buffered: true, FlushInterval: 50 * time.Millisecond},
			Timeout:  300 * time.Millisecond,
		})
		// 2048 keys for 8 callers: each key gets about one increment per
		// flush interval, so it stays cold and its INCRBY goes at once.
		keys := keysFor(t, 2048)
		acked := make([]atomic.Int64, len(keys))
		unknown := make([]atomic.Int64, len(keys))
		highest := make([]atomic.Int64, len(keys))
		var exact, other atomic.Int64
		stop, done := make(chan struct{}), make(chan struct{})
		go func() {
			defer close(done)
			toggle(stop, 150*time.Millisecond, 100*time.Millisecond, func(on bool) {
				if on {
					px.proxy.DropReplies(3)
				} else {
					px.proxy.DropReplies(0)
				}
			})
		}()
		var wg sync.WaitGroup
		halt := make(chan struct{})
		for w := range 8 {
			wg.Go(func() {
				for i := w; ; i++ {
					select {
					case <-halt:
						return
					default:
					}
					k := i % len(keys)
					v, ex, err := c.IncrValue(context.Background(), keys[k], 1)
					switch {
					case err == nil:
						acked[k].Add(1)
						if ex {
							exact.Add(1)
							for h := highest[k].Load(); v > h && !highest[k].CompareAndSwap(h, v); h = highest[k].Load() {
							}
						}
					case errors.Is(err, hotcount.ErrUnavailable):
						unknown[k].Add(1)
					default:
						other.Add(1)
						t.Errorf("IncrValue: %v, want nil or ErrUnavailable", err)
						return
					}
				}
			})
		}
		time.Sleep(1500 * time.Millisecond)
		close(stop)
		<-done
		close(halt)
		wg.Wait()
		closeWithin(t, c, 20*time.Second)
		got := totals(t, []string{px.node.Addr}, 1, keys)
		var sumAcked, sumUnknown, sum int64
		for i, k := range keys {
			a, u := acked[i].Load(), unknown[i].Load()
			sumAcked, sumUnknown, sum = sumAcked+a, sumUnknown+u, sum+got[k]
			if got[k] < a || got[k] > a+u {
				t.Errorf("%s: cache holds %d; acknowledged %d, unknown %d", k, got[k], a, u)
			}
			if h := highest[i].Load(); h > got[k] {
				t.Errorf("%s: an exact reply said %d, the cache holds %d", k, h, got[k])
			}
		}
		t.Logf("acked %d (exact replies %d), unknown %d, cache %d; proxy %+v", sumAcked, exact.Load(), sumUnknown, sum, px.proxy.Stats())
		if exact.Load() < sumAcked/2 {
			t.Fatalf("%d exact replies of %d acknowledged: the keys were not cold", exact.Load(), sumAcked)
		}
		if sumUnknown == 0 {
			return fmt.Errorf("the fault did not happen: no IncrValue lost its reply (proxy %+v)", px.proxy.Stats())
		}
		return nil
	})
}
