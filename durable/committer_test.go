package durable_test

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"

	"go.uber.org/goleak"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// memLog is an in-memory Appender that dedups like a backend and records
// batch sizes.
type memLog struct {
	mu      sync.Mutex
	seen    map[string]bool
	total   map[string]int64
	batches []int
	err     error
}

func newMemLog() *memLog { return &memLog{seen: map[string]bool{}, total: map[string]int64{}} }

func (m *memLog) AppendEvents(_ context.Context, evs []durable.Event) ([]durable.Result, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err != nil {
		return nil, m.err
	}
	m.batches = append(m.batches, len(evs))
	res := make([]durable.Result, len(evs))
	for i, e := range evs {
		switch {
		case e.Delta < 0:
			res[i].Err = fmt.Errorf("%w: negative", store.ErrOverflow)
		case m.seen[e.Key+"\x00"+e.ID]:
			res[i].Dup = true
		default:
			m.seen[e.Key+"\x00"+e.ID] = true
			m.total[e.Key] += e.Delta
		}
	}
	return res, nil
}

func (m *memLog) sizes() []int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]int(nil), m.batches...)
}

type result struct {
	dup bool
	err error
}

// appendAsync starts n Appends with IDs prefix0..; results arrive on the
// returned channel.
func appendAsync(c *durable.Committer, ctx context.Context, prefix string, n int) <-chan result {
	out := make(chan result, n)
	for i := range n {
		go func() {
			d, err := c.Append(ctx, durable.Event{Key: "k", Delta: 1, ID: fmt.Sprint(prefix, i)})
			out <- result{d, err}
		}()
	}
	return out
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		runtime.Gosched()
	}
}

func collect(t *testing.T, ch <-chan result, n int) []result {
	t.Helper()
	out := make([]result, 0, n)
	for range n {
		out = append(out, <-ch)
	}
	return out
}

