package redis

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// fakeSender is a coalescer's send that hands each batch to the test and
// answers it (v = delta) once the test releases it.
type fakeSender struct {
	batches chan []*markedCall
	release chan struct{}
}

func newFakeCoalescer(window time.Duration) (*coalescer, *fakeSender) {
	f := &fakeSender{batches: make(chan []*markedCall, 100), release: make(chan struct{})}
	c := newCoalescer(nil, nil, window)
	c.send = func(calls []*markedCall) {
		f.batches <- calls
		<-f.release
		for _, call := range calls {
			call.v = call.delta
		}
	}
	return c, f
}

// queued is how many calls wait unsent.
func (c *coalescer) queued() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.queue)
}

// waitQueued waits until n calls wait unsent.
func waitQueued(t *testing.T, c *coalescer, n int) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for c.queued() != n {
		if time.Now().After(deadline) {
			t.Fatalf("queued calls = %d, want %d", c.queued(), n)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestCoalescerClosedLoop: callers that each wait for their reply before
// the next call meet in one batch: the first call goes alone, and once
// every caller has been seen at once, each batch waits until all of them
// are back, and carries them all. A caller that stops holds the others
// only until the window runs out (here an hour, so they stay queued) and
// Close fails what waits unsent with store.ErrClosed.
func TestCoalescerClosedLoop(t *testing.T) {
	const callers, rounds = 20, 4
	c, f := newFakeCoalescer(time.Hour)
	ctx := ctxT(t)
	errs := make(chan error, callers*rounds)
	var wg sync.WaitGroup
	start := func(i int) {
		wg.Go(func() {
			for r := range rounds {
				v, _, err := c.do(ctx, &markedCall{sub: fmt.Sprintf("k%d", i), delta: int64(1 + r)})
				if err != nil {
					errs <- err
					return
				}
				if v != int64(1+r) {
					errs <- fmt.Errorf("caller %d round %d: v = %d", i, r, v)
				}
			}
		})
	}
	start(0)
	if b := <-f.batches; len(b) != 1 {
		t.Fatalf("first batch carries %d calls, want 1 (a lone call is not held)", len(b))
	}
	for i := 1; i < callers; i++ {
		start(i)
	}
	waitQueued(t, c, callers-1) // all seen at once: est = callers
	f.release <- struct{}{}
	for b := 1; b < rounds; b++ {
		batch := <-f.batches
		if len(batch) != callers {
			t.Fatalf("batch %d carries %d calls, want every caller (%d)", b+1, len(batch), callers)
		}
		f.release <- struct{}{}
	}
	// Caller 0 is done; the others' last calls wait for it, for the
	// window, and are never sent.
	waitQueued(t, c, callers-1)
	select {
	case b := <-f.batches:
		t.Fatalf("a batch of %d went before the window ran out", len(b))
	case <-time.After(50 * time.Millisecond):
	}
	c.close()
	wg.Wait()
	close(errs)
	closed := 0
	for err := range errs {
		if !errors.Is(err, store.ErrClosed) {
			t.Fatal(err)
		}
		closed++
	}
	if closed != callers-1 {
		t.Fatalf("%d calls failed with ErrClosed, want %d", closed, callers-1)
	}
	if _, _, err := c.do(ctx, &markedCall{sub: "late", delta: 1}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("call after close: %v, want ErrClosed", err)
	}
}

// TestCoalescerSequentialNotHeld: one caller's calls go one by one, each
// at once, however long the window.
func TestCoalescerSequentialNotHeld(t *testing.T) {
	c, f := newFakeCoalescer(time.Hour)
	defer c.close()
	done := make(chan error, 1)
	go func() {
		for i := range 50 {
			if _, _, err := c.do(ctxT(t), &markedCall{sub: "k", delta: int64(i)}); err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	for range 50 {
		select {
		case b := <-f.batches:
			if len(b) != 1 {
				t.Fatalf("batch of %d calls from one caller", len(b))
			}
			f.release <- struct{}{}
		case <-time.After(30 * time.Second):
			t.Fatal("a lone caller's call was held")
		}
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

// TestCoalescerCancel: a call whose context ends while it waits unsent
// was never written (store.ErrUnavailable without store.ErrNoReply, and
// it is not sent later); one whose context ends after its batch went out
// may have run (store.ErrNoReply).
func TestCoalescerCancel(t *testing.T) {
	c, f := newFakeCoalescer(time.Hour)
	defer c.close()
	bg := ctxT(t)
	first := make(chan error, 1)
	cctx, cancelSent := context.WithCancel(bg)
	go func() {
		_, _, err := c.do(cctx, &markedCall{sub: "sent", delta: 1})
		first <- err
	}()
	b := <-f.batches // in flight until released
	if len(b) != 1 {
		t.Fatalf("batch of %d", len(b))
	}
	qctx, cancelQueued := context.WithCancel(bg)
	queued := make(chan error, 1)
	go func() {
		_, _, err := c.do(qctx, &markedCall{sub: "queued", delta: 1})
		queued <- err
	}()
	waitQueued(t, c, 1) // held: a batch is in flight
	cancelQueued()
	if err := <-queued; !errors.Is(err, store.ErrUnavailable) || errors.Is(err, store.ErrNoReply) || !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled while queued: %v, want ErrUnavailable (never written), not ErrNoReply", err)
	}
	if n := c.queued(); n != 0 {
		t.Fatalf("%d calls still queued after the cancel", n)
	}
	cancelSent()
	if err := <-first; !errors.Is(err, store.ErrNoReply) {
		t.Fatalf("cancelled after its batch went out: %v, want ErrNoReply", err)
	}
	f.release <- struct{}{}
	select {
	case b := <-f.batches:
		t.Fatalf("the cancelled call was sent after all (batch of %d)", len(b))
	case <-time.After(50 * time.Millisecond):
	}
}

// TestCoalescedIncrByMarked: with BatchWindow, concurrent IncrByMarked
// calls on a real cluster and a standalone server go in shared batches
// and each gets its own answer: the value, whether its mark exists, the
// deadline set; a key that is not an integer fails its own call alone.
func TestCoalescedIncrByMarked(t *testing.T) {
	run := func(t *testing.T, s *Store) {
		ctx := ctxT(t)
		const callers, rounds = 30, 20
		marks := make([]store.Mark, 0, callers/3)
		for i := 0; i < callers; i += 3 {
			marks = append(marks, store.Mark{Key: fmt.Sprintf("cm%d", i), Value: 1})
		}
		if _, err := s.SetMarks(ctx, marks, false); err != nil {
			t.Fatal(err)
		}
		bad := keyspace.SubKey("cmbad", keyspace.ColdLabel)
		set(t, s, bad, "x")
		var sizes sync.Map
		send := s.marked.send
		s.marked.send = func(calls []*markedCall) {
			sizes.Store(len(calls), true)
			send(calls)
		}
		at := time.Now().Add(time.Hour)
		var wg sync.WaitGroup
		errs := make(chan error, callers+1)
		for i := range callers {
			wg.Go(func() {
				key := fmt.Sprintf("cm%d", i)
				sub, mark := keyspace.SubKey(key, keyspace.ColdLabel), keyspace.MarkKey(key)
				for r := range rounds {
					var dl time.Time
					if i%2 == 1 {
						dl = at
					}
					v, marked, err := s.IncrByMarked(ctx, sub, mark, int64(i), dl)
					if err != nil || v != int64(i*(r+1)) || marked != (i%3 == 0) {
						errs <- fmt.Errorf("caller %d round %d: %d %v %v, want %d %v", i, r, v, marked, err, i*(r+1), i%3 == 0)
						return
					}
				}
			})
		}
		wg.Go(func() {
			for range rounds {
				if _, _, err := s.IncrByMarked(ctx, bad, keyspace.MarkKey("cmbad"), 1, time.Time{}); !errors.Is(err, store.ErrNotInteger) {
					errs <- fmt.Errorf("INCRBY of a string: %v, want ErrNotInteger", err)
					return
				}
			}
		})
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		shared := false
		sizes.Range(func(k, _ any) bool {
			shared = shared || k.(int) > 1
			return true
		})
		if !shared {
			t.Fatal("no batch carried more than one call")
		}
		ds, err := s.Deadlines(ctx, []string{keyspace.SubKey("cm1", keyspace.ColdLabel), keyspace.SubKey("cm2", keyspace.ColdLabel)})
		if err != nil || !ds[0].At.Equal(at.Truncate(time.Millisecond)) || !ds[1].At.IsZero() {
			t.Fatalf("deadlines = %+v %v, want %v and none", ds, err, at)
		}
		// Without a mark: the INCRBY alone.
		if v, marked, err := s.IncrByMarked(ctx, keyspace.SubKey("cm0", keyspace.ColdLabel), "", 1, time.Time{}); err != nil || marked || v != 1 {
			t.Fatalf("IncrByMarked without a mark = %d %v %v, want 1 false", v, marked, err)
		}
	}
	t.Run("cluster", func(t *testing.T) {
		s := newClusterStore(t, Config{BatchWindow: 2 * time.Millisecond})
		flushCluster(t)
		run(t, s)
	})
	t.Run("standalone", func(t *testing.T) {
		s := newStandaloneStore(t, Config{BatchWindow: 2 * time.Millisecond})
		if err := nodeDo(t, standaloneAddr(t), "FLUSHALL").Error(); err != nil {
			t.Fatal(err)
		}
		run(t, s)
	})
	t.Run("closed", func(t *testing.T) {
		s := newStandaloneStore(t, Config{BatchWindow: 2 * time.Millisecond})
		s.Close()
		if _, _, err := s.IncrByMarked(ctxT(t), "a", "", 1, time.Time{}); !errors.Is(err, store.ErrClosed) {
			t.Fatalf("after Close: %v, want ErrClosed", err)
		}
	})
}

// TestCoalescerLostNodeKicksRefresh: a batch that meets a lost
// connection asks the store for a topology refresh, as the store's own
// calls do, and its call fails with an unknown outcome or as unsent.
func TestCoalescerLostNodeKicksRefresh(t *testing.T) {
	ctx := ctxT(t)
	// A cluster of one node of its own, to be killed (the store refreshes
	// its map in cluster mode only).
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	if _, err := testenv.Do(ctx, n.Addr, "CLUSTER", "ADDSLOTSRANGE", "0", "16383"); err != nil {
		t.Fatal(err)
	}
	for {
		info, err := testenv.Do(ctx, n.Addr, "CLUSTER", "INFO")
		if err == nil && strings.Contains(info, "cluster_state:ok") {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("one-node cluster not ok: %v %s", err, info)
		case <-time.After(20 * time.Millisecond):
		}
	}
	// A refresh period longer than the test, so only a kick refreshes.
	s, err := New(ctx, Config{Addrs: []string{n.Addr}, Timeout: 500 * time.Millisecond, BatchWindow: time.Millisecond, TopologyRefresh: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	sub := keyspace.SubKey("kick", keyspace.ColdLabel)
	if _, _, err := s.IncrByMarked(ctx, sub, keyspace.MarkKey("kick"), 1, time.Time{}); err != nil {
		t.Fatal(err)
	}
	before := s.refreshStarted.Load()
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.IncrByMarked(ctx, sub, keyspace.MarkKey("kick"), 1, time.Time{}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("IncrByMarked on a killed node: %v, want ErrUnavailable", err)
	}
	for s.refreshStarted.Load() == before {
		select {
		case <-ctx.Done():
			t.Fatal("no topology refresh after the batch's connection was lost")
		case <-time.After(10 * time.Millisecond):
		}
	}
}
