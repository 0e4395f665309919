package buffer

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount/store"
)

// lastOpOf returns the op for key's sub-counters in the sink's last call.
func lastOpOf(t *testing.T, sink *fakeSink, key string) store.IncrOp {
	t.Helper()
	ops := sink.call(sink.callCount() - 1)
	for _, o := range ops {
		if len(o.Key) > len(key)+1 && o.Key[1:len(key)+2] == key+"#" {
			return o
		}
	}
	t.Fatalf("no op for %q in %v", key, ops)
	return store.IncrOp{}
}

// TestHotCold checks the rule: a key with fewer than HotAt Adds in an
// interval is flushed as a plain increment (no token), one with HotAt or
// more carries a token, and a hot key stays hot while it gets at least
// half as many.
func TestHotCold(t *testing.T) {
	sink := newFakeSink()
	b, _ := newTestBuffer(t, sink, func(c *Config) { c.HotAt = 8 })
	steps := []struct {
		adds    int
		wantHot bool
	}{
		{1, false}, // cold start
		{7, false},
		{8, true},  // turns hot
		{4, true},  // half of HotAt keeps it hot
		{3, false}, // below half: cold again
		{5, false}, // not enough to turn hot again
		{20, true},
	}
	for i, st := range steps {
		for range st.adds {
			mustAdd(t, b, "k", 1)
		}
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
		o := lastOpOf(t, sink, "k")
		if hot := o.SeqKey != ""; hot != st.wantHot || o.Delta != int64(st.adds) {
			t.Fatalf("step %d (%d adds): op %+v, want hot %v", i, st.adds, o, st.wantHot)
		}
	}
	if s := b.Stats(); s.ColdWrites != 4 || s.OpsApplied != uint64(len(steps)) {
		t.Fatalf("stats: %+v", s)
	}
}

// TestColdNoReply: a cold flush whose reply is lost is not sent again
// (it was applied: a resend would count it twice); it is counted as
// dropped. A hot key's flush under the same fault is retried with its
// token and counted once. A cold flush that was never sent is retried.
func TestColdNoReply(t *testing.T) {
	sink := newFakeSink()
	sink.faults = []fault{faultOpNoReply, faultOpErr, faultRefuse}
	var reported []error
	b, _ := newTestBuffer(t, sink, func(c *Config) {
		c.HotAt = 8
		c.OnError = func(err error) { reported = append(reported, err) }
	})
	mustAdd(t, b, "cold", 3)
	for range 10 {
		mustAdd(t, b, "hot", 1)
	}
	// Call 0: both applied, both replies lost. The cold op is dropped,
	// the hot one kept.
	if err := b.Flush(context.Background()); !errors.Is(err, ErrUnflushed) {
		t.Fatalf("flush 0: %v, want ErrUnflushed (the hot op)", err)
	}
	if s := b.Stats(); s.ColdDropped != 1 || s.ColdDroppedDelta != 3 || s.InFlight != 1 || b.Pending("cold") != 0 {
		t.Fatalf("after a lost cold reply: %+v, pending %d", s, b.Pending("cold"))
	}
	if len(reported) == 0 || !errors.Is(reported[0], store.ErrNoReply) {
		t.Fatalf("reported %v", reported)
	}
	// Calls 1 and 2: not applied (an error result, then a refused call):
	// a cold delta added meanwhile is retried each time until applied.
	mustAdd(t, b, "cold", 2)
	for i := range 3 {
		err := b.Flush(context.Background())
		if (i < 2) != (err != nil) {
			t.Fatalf("flush %d: %v", i+1, err)
		}
	}
	if got := sink.total("cold"); got != 5 {
		t.Fatalf("cold total %d, want 5 (3 applied once, 2 retried until applied)", got)
	}
	if got := sink.total("hot"); got != 10 {
		t.Fatalf("hot total %d, want 10", got)
	}
	if s := b.Stats(); s.ColdDropped != 1 || s.OpsSkipped != 1 || s.Unflushed != 0 {
		t.Fatalf("stats: %+v", s)
	}
}

// TestColdWithDeadline: a cold key whose sub-counter takes a deadline is
// flushed with a token, since a plain INCRBY cannot set it in the same
// step.
func TestColdWithDeadline(t *testing.T) {
	sink := newFakeSink()
	at := time.Unix(2e9, 0)
	b, _ := newTestBuffer(t, sink, func(c *Config) {
		c.HotAt = 8
		c.ExpireAt = func(key, _ string) time.Time {
			if key == "ttl" {
				return at
			}
			return time.Time{}
		}
	})
	mustAdd(t, b, "ttl", 1)
	mustAdd(t, b, "plain", 1)
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if o := lastOpOf(t, sink, "ttl"); o.SeqKey == "" || !o.ExpireAt.Equal(at) {
		t.Fatalf("op with a deadline %+v", o)
	}
	if o := lastOpOf(t, sink, "plain"); o.SeqKey != "" || !o.ExpireAt.IsZero() {
		t.Fatalf("cold op %+v", o)
	}
}

