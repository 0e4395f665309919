package buffer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

func opSet(ops []store.IncrOp) []string {
	out := make([]string, len(ops))
	for i, o := range ops {
		out[i] = fmt.Sprintf("%s %s %s %d %d", o.Key, o.SeqKey, o.Writer, o.Seq, o.Delta)
	}
	slices.Sort(out)
	return out
}

// TestRetrySameKeyAndToken injects failures, including replies lost after
// the sink applied the ops, and checks that every retry repeats the same
// sub-key, token and delta and that totals stay exact.
func TestRetrySameKeyAndToken(t *testing.T) {
	tests := []struct {
		name        string
		faults      []fault
		wantSkipped uint64
	}{
		{"refused", []fault{faultRefuse, faultRefuse}, 0},
		{"op errors", []fault{faultOpErr}, 0},
		{"lost reply", []fault{faultLostReply}, 3},
		{"op errors after apply", []fault{faultOpLost}, 3},
		{"refused then lost", []fault{faultRefuse, faultLostReply, faultOpLost}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := newFakeSink()
			sink.faults = tt.faults
			b, _ := newTestBuffer(t, sink, nil)
			want := map[string]int64{"a": 3, "b": -4, "c": 10}
			for k, v := range want {
				mustAdd(t, b, k, v)
			}
			for i := range tt.faults {
				if err := b.Flush(context.Background()); !errors.Is(err, ErrUnflushed) || !errors.Is(err, store.ErrUnavailable) {
					t.Fatalf("flush %d: err %v, want ErrUnflushed wrapping ErrUnavailable", i, err)
				}
				mustAdd(t, b, "a", 1) // accumulates separately from the op in flight
				want["a"]++
			}
			if err := b.Flush(context.Background()); err != nil {
				t.Fatalf("final flush: %v", err)
			}
			first := opSet(sink.call(0))
			for i := 1; i <= len(tt.faults); i++ {
				if got := opSet(sink.call(i)); !slices.Equal(got, first) {
					t.Fatalf("call %d sent %v, want the same ops as call 0: %v", i, got, first)
				}
			}
			if err := b.Flush(context.Background()); err != nil { // the deltas added meanwhile
				t.Fatal(err)
			}
			for k, v := range want {
				if got := sink.total(k); got != v {
					t.Errorf("total(%s) = %d, want %d", k, got, v)
				}
			}
			s := b.Stats()
			if s.OpsSkipped != tt.wantSkipped || s.Retries != uint64(3*len(tt.faults)) || s.FlushErrors != uint64(len(tt.faults)) {
				t.Errorf("stats: %+v", s)
			}
			if s.Unflushed != 0 {
				t.Errorf("Unflushed = %d", s.Unflushed)
			}
		})
	}
}

