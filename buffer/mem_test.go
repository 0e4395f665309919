package buffer

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
	"github.com/hotcount/hotcount/store/mem"
)

// lossySink applies every call on the store but reports the first failures
// calls as failed, the way a reply lost to a dropped connection looks.
type lossySink struct {
	s        store.Store
	failures atomic.Int64
	calls    atomic.Int64
	onCall   func(n int64) // set before Close; called after each call
}

func (l *lossySink) IncrMulti(ctx context.Context, ops []store.IncrOp) ([]store.IncrResult, error) {
	res, err := l.s.IncrMulti(ctx, ops)
	if n := l.calls.Add(1); l.onCall != nil {
		l.onCall(n)
	}
	if err == nil && l.failures.Add(-1) >= 0 {
		return nil, fmt.Errorf("reply lost: %w", store.ErrUnavailable)
	}
	return res, err
}

// TestMemStore flushes concurrent adds into the embedded store, through
// lost replies, and checks the summed sub-counters.
func TestMemStore(t *testing.T) {
	st, err := mem.New(mem.Config{Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var s store.Store = st
	sink := &lossySink{s: s}
	sink.failures.Store(3)
	labels := keyspace.NaiveLabels(4)
	b, clk := newTestBuffer(t, sink, func(c *Config) {
		c.Labels = func(string) []string { return labels }
		c.Rand = nil // real randomness: labels spread over the sub-counters
		c.BatchSize = 16
	})
	keys := []string{"likes:post:42", "views:video:7", "score:game:1"}
	const adders, perAdder = 16, 2000
	var wg sync.WaitGroup
	for g := range adders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range perAdder {
				if err := b.Add(keys[(g+i)%len(keys)], 1); err != nil {
					t.Error(err)
					return
				}
				if g == 0 && i%500 == 0 {
					_ = b.Flush(context.Background()) // may hit a lost reply: retried later
				}
			}
		}()
	}
	wg.Wait()
	go func() { // let Close's backoff pass, should it need to retry
		for range clk.waiting {
			clk.Advance(24 * time.Hour) // past any backoff
		}
	}()
	defer close(clk.waiting)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink.onCall = func(n int64) { // a bound, so a broken retry loop fails instead of hanging
		if n > 100 {
			cancel()
		}
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	var total int64
	subsUsed := 0
	for _, k := range keys {
		subs := make([]string, len(labels))
		for i, l := range labels {
			subs[i] = keyspace.SubKey(k, l)
		}
		vals, err := s.Get(context.Background(), subs)
		if err != nil {
			t.Fatal(err)
		}
		for _, v := range vals {
			total += v
			if v != 0 {
				subsUsed++
			}
		}
	}
	if want := int64(adders * perAdder); total != want {
		t.Fatalf("sum of sub-counters = %d, want %d", total, want)
	}
	if subsUsed < 2 {
		t.Fatalf("only %d sub-counters used", subsUsed)
	}
	if bs := b.Stats(); bs.OpsSkipped == 0 || bs.Unflushed != 0 {
		t.Fatalf("stats %+v: want skipped ops from the lost replies", bs)
	}
}
