package autoscale

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/internal/engine"
)

// rebalancer runs the automatic re-placement loop.
type rebalancer struct {
	eng        *engine.Engine
	timeout    time.Duration
	ctx        context.Context // cancelled by close, so a fold in progress stops (its journal resumes it)
	cancel     context.CancelFunc
	stop       chan struct{}
	done       sync.WaitGroup
	checks     atomic.Int64 // looks at the slot map
	collisions atomic.Int64 // found by the last complete pass
	moved      atomic.Int64 // counters rebalanced
	failed     atomic.Int64 // rebalances that failed
}

func startRebalancer(cfg Config) *rebalancer {
	r := &rebalancer{eng: cfg.Engine, timeout: cfg.Timeout, stop: make(chan struct{})}
	r.ctx, r.cancel = context.WithCancel(context.Background())
	every := cfg.RebalanceCheck
	if every <= 0 {
		every = DefaultRebalanceCheck
	}
	r.done.Add(1)
	go r.loop(cfg.Clock.NewTicker(every))
	return r
}

func (r *rebalancer) loop(t clock.Ticker) {
	defer r.done.Done()
	defer t.Stop()
	var seen uint64
	for {
		select {
		case <-r.stop:
			return
		case <-t.C():
		}
		r.checks.Add(1)
		ctx, cancel := context.WithTimeout(r.ctx, r.timeout)
		topo, err := r.eng.Store().Topology(ctx)
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
	m := r.eng.Meta()
	ok := true
	var found int64
	defer func() {
		if ok {
			r.collisions.Store(found)
		}
	}()
	for _, key := range m.Known() {
		select {
		case <-r.stop:
			return false
		default:
		}
		ctx, cancel := context.WithTimeout(r.ctx, r.timeout)
		n, err := m.Collisions(ctx, key)
		cancel()
		if err != nil {
			ok = false
			continue
		}
		found += int64(n)
		if n == 0 {
			continue
		}
		// A fold waits out the metadata TTL: give it room.
		ctx, cancel = context.WithTimeout(r.ctx, time.Minute)
		changed, err := r.eng.Rebalance(ctx, key)
		cancel()
		switch {
		case err != nil:
			r.failed.Add(1)
			ok = false
		case changed:
			r.moved.Add(1)
		}
	}
	return ok
}

func (r *rebalancer) close() {
	close(r.stop)
	r.cancel()
	r.done.Wait()
}