func TestOpShape(t *testing.T) {
	sink := newFakeSink()
	labels := []string{"x", "y", "z"}
	b, _ := newTestBuffer(t, sink, func(c *Config) {
		c.Labels = func(string) []string { return labels }
		c.TokenTTL = time.Minute
		c.BatchSize = 10
	})
	for i := range 35 {
		mustAdd(t, b, fmt.Sprint("k", i), int64(i+1))
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := sink.callCount(); n != 4 {
		t.Fatalf("%d IncrMulti calls for 35 ops in batches of 10, want 4", n)
	}
	if !sink.deadline {
		t.Error("an IncrMulti call had no deadline")
	}
	seqs := map[uint64]bool{}
	writer := sink.call(0)[0].Writer
	if len(writer) != 24 || strings.Trim(writer, "0123456789abcdef") != "" {
		t.Fatalf("bad writer id %q", writer)
	}
	for i := range 4 {
		for _, o := range sink.call(i) {
			key, label, ok := keyspace.ParseSubKey(o.Key)
			if !ok || !slices.Contains(labels, label) {
				t.Fatalf("bad sub-key %q", o.Key)
			}
			if o.TokenKey != "" || o.SeqKey != keyspace.SeqKey(key, label) || o.Writer != writer || o.Seq == 0 {
				t.Fatalf("bad sequenced op %+v", o)
			}
			if seqs[o.Seq] {
				t.Fatalf("sequence %d used twice", o.Seq)
			}
			seqs[o.Seq] = true
			if o.TTL != time.Minute {
				t.Fatalf("TTL %v", o.TTL)
			}
		}
	}
}

func TestBackoff(t *testing.T) {
	sink := newFakeSink()
	sink.faults = []fault{faultRefuse, faultRefuse, faultRefuse, faultRefuse}
	b, clk := newTestBuffer(t, sink, func(c *Config) {
		c.Interval = time.Second
		c.MaxBackoff = 4 * time.Second
	})
	mustAdd(t, b, "a", 1)
	// step: advance, run one timed round, expect the call count.
	steps := []struct {
		advance time.Duration
		calls   int
	}{
		{0, 1}, // first send fails: retry after 1s
		{500 * time.Millisecond, 1},
		{500 * time.Millisecond, 2}, // fails again: 2s
		{time.Second, 2},
		{time.Second, 3}, // fails: 4s (cap)
		{3 * time.Second, 3},
		{time.Second, 4}, // fails: still 4s
		{3 * time.Second, 4},
		{time.Second, 5}, // succeeds
		{time.Hour, 5},
	}
	for i, st := range steps {
		clk.mu.Lock()
		clk.now = clk.now.Add(st.advance) // no ticks: rounds are run by hand
		clk.mu.Unlock()
		tick(b)
		if got := sink.callCount(); got != st.calls {
			t.Fatalf("step %d: %d calls, want %d", i, got, st.calls)
		}
	}
	if sink.total("a") != 1 {
		t.Fatalf("total = %d", sink.total("a"))
	}
}

func TestPermanentError(t *testing.T) {
	sink := newFakeSink()
	var reported []error
	b, _ := newTestBuffer(t, sink, func(c *Config) {
		c.Labels = func(string) []string { return []string{"0"} }
		c.OnError = func(err error) { reported = append(reported, err) }
	})
	sub := keyspace.SubKey("k", "0")
	sink.setReject(sub, true)
	mustAdd(t, b, "k", 5)
	mustAdd(t, b, "ok", 1)
	err := b.Flush(context.Background())
	if !errors.Is(err, ErrUnflushed) || !errors.Is(err, store.ErrNotInteger) {
		t.Fatalf("Flush: %v", err)
	}
	mustAdd(t, b, "k", 2)
	if err := b.Flush(context.Background()); err == nil {
		t.Fatal("second Flush succeeded while the sub-counter rejects")
	}
	if got := b.Pending("k"); got != 7 {
		t.Fatalf("Pending = %d, want 7 (nothing dropped)", got)
	}
	s := b.Stats()
	if s.PermanentErrors != 2 || s.InFlight != 1 || s.Unflushed != 7 {
		t.Fatalf("stats: %+v", s)
	}
	if len(reported) != 2 || !errors.Is(reported[0], store.ErrNotInteger) || !strings.Contains(reported[0].Error(), sub) {
		t.Fatalf("OnError got %v", reported)
	}
	if sink.total("ok") != 1 {
		t.Fatal("other keys were held up")
	}
	sink.setReject(sub, false)
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := sink.total("k"); got != 7 {
		t.Fatalf("total = %d, want 7", got)
	}
	var attempts []store.IncrOp
	for i := range sink.callCount() {
		for _, o := range sink.call(i) {
			if o.Key == sub {
				attempts = append(attempts, o)
			}
		}
	}
	if len(attempts) != 4 {
		t.Fatalf("%d sends of %s, want 4: %v", len(attempts), sub, attempts)
	}
	for _, o := range attempts[1:3] {
		if o != attempts[0] {
			t.Fatalf("retry %+v differs from first attempt %+v", o, attempts[0])
		}
	}
	if attempts[3].Delta != 2 || attempts[3].Seq <= attempts[0].Seq {
		t.Fatalf("later delta sent as %+v", attempts[3])
	}
}

// TestOverflowDropped: a delta the cache refuses because the sub-counter
// would pass its bound is dropped, counted and reported; later deltas of
// the key and Close do not wait on it.
func TestOverflowDropped(t *testing.T) {
	sink := newFakeSink()
	sink.rejectAs = store.ErrOverflow
	var reported []error
	b, _ := newTestBuffer(t, sink, func(c *Config) {
		c.Labels = func(string) []string { return []string{"0"} }
		c.OnError = func(err error) { reported = append(reported, err) }
	})
	sub := keyspace.SubKey("k", "0")
	sink.setReject(sub, true)
	mustAdd(t, b, "k", 5)
	if err := b.Flush(context.Background()); err != nil {
		t.Fatalf("Flush: %v", err)
	}
	s := b.Stats()
	if s.Dropped != 1 || s.DroppedDelta != 5 || s.PermanentErrors != 1 || s.Unflushed != 0 || s.InFlight != 0 {
		t.Fatalf("stats: %+v", s)
	}
	if len(reported) != 1 || !errors.Is(reported[0], store.ErrOverflow) || !strings.Contains(reported[0].Error(), "dropped") {
		t.Fatalf("OnError got %v", reported)
	}
	sink.setReject(sub, false)
	mustAdd(t, b, "k", 2)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := sink.total("k"); got != 2 {
		t.Fatalf("total = %d, want 2 (the refused 5 dropped)", got)
	}
}

func TestNoLabels(t *testing.T) {
	sink := newFakeSink()
	var active atomic.Bool
	var reported []error
	b, _ := newTestBuffer(t, sink, func(c *Config) {
		c.Labels = func(string) []string {
			if active.Load() {
				return []string{"a"}
			}
			return nil
		}
		c.OnError = func(err error) { reported = append(reported, err) }
	})
	mustAdd(t, b, "k", 4)
	if err := b.Flush(context.Background()); !errors.Is(err, ErrNoLabels) {
		t.Fatalf("Flush: %v", err)
	}
	if len(reported) != 1 || !errors.Is(reported[0], ErrNoLabels) || sink.callCount() != 0 {
		t.Fatalf("reported %v, %d calls", reported, sink.callCount())
	}
	active.Store(true)
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sink.total("k") != 4 {
		t.Fatal("delta lost")
	}
}

func TestPendingWhileSinkBlocked(t *testing.T) {
	sink := newFakeSink()
	sink.gate = make(chan struct{})
	sink.entered = make(chan struct{}, 1)
	b, _ := newTestBuffer(t, sink, nil)
	mustAdd(t, b, "k", 5)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- b.Flush(ctx) }()
	<-sink.entered // the op was cut and is being sent
	mustAdd(t, b, "k", 2)
	if got := b.Pending("k"); got != 7 {
		t.Fatalf("Pending with the op in flight = %d, want 7", got)
	}
	cancel()
	if err := <-done; !errors.Is(err, ErrUnflushed) {
		t.Fatalf("Flush: %v", err)
	}
	if got := b.Pending("k"); got != 7 {
		t.Fatalf("Pending after a failed flush = %d, want 7", got)
	}
	go func() { sink.gate <- struct{}{}; sink.gate <- struct{}{} }() // the retry, then the rest
	go func() { <-sink.entered; <-sink.entered }()
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := b.Pending("k"); got != 2 {
		t.Fatalf("Pending after the ack = %d, want 2", got)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := sink.total("k"); got != 7 || b.Pending("k") != 0 {
		t.Fatalf("total %d, Pending %d", got, b.Pending("k"))
	}
}

func TestTimedAndSizeFlush(t *testing.T) {
	t.Run("ticker", func(t *testing.T) {
		sink := newFakeSink()
		b, clk := newTestBuffer(t, sink, func(c *Config) { c.Interval = time.Second })
		mustAdd(t, b, "k", 3)
		clk.Advance(time.Second)
		<-sink.notify
		if got := sink.total("k"); got != 3 {
			t.Fatalf("total = %d", got)
		}
	})
	t.Run("size", func(t *testing.T) {
		sink := newFakeSink()
		b, _ := newTestBuffer(t, sink, func(c *Config) { c.MaxKeys = 3 })
		mustAdd(t, b, "a", 1)
		mustAdd(t, b, "b", 1)
		select {
		case <-sink.notify:
			t.Fatal("flushed before the size bound")
		default:
		}
		mustAdd(t, b, "c", 1)
		<-sink.notify
		if got := sink.total("a") + sink.total("b") + sink.total("c"); got != 3 {
			t.Fatalf("total = %d", got)
		}
	})
}

func TestClose(t *testing.T) {
	sink := newFakeSink()
	b, _ := newTestBuffer(t, sink, nil)
	mustAdd(t, b, "a", 1)
	mustAdd(t, b, "b", 2)
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	mustAdd(t, b, "a", 10)
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if sink.total("a") != 11 || sink.total("b") != 2 {
		t.Fatalf("totals a=%d b=%d", sink.total("a"), sink.total("b"))
	}
	for _, k := range []string{"a", "new", "{bad"} {
		if err := b.Add(k, 1); !errors.Is(err, ErrClosed) {
			t.Errorf("Add(%q) after Close: %v, want ErrClosed", k, err)
		}
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if s := b.Stats(); s.HeldKeys != 0 || s.Unflushed != 0 {
		t.Fatalf("stats: %+v", s)
	}
}

func TestCloseRetriesThenReports(t *testing.T) {
	sink := newFakeSink()
	sink.faults = []fault{faultRefuse, faultLostReply}
	b, clk := newTestBuffer(t, sink, nil)
	mustAdd(t, b, "a", 4)
	go func() { // move time on whenever Close waits for its backoff
		for range clk.waiting {
			clk.Advance(time.Hour)
		}
	}()
	defer close(clk.waiting)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sink.onCall = func(n int) { // a bound, so a broken retry loop fails instead of hanging
		if n > 10 {
			cancel()
		}
	}
	if err := b.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if sink.callCount() != 3 || sink.total("a") != 4 {
		t.Fatalf("%d calls, total %d", sink.callCount(), sink.total("a"))
	}

	sink2 := newFakeSink()
	sink2.always = faultRefuse
	b2, _ := newTestBuffer(t, sink2, nil)
	mustAdd(t, b2, "a", 4)
	mustAdd(t, b2, "b", -1)
	ctx2, cancel2 := context.WithCancel(context.Background())
	sink2.onCall = func(int) { cancel2() }
	err := b2.Close(ctx2)
	if !errors.Is(err, ErrUnflushed) || !strings.Contains(err.Error(), "2 keys, delta +3") {
		t.Fatalf("Close with the sink down: %v", err)
	}
	if got := b2.Pending("a"); got != 4 {
		t.Fatalf("Pending after failed Close = %d", got)
	}
	sink2.setAlways(faultNone)
	sink2.onCall = nil
	if err := b2.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if sink2.total("a") != 4 || sink2.total("b") != -1 {
		t.Fatal("deltas lost across Close retries")
	}
}

// TestCloseRacingAdds checks that an Add racing with Close is either
// flushed (nil error) or refused (ErrClosed), never lost.
func TestCloseRacingAdds(t *testing.T) {
	sink := newFakeSink()
	b, _ := newTestBuffer(t, sink, nil)
	mustAdd(t, b, "k", 1)
	var ok atomic.Int64
	ok.Store(1)
	start := make(chan struct{})
	done := make(chan struct{})
	var warm sync.WaitGroup
	warm.Add(8)
	for range 8 {
		go func() {
			defer func() { done <- struct{}{} }()
			<-start
			for n := 0; ; n++ {
				if n == 100 {
					warm.Done()
				}
				err := b.Add("k", 1)
				if errors.Is(err, ErrClosed) {
					return
				}
				if err != nil {
					t.Error(err)
					return
				}
				ok.Add(1)
			}
		}()
	}
	close(start)
	warm.Wait()
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range 8 {
		<-done
	}
	if got := sink.total("k"); got != ok.Load() {
		t.Fatalf("total = %d, successful Adds = %d", got, ok.Load())
	}
}

// TestCloseCancelled closes with a context that is already done: Close may
// give up, but Adds are refused from then on and a later Close drains.
func TestCloseCancelled(t *testing.T) {
	sink := newFakeSink()
	b, _ := newTestBuffer(t, sink, nil)
	mustAdd(t, b, "k", 3)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := b.Close(ctx); err != nil && !errors.Is(err, ErrUnflushed) {
		t.Fatalf("Close: %v", err)
	}
	if err := b.Add("k", 1); !errors.Is(err, ErrClosed) {
		t.Fatalf("Add after an abandoned Close: %v, want ErrClosed", err)
	}
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	if got := sink.total("k"); got != 3 {
		t.Fatalf("total = %d, want 3", got)
	}
}
