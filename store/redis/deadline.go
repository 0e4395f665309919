package redis

import (
	"context"
	"sync"
	"sync/atomic"
	"time"
)

// deadlineSlices is how many slices of Config.Timeout one shared round
// context serves: a round that starts while the context is current gets a
// deadline between Timeout and Timeout·(1+1/deadlineSlices) away.
const deadlineSlices = 16

// deadlines hands out shared round contexts for callers whose context
// cannot be cancelled (context.Background, context.TODO, their values,
// context.WithoutCancel). A context.WithTimeout per round costs a timer
// and four allocations, more than the rest of an INCRBY; instead, every
// round that starts within one slice of time shares one context whose
// deadline is at least Timeout after the start of each of them. The
// context is derived from context.Background, so it carries no values;
// the store reads none.
type deadlines struct {
	timeout time.Duration // the least a round gets
	slice   time.Duration // how long one context is handed out
	cur     atomic.Pointer[sharedDeadline]
	mu      sync.Mutex // serialises replacing cur
}

// sharedDeadline is one shared round context.
type sharedDeadline struct {
	ctx    context.Context
	cancel context.CancelFunc // kept for vet; the deadline ends the context
	until  time.Time          // hand out until then (monotonic)
}

func newDeadlines(timeout time.Duration) *deadlines {
	return &deadlines{timeout: timeout, slice: max(timeout/deadlineSlices, time.Millisecond)}
}

// get returns a context that ends no sooner than timeout from now.
func (d *deadlines) get() context.Context {
	now := time.Now()
	if sd := d.cur.Load(); sd != nil && now.Before(sd.until) {
		return sd.ctx
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	now = time.Now()
	if sd := d.cur.Load(); sd != nil && now.Before(sd.until) {
		return sd.ctx
	}
	until := now.Add(d.slice)
	ctx, cancel := context.WithDeadline(context.Background(), until.Add(d.timeout))
	d.cur.Store(&sharedDeadline{ctx: ctx, cancel: cancel, until: until})
	return ctx
}

// roundCtx returns the context of one round under ctx: bounded by
// Config.Timeout, and by ctx. The cancel func is nil when there is nothing
// to release: ctx cannot be cancelled (a shared context serves), or ctx
// already ends within Timeout (it serves as it is).
func (s *Store) roundCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	if ctx.Done() == nil {
		return s.deadlines.get(), nil
	}
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= s.cfg.Timeout {
		return ctx, nil
	}
	return context.WithTimeout(ctx, s.cfg.Timeout)
}
