package redis

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// The coalescer sends the increments of IncrByMarked (Config.BatchWindow)
// of all callers together.
//
// A proxy in front of a long tail of counters sends one INCRBY (with the
// EXISTS of its record mark, while the counter is not known) per cold
// increment, for callers that each wait for their reply before they send
// again. Every node pays a wake-up, a read and a write for each batch it
// receives, and that costs it several times the commands themselves, so
// what a node costs per increment is set by how many increments a batch
// carries. When each connection's writer waits on its own (rueidis's
// MaxFlushDelay, Config.FlushDelay), the nodes' batches drift apart: a
// caller answered by one node misses the next write to another, and a
// batch carries about half the callers that could be in it. The writer's
// wait is also never shorter than the Go runtime's timer resolution when
// the process is idle, about a millisecond on Linux, whatever is asked.
//
// The coalescer gathers the calls itself and sends each batch as one
// DoMulti, which the cluster client splits into one pipelined write per
// node, all at the same moment, on connections of their own that write at
// once. The replies come back together, and the callers' next increments
// meet in the next batch. A batch goes when nothing is in flight and as
// many calls wait as the most callers seen at once (queued and in flight)
// since the window last ran out: every caller of a closed loop is back.
// It also goes once the window has passed since the last batch, and then
// the count of callers starts over from those at hand, as callers that
// leave would otherwise hold the rest. A lone caller is never held.
type coalescer struct {
	s      *Store
	client rueidis.Client // connections that write at once
	window time.Duration
	send   func(calls []*markedCall) // sets the answers (c.run; tests replace it)

	mu       sync.Mutex
	queue    []*markedCall
	last     time.Time // when the last batch went out
	inflight int       // calls sent and not yet answered
	est      int       // most callers seen at once since the window last ran out
	timer    *time.Timer
	closed   bool
	wg       sync.WaitGroup // batches in flight
}

// markedCall is one IncrByMarked waiting for its batch.
type markedCall struct {
	sub, mark string
	delta     int64
	at        time.Time

	v      int64
	marked bool
	err    error
	sent   bool          // taken into a batch (under coalescer.mu)
	done   chan struct{} // closed when v, marked and err are set
}

func newCoalescer(s *Store, client rueidis.Client, window time.Duration) *coalescer {
	c := &coalescer{s: s, client: client, window: window}
	c.send = c.run
	return c
}

// do queues the call and waits for its result. A call whose ctx ends while
// it waits unsent returns without having been written; one whose ctx ends
// after its batch went out returns store.ErrNoReply (it may have run).
func (c *coalescer) do(ctx context.Context, call *markedCall) (int64, bool, error) {
	call.done = make(chan struct{})
	if !c.add(call) {
		return 0, false, store.ErrClosed
	}
	select {
	case <-call.done:
		return call.v, call.marked, call.err
	case <-ctx.Done():
	}
	c.mu.Lock()
	sent := call.sent
	if !sent {
		for i, q := range c.queue {
			if q == call {
				c.queue = append(c.queue[:i], c.queue[i+1:]...)
				break
			}
		}
	}
	c.mu.Unlock()
	if !sent {
		return 0, false, fmt.Errorf("%w: %w", store.ErrUnavailable, ctx.Err()) // never written
	}
	select {
	case <-call.done: // answered meanwhile
		return call.v, call.marked, call.err
	default:
	}
	return 0, false, fmt.Errorf("%w: %w: %w", store.ErrUnavailable, store.ErrNoReply, ctx.Err())
}

// add queues call and sends the queue if it is due. It reports false once
// the coalescer is closed.
func (c *coalescer) add(call *markedCall) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return false
	}
	c.queue = append(c.queue, call)
	c.est = max(c.est, len(c.queue)+c.inflight)
	c.maybeSendLocked()
	return true
}

