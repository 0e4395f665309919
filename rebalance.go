package hotcount

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Automatic re-placement. A slot migration can move a sub-counter onto a
// primary that already holds another sub-counter of the same counter; its
// writes then pile up on one node again. With Config.AutoRebalance a
// goroutine looks at the store's slot map every RebalanceCheck and, when its
// epoch changed, checks every counter this process has used recently
// (meta.Manager.Known) and rebalances those with collisions, one at a time.

// rebalancer runs the automatic re-placement loop.
type rebalancer struct {
	c      *Client
	ctx    context.Context // cancelled by close, so a fold in progress stops (its journal resumes it)
	cancel context.CancelFunc
	stop   chan struct{}
	done   sync.WaitGroup
	moved  atomic.Int64 // counters rebalanced
	failed atomic.Int64 // rebalances that failed
}

func (c *Client) startRebalancer() error {
	if !c.cfg.AutoRebalance {
		return nil
	}
	if c.meta == nil {
		return fmt.Errorf("%w: AutoRebalance needs a store that keeps metadata", ErrConfig)
	}
	r := &rebalancer{c: c, stop: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	r.done.Add(1)
	go r.loop()
	c.rebal = r
	return nil
}

func (r *rebalancer) loop() {
	defer r.done.Done()
	t := time.NewTicker(r.c.cfg.RebalanceCheck)
	defer t.Stop()
	var seen uint64
	for {
		select {
		case <-r.stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.c.cfg.Timeout)
		topo, err := r.c.st.Topology(ctx)
		cancel()
		if err != nil || topo.Epoch == seen {
			continue
		}
		if r.pass() {
			seen = topo.Epoch
		}
	}
}

// pass checks every known counter; it reports whether all checks ran.
func (r *rebalancer) pass() bool {
	ok := true
	for _, key := range r.c.meta.Known() {
		select {
		case <-r.stop:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.c.cfg.Timeout)
		n, err := r.c.meta.Collisions(ctx, key)
		cancel()
		if err != nil {
			ok = false
			continue
		}
		if n == 0 {
			continue
		}
		// A fold waits out the metadata TTL: give it room.
		ctx, cancel = context.WithTimeout(r.ctx, time.Minute)
		changed, err := r.c.meta.Rebalance(ctx, key)
		cancel()
		switch {
		case err != nil:
			r.failed.Add(1)
			ok = false
		case changed:
			r.moved.Add(1)
			r.c.cache.drop(key)
		}
	}
	return ok
}

func (r *rebalancer) close() {
	close(r.stop)
	r.cancel()
	r.done.Wait()
}

// AutoRebalances returns how many counters the automatic re-placement moved
// back onto distinct primaries, and how many attempts failed (they are
// retried at the next check).
func (c *Client) AutoRebalances() (moved, failed int64) {
	if c.rebal == nil {
		return 0, 0
	}
	return c.rebal.moved.Load(), c.rebal.failed.Load()
}