func newCommitter(t *testing.T, log durable.Appender, cfg durable.CommitterConfig) *durable.Committer {
	t.Helper()
	c, err := durable.NewCommitter(log, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func TestCommitterCutsOnTime(t *testing.T) {
	clk := clock.NewFake()
	log := newMemLog()
	c := newCommitter(t, log, durable.CommitterConfig{FixedDelay: true, MaxBatch: 100, MaxDelay: 2 * time.Millisecond, Clock: clk})
	res := appendAsync(c, context.Background(), "t", 3)
	waitFor(t, "3 pending events and an armed timer", func() bool { return c.Pending() == 3 && clk.Waiters() > 0 })
	clk.Advance(time.Millisecond)
	if c.Pending() != 3 || len(log.sizes()) != 0 {
		t.Fatalf("batch cut before MaxDelay: pending %d, batches %v", c.Pending(), log.sizes())
	}
	clk.Advance(time.Millisecond)
	for _, r := range collect(t, res, 3) {
		if r.err != nil || r.dup {
			t.Fatalf("Append = %+v", r)
		}
	}
	if got := fmt.Sprint(log.sizes()); got != "[3]" {
		t.Fatalf("batches %s, want [3]", got)
	}
}

func TestCommitterCutsOnSize(t *testing.T) {
	clk := clock.NewFake() // never advanced: only size cuts
	log := newMemLog()
	c := newCommitter(t, log, durable.CommitterConfig{FixedDelay: true, MaxBatch: 4, MaxDelay: time.Hour, Clock: clk})
	res := appendAsync(c, context.Background(), "s", 8)
	for _, r := range collect(t, res, 8) {
		if r.err != nil || r.dup {
			t.Fatalf("Append = %+v", r)
		}
	}
	if got := fmt.Sprint(log.sizes()); got != "[4 4]" {
		t.Fatalf("batches %s, want [4 4]", got)
	}
}

func TestCommitterDuplicateInBatch(t *testing.T) {
	clk := clock.NewFake()
	log := newMemLog()
	c := newCommitter(t, log, durable.CommitterConfig{FixedDelay: true, MaxBatch: 5, MaxDelay: time.Hour, Clock: clk})
	out := make(chan result, 5)
	for range 5 {
		go func() {
			d, err := c.Append(context.Background(), durable.Event{Key: "k", Delta: 7, ID: "same"})
			out <- result{d, err}
		}()
	}
	fresh := 0
	for _, r := range collect(t, out, 5) {
		if r.err != nil {
			t.Fatal(r.err)
		}
		if !r.dup {
			fresh++
		}
	}
	if fresh != 1 || log.total["k"] != 7 || fmt.Sprint(log.sizes()) != "[5]" {
		t.Fatalf("fresh %d, total %d, batches %v; want 1, 7, [5]", fresh, log.total["k"], log.sizes())
	}
}

func TestCommitterCloseDrains(t *testing.T) {
	clk := clock.NewFake() // never advanced: only Close cuts
	log := newMemLog()
	c := newCommitter(t, log, durable.CommitterConfig{FixedDelay: true, MaxBatch: 100, MaxDelay: time.Hour, Clock: clk})
	res := appendAsync(c, context.Background(), "c", 5)
	waitFor(t, "5 pending events", func() bool { return c.Pending() == 5 })
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, r := range collect(t, res, 5) {
		if r.err != nil {
			t.Fatalf("accepted event failed at Close: %v", r.err)
		}
	}
	if log.total["k"] != 5 {
		t.Fatalf("total after Close = %d, want 5", log.total["k"])
	}
	if _, err := c.Append(context.Background(), durable.Event{Key: "k", ID: "late"}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Append after Close err = %v, want ErrClosed", err)
	}
	if err := c.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

func TestCommitterAppendError(t *testing.T) {
	log := newMemLog()
	boom := fmt.Errorf("%w: disk on fire", store.ErrUnavailable)
	log.err = boom
	c := newCommitter(t, log, durable.CommitterConfig{FixedDelay: true, MaxBatch: 3, MaxDelay: time.Hour, Clock: clock.NewFake()})
	for _, r := range collect(t, appendAsync(c, context.Background(), "e", 3), 3) {
		if !errors.Is(r.err, store.ErrUnavailable) {
			t.Fatalf("Append err = %v, want ErrUnavailable", r.err)
		}
	}
}

func TestCommitterContextCanceled(t *testing.T) {
	clk := clock.NewFake()
	log := newMemLog()
	c := newCommitter(t, log, durable.CommitterConfig{FixedDelay: true, MaxDelay: time.Hour, Clock: clk})
	ctx, cancel := context.WithCancel(context.Background())
	res := appendAsync(c, ctx, "x", 1)
	waitFor(t, "1 pending event", func() bool { return c.Pending() == 1 })
	cancel()
	if r := <-res; !errors.Is(r.err, context.Canceled) {
		t.Fatalf("Append err = %v, want context.Canceled", r.err)
	}
	// The event was accepted: Close still commits it.
	if err := c.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if log.total["k"] != 1 {
		t.Fatalf("total = %d, want 1", log.total["k"])
	}
	if _, err := c.Append(ctx, durable.Event{Key: "k", ID: "y"}); err == nil {
		t.Fatal("Append with a canceled context succeeded")
	}
}

func TestCommitterConfigErrors(t *testing.T) {
	for _, cfg := range []durable.CommitterConfig{{MaxBatch: -1}, {MaxDelay: -1}, {CommitTimeout: -1}, {MinShare: -1}} {
		if _, err := durable.NewCommitter(newMemLog(), cfg); !errors.Is(err, durable.ErrInvalidConfig) {
			t.Errorf("NewCommitter(%+v) err = %v, want ErrInvalidConfig", cfg, err)
		}
	}
	if _, err := durable.NewCommitter(nil, durable.CommitterConfig{}); !errors.Is(err, durable.ErrInvalidConfig) {
		t.Errorf("NewCommitter(nil) err = %v", err)
	}
	c := newCommitter(t, newMemLog(), durable.CommitterConfig{})
	for _, e := range []durable.Event{{Key: "k"}, {ID: "x"}} {
		if _, err := c.Append(context.Background(), e); !errors.Is(err, durable.ErrInvalidEvent) {
			t.Errorf("Append(%+v) err = %v, want ErrInvalidEvent", e, err)
		}
	}
}

func TestCheckpointNewer(t *testing.T) {
	t0 := clock.Start
	tests := []struct {
		c, old durable.Checkpoint
		want   bool
	}{
		{durable.Checkpoint{Epoch: 1, At: t0}, durable.Checkpoint{Epoch: 1, At: t0}, true},
		{durable.Checkpoint{Epoch: 1, At: t0}, durable.Checkpoint{Epoch: 1, At: t0.Add(1)}, false},
		{durable.Checkpoint{Epoch: 2, At: t0}, durable.Checkpoint{Epoch: 1, At: t0.Add(time.Hour)}, true},
		{durable.Checkpoint{Epoch: 0, At: t0.Add(time.Hour)}, durable.Checkpoint{Epoch: 1, At: t0}, false},
	}
	for i, tc := range tests {
		if got := tc.c.Newer(tc.old); got != tc.want {
			t.Errorf("case %d: Newer = %v, want %v", i, got, tc.want)
		}
	}
}

// gateLog blocks every AppendEvents until it takes a token from release,
// or release is closed.
type gateLog struct {
	*memLog
	mu      sync.Mutex
	running int
	release chan struct{}
}

func (g *gateLog) AppendEvents(ctx context.Context, evs []durable.Event) ([]durable.Result, error) {
	g.mu.Lock()
	g.running++
	g.mu.Unlock()
	<-g.release
	return g.memLog.AppendEvents(ctx, evs)
}

func (g *gateLog) inFlight() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.running
}

func TestCommitterMaxInFlight(t *testing.T) {
	for _, limit := range []int{1, 2} {
		t.Run(fmt.Sprint(limit), func(t *testing.T) {
			g := &gateLog{memLog: newMemLog(), release: make(chan struct{})}
			c := newCommitter(t, g, durable.CommitterConfig{MaxBatch: 1, MaxInFlight: limit, Clock: clock.NewFake()})
			res := appendAsync(c, context.Background(), "f", 3)
			// limit batches commit at once; the rest wait, sealed.
			waitFor(t, "commits in flight", func() bool { return g.inFlight() == limit && c.Pending() == 3-limit })
			close(g.release)
			for _, r := range collect(t, res, 3) {
				if r.err != nil {
					t.Fatal(r.err)
				}
			}
			if g.total["k"] != 3 || g.inFlight() != 3 {
				t.Fatalf("total %d after %d calls, want 3 and 3", g.total["k"], g.inFlight())
			}
		})
	}
}

// TestCommitterCutsAtShareOfCallers: without FixedDelay, a partial batch
// is cut, when a slot is free, once it holds peak outstanding events /
// MaxInFlight; the peak decays when the load goes.
func TestCommitterCutsAtShareOfCallers(t *testing.T) {
	clk := clock.NewFake() // the MaxDelay timer never fires
	g := &gateLog{memLog: newMemLog(), release: make(chan struct{})}
	c := newCommitter(t, g, durable.CommitterConfig{MaxBatch: 100, MaxDelay: time.Hour, MaxInFlight: 1, Clock: clk})
	// A lone event is its own share: cut at once.
	res := appendAsync(c, context.Background(), "a", 1)
	waitFor(t, "the first batch in flight", func() bool { return g.inFlight() == 1 })
	// Three more arrive while it commits: four callers are outstanding.
	more := appendAsync(c, context.Background(), "b", 3)
	waitFor(t, "3 pending events", func() bool { return c.Pending() == 3 })
	g.release <- struct{}{}
	collect(t, res, 1)
	// The slot is free, but 3 < 4: the batch waits for the fourth caller.
	waitFor(t, "the first batch recorded", func() bool { return len(g.sizes()) == 1 })
	runtime.Gosched()
	if c.Pending() != 3 || g.inFlight() != 1 {
		t.Fatalf("cut before its share: pending %d, calls %d", c.Pending(), g.inFlight())
	}
	last := appendAsync(c, context.Background(), "c", 1)
	waitFor(t, "the second batch in flight", func() bool { return g.inFlight() == 2 })
	g.release <- struct{}{}
	collect(t, more, 3)
	collect(t, last, 1)
	if got := fmt.Sprint(g.sizes()); got != "[1 4]" {
		t.Fatalf("batches %s, want [1 4]", got)
	}
	// Ten half-lives later the load is forgotten: a lone event goes at once.
	clk.Advance(10 * time.Second)
	res = appendAsync(c, context.Background(), "d", 1)
	waitFor(t, "the third batch in flight", func() bool { return g.inFlight() == 3 })
	g.release <- struct{}{}
	collect(t, res, 1)
	if got := fmt.Sprint(g.sizes()); got != "[1 4 1]" {
		t.Fatalf("batches %s, want [1 4 1]", got)
	}
}

// TestCommitterMinShare: a share is never below MinShare (or all the
// callers, when fewer), so slots free for more batches in flight do not
// split a light load into smaller batches.
func TestCommitterMinShare(t *testing.T) {
	clk := clock.NewFake() // the MaxDelay timer never fires
	g := &gateLog{memLog: newMemLog(), release: make(chan struct{})}
	c := newCommitter(t, g, durable.CommitterConfig{MaxBatch: 100, MaxDelay: time.Hour, MaxInFlight: 4, MinShare: 4, Clock: clk})
	var released bool
	t.Cleanup(func() { // runs before the committer's Close
		if !released {
			close(g.release)
		}
	})
	res := appendAsync(c, context.Background(), "a", 1)
	waitFor(t, "the first batch in flight", func() bool { return g.inFlight() == 1 })
	// Three more arrive while it commits: four callers are outstanding, so
	// the share is 1, but MinShare holds them until there are 4.
	more := appendAsync(c, context.Background(), "b", 3)
	waitFor(t, "3 events accepted", func() bool { return c.Pending()+g.inFlight()-1 == 3 })
	runtime.Gosched()
	if c.Pending() != 3 || g.inFlight() != 1 {
		t.Fatalf("cut below MinShare: pending %d, calls %d", c.Pending(), g.inFlight())
	}
	g.release <- struct{}{}
	collect(t, res, 1)
	last := appendAsync(c, context.Background(), "c", 1)
	waitFor(t, "the second batch in flight", func() bool { return g.inFlight() == 2 })
	g.release <- struct{}{}
	collect(t, more, 3)
	collect(t, last, 1)
	released = true
	if got := fmt.Sprint(g.sizes()); got != "[1 4]" {
		t.Fatalf("batches %s, want [1 4]", got)
	}
}

type concurrentLog struct{ *gateLog }

func (concurrentLog) AppendConcurrency() int { return 3 }

func TestCommitterInFlightFromAppender(t *testing.T) {
	g := &gateLog{memLog: newMemLog(), release: make(chan struct{})}
	c := newCommitter(t, concurrentLog{g}, durable.CommitterConfig{MaxBatch: 1, Clock: clock.NewFake()})
	res := appendAsync(c, context.Background(), "h", 4)
	waitFor(t, "3 commits in flight", func() bool { return g.inFlight() == 3 && c.Pending() == 1 })
	close(g.release)
	collect(t, res, 4)
}

// TestCommitterPerEventResult: each caller gets its own event's result; an
// event that fails alone does not fail the others of its batch.
func TestCommitterPerEventResult(t *testing.T) {
	log := newMemLog()
	c := newCommitter(t, log, durable.CommitterConfig{FixedDelay: true, MaxBatch: 4, MaxDelay: time.Hour, Clock: clock.NewFake()})
	out := make(chan error, 4)
	for i, d := range []int64{1, -1, 2, 3} {
		go func() {
			_, err := c.Append(context.Background(), durable.Event{Key: "k", Delta: d, ID: fmt.Sprint(i)})
			out <- err
		}()
	}
	var failed int
	for range 4 {
		if err := <-out; err != nil {
			if !errors.Is(err, store.ErrOverflow) {
				t.Fatalf("Append err = %v, want ErrOverflow", err)
			}
			failed++
		}
	}
	if failed != 1 || log.total["k"] != 6 || fmt.Sprint(log.sizes()) != "[4]" {
		t.Fatalf("failed %d, total %d, batches %v; want 1, 6, [4]", failed, log.total["k"], log.sizes())
	}
	if st := c.Stats(); st.Rejected != 1 || st.Failed != 0 || st.Events != 4 {
		t.Fatalf("stats %+v", st)
	}
}