// maybeSendLocked sends the queue when it is due: nothing is in flight
// and every caller seen at once is back, or the window has passed since
// the last batch. Otherwise it makes sure a timer will send it.
func (c *coalescer) maybeSendLocked() {
	if len(c.queue) == 0 || c.closed {
		return
	}
	wait := c.window - time.Since(c.last)
	ready := c.inflight == 0 && len(c.queue) >= c.est
	if !ready && wait > 0 {
		if c.timer == nil {
			c.timer = time.AfterFunc(wait, c.fire)
		}
		return
	}
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	calls := c.queue
	c.queue = nil
	if !ready {
		c.est = len(calls) + c.inflight // some callers left: count again
	}
	c.last = time.Now()
	c.inflight += len(calls)
	for _, call := range calls {
		call.sent = true
	}
	c.wg.Add(1)
	go func() {
		defer c.wg.Done()
		c.send(calls)
		// Out of flight before the callers learn it, so that a caller's
		// next call never counts its last one as still in flight.
		c.mu.Lock()
		c.inflight -= len(calls)
		c.maybeSendLocked()
		c.mu.Unlock()
		for _, call := range calls {
			close(call.done)
		}
	}()
}

func (c *coalescer) fire() {
	c.mu.Lock()
	c.timer = nil
	c.maybeSendLocked()
	c.mu.Unlock()
}

// close fails the calls that wait unsent with store.ErrClosed, closes the
// connections and waits for the batches in flight.
func (c *coalescer) close() {
	c.mu.Lock()
	c.closed = true
	if c.timer != nil {
		c.timer.Stop()
		c.timer = nil
	}
	queue := c.queue
	c.queue = nil
	c.mu.Unlock()
	for _, call := range queue {
		call.err = store.ErrClosed
		close(call.done)
	}
	if c.client != nil {
		c.client.Close()
	}
	c.wg.Wait()
}

// run sends calls as one batch (per call: EXISTS of the mark when there
// is one, INCRBY, and PEXPIREAT … NX with a deadline), which the cluster
// client splits into one pipelined write per node, all at once, and sets
// each call's answer.
func (c *coalescer) run(calls []*markedCall) {
	s := c.s
	first := make([]int, len(calls)+1) // index of each call's first command
	for i, call := range calls {
		first[i+1] = first[i] + call.commands()
	}
	cmds := make(rueidis.Commands, 0, first[len(calls)])
	b := c.client.B()
	st := s.state.Load()
	for _, call := range calls {
		for j := range call.commands() {
			cmds = append(cmds, call.build(b, j))
		}
		st.counters[st.topo.Owner[keyspace.Slot(call.sub)]].count(call.commands(), false)
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.Timeout)
	res := c.client.DoMulti(ctx, cmds...)
	cancel()
	kicked := false
	for _, r := range res {
		// The batches' client follows MOVED and ASK itself; the store's
		// own map, which its other calls use, is refreshed as they would
		// after a redirect or a lost connection.
		if a := s.classify(r.Error(), false); !kicked && (a == actMoved || a == actConnErr) {
			s.kickRefresh()
			kicked = true
		}
	}
	for i, call := range calls {
		call.v, call.marked, call.err = s.markedResult(call.sub, call.mark != "", res[first[i]:first[i+1]])
	}
}

// commands is how many commands the call sends.
func (c *markedCall) commands() int {
	n := 1
	if c.mark != "" {
		n++
	}
	if !c.at.IsZero() {
		n++
	}
	return n
}

// build makes the call's command i: EXISTS of the mark (when there is
// one), INCRBY, PEXPIREAT … NX (with a deadline).
func (c *markedCall) build(b rueidis.Builder, i int) rueidis.Completed {
	if c.mark == "" {
		i++
	}
	switch i {
	case 0:
		return b.Exists().Key(c.mark).Build()
	case 1:
		return b.Incrby().Key(c.sub).Increment(c.delta).Build()
	}
	return b.Pexpireat().Key(c.sub).MillisecondsTimestamp(c.at.UnixMilli()).Nx().Build()
}