func TestHotAtConfig(t *testing.T) {
	if _, err := New(newFakeSink(), Config{HotAt: -1, Labels: func(string) []string { return []string{"0"} }}); !errors.Is(err, ErrConfig) {
		t.Fatalf("HotAt -1: %v", err)
	}
}

// TestQueuedOpsInOrder: Close cuts a key whose op is still unacknowledged
// into a second op; the second goes only after the first is acknowledged,
// so the key's sequence numbers reach the sink in order and nothing is
// skipped as already applied.
func TestQueuedOpsInOrder(t *testing.T) {
	sink := newFakeSink()
	sink.faults = []fault{faultOpLost}
	b, _ := newTestBuffer(t, sink, nil)
	mustAdd(t, b, "k", 10)
	if err := b.Flush(context.Background()); !errors.Is(err, ErrUnflushed) {
		t.Fatalf("flush: %v", err)
	}
	mustAdd(t, b, "k", 5)
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := sink.total("k"); got != 15 {
		t.Fatalf("total %d, want 15", got)
	}
	var last uint64
	for i := range sink.callCount() {
		for _, o := range sink.call(i) {
			if o.Seq < last {
				t.Fatalf("call %d sent sequence %d after %d", i, o.Seq, last)
			}
			last = o.Seq
		}
		if n := len(sink.call(i)); n != 1 {
			t.Fatalf("call %d sent %d ops of one key at once", i, n)
		}
	}
}

// TestDirect: Direct lets a cold key's increment go to the cache at once
// and counts it; a key with a buffered delta or op, or one that turned hot
// on Direct's count, is buffered instead.
func TestDirect(t *testing.T) {
	sink := newFakeSink()
	b, _ := newTestBuffer(t, sink, func(c *Config) { c.HotAt = 8 })
	for range 7 {
		if !b.Direct("cold") {
			t.Fatal("Direct of a cold key: false")
		}
	}
	tick(b)
	if !b.Direct("cold") {
		t.Fatal("7 increments in an interval turned the key hot")
	}
	for range 7 {
		b.Direct("cold")
	}
	tick(b) // 8 in this interval: hot
	if b.Direct("cold") {
		t.Fatal("Direct of a hot key: true")
	}
	mustAdd(t, b, "held", 1)
	if b.Direct("held") {
		t.Fatal("Direct of a key with a buffered delta: true")
	}
	if sink.callCount() != 0 || b.Pending("cold") != 0 {
		t.Fatalf("Direct sent or held something: %d calls, pending %d", sink.callCount(), b.Pending("cold"))
	}
}

// TestCloseLetsFlushFinish: Close during a timed flush lets that flush
// finish instead of cancelling it, so the cold ops it carries are not
// dropped as unanswered.
func TestCloseLetsFlushFinish(t *testing.T) {
	sink := newFakeSink()
	sink.gate = make(chan struct{})
	sink.entered = make(chan struct{}, 1)
	sink.cancelNoReply = true
	b, clk := newTestBuffer(t, sink, func(c *Config) { c.HotAt = 8 })
	for i := range 100 {
		mustAdd(t, b, fmt.Sprint("k", i), 1)
	}
	clk.Advance(time.Hour) // the flusher's timed flush
	<-sink.entered         // and it is sending
	closed := make(chan error, 1)
	go func() { closed <- b.Close(context.Background()) }()
	for !b.closed.Load() {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(10 * time.Millisecond) // Close is waiting for the flusher (or has cancelled it)
	var err error
	select {
	case sink.gate <- struct{}{}:
		err = <-closed
	case err = <-closed: // the flush was cancelled, not let through
	}
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for i := range 100 {
		sum += sink.total(fmt.Sprint("k", i))
	}
	if s := b.Stats(); sum != 100 || s.ColdDropped != 0 {
		t.Fatalf("total %d, want 100; stats %+v", sum, s)
	}
}

// TestColdLabel: with Config.ColdLabel, a cold key's flush goes to that
// label without a look-up of the key's labels; a hot key's still picks
// from Labels.
func TestColdLabel(t *testing.T) {
	sink := newFakeSink()
	var lookups atomic.Int64
	b, _ := newTestBuffer(t, sink, func(c *Config) {
		c.HotAt = 8
		c.ColdLabel = "0"
		c.Labels = func(string) []string { lookups.Add(1); return []string{"x"} }
	})
	mustAdd(t, b, "cold", 1)
	for range 8 {
		mustAdd(t, b, "hot", 1)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if o := lastOpOf(t, sink, "cold"); o.Key != "{cold#0}" || o.SeqKey != "" {
		t.Fatalf("cold op %+v", o)
	}
	if o := lastOpOf(t, sink, "hot"); o.Key != "{hot#x}" || o.SeqKey == "" {
		t.Fatalf("hot op %+v", o)
	}
	if n := lookups.Load(); n != 1 {
		t.Fatalf("%d label look-ups, want 1 (the hot key's)", n)
	}
}
