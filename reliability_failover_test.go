package hotcount_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
)

// TestReliabilityFailover kills a primary of a dedicated 3+3 cluster in the
// middle of buffered load. Its replica is promoted (node timeout 2 s) and
// the clients find the new primary by themselves. Redis replicates
// asynchronously, so a kill may lose writes the dead primary acknowledged
// in its last moments: the loss is measured and must not exceed what was
// acknowledged to the load in the last second (plus one flush interval)
// before the kill. Nothing may be counted twice.
func TestReliabilityFailover(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3, Replicas: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	const interval = 50 * time.Millisecond
	open := func(cfg hotcount.Config) *hotcount.Client {
		cfg.Redis.Addrs, cfg.Defaults.N, cfg.Timeout = cl.Seeds(), 8, 500*time.Millisecond
		c, err := hotcount.New(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Close(context.Background()) })
		return c
	}
	c := open(hotcount.Config{Defaults: hotcount.Namespace{Buffered: true, FlushInterval: interval}, Buffer: hotcount.BufferConfig{HotAt: 1}})
	plain := open(hotcount.Config{Reads: hotcount.ReadConfig{NoCache: true}})
	l := startLoad(c, keysFor(t, 8), 4, 20, time.Millisecond)

	// Sample the acknowledged total, to know what was sent just before
	// the kill.
	type sample struct {
		at    time.Time
		acked int64
	}
	var (
		mu      sync.Mutex
		samples []sample
	)
	sampStop := make(chan struct{})
	sampDone := make(chan struct{})
	go func() {
		defer close(sampDone)
		tk := time.NewTicker(10 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-sampStop:
				return
			case now := <-tk.C:
				mu.Lock()
				samples = append(samples, sample{now, l.totalAcked()})
				mu.Unlock()
			}
		}
	}()
	time.Sleep(time.Second)

	primaries, err := cl.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	victim := primaries[0]
	killAt := time.Now()
	if err := cl.Node(victim).Kill(); err != nil {
		t.Fatal(err)
	}
	ackedAtKill := l.totalAcked()

	// The plain client recovers: an Incr and a Get of all 8 sub-counters
	// (spread over every primary, the dead one's slots included) succeed.
	plainKey := uniqueKey(t) + ":plain"
	const recoverBound = 30 * time.Second // a hang check, not a target
	plainOK := func() error {
		if err := plain.Incr(ctx, plainKey, 1); err != nil {
			return err
		}
		_, err := plain.Get(ctx, plainKey)
		return err
	}
	if err := waitOK(recoverBound, plainOK); err != nil {
		t.Fatalf("unbuffered client not working %v after the kill: %v", recoverBound, err)
	}
	plainRecovered := time.Since(killAt)
	// The buffered client recovers: a Flush acknowledges everything held.
	if err := waitOK(recoverBound, func() error { return c.Flush(ctx) }); err != nil {
		t.Fatalf("buffered client cannot flush %v after the kill: %v", recoverBound, err)
	}
	flushRecovered := time.Since(killAt)
	time.Sleep(300 * time.Millisecond) // more load on the new topology
	l.halt()
	close(sampStop)
	<-sampDone
	l.checkOther(t)
	if err := c.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	after, err := cl.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}

	sum := l.checkTotal(t, cl, after)
	loss := l.totalAcked() - sum
	// What was acknowledged in the last second and one flush interval
	// before the kill is all that can have been flushed in the last
	// second before it.
	var window int64
	mu.Lock()
	for _, s := range samples {
		if !s.at.Before(killAt.Add(-time.Second - interval)) {
			window = ackedAtKill - s.acked
			break
		}
	}
	mu.Unlock()
	t.Logf("killed primary %s; primaries now %v; plain client working again after %v, buffered flush after %v",
		victim, after, plainRecovered.Round(time.Millisecond), flushRecovered.Round(time.Millisecond))
	t.Logf("acked %d, cache %d, loss %d (bound: %d acknowledged in the last %v before the kill); stats %+v",
		l.totalAcked(), sum, loss, window, time.Second+interval, c.Stats().Buffer)
	if loss < 0 {
		t.Fatalf("the cache holds %d more than was acknowledged: double count", -loss)
	}
	if loss > window {
		t.Fatalf("lost %d, more than the %d acknowledged in the last second before the kill", loss, window)
	}
}

// checkTotal reads the load's keys from the live primaries of cl and
// returns their sum.
func (l *load) checkTotal(t *testing.T, cl *testenv.Cluster, primaries []string) int64 {
	t.Helper()
	var live []string
	for _, p := range primaries {
		if n := cl.Node(p); n != nil && n.Running() {
			live = append(live, p)
		}
	}
	got := totals(t, live, 8, l.keys)
	var sum int64
	for _, v := range got {
		sum += v
	}
	return sum
}
