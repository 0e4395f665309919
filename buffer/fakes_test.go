package buffer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/hotcount/hotcount/clock"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// fault is what fakeSink does with one call.
type fault int

const (
	faultNone      fault = iota
	faultRefuse          // return an error, apply nothing
	faultLostReply       // apply everything, then return an error
	faultOpErr           // apply nothing, every result has ErrUnavailable
	faultOpLost          // apply everything, every result has ErrUnavailable
	faultOpNoReply       // apply everything, every result has ErrNoReply (as a store reports a lost reply)
)

// fakeSink is an in-memory sink that dedups tokens and writer sequences
// the way the Redis backend does: the token (or sequence) is checked
// first, then the value, and a rejected op leaves nothing behind.
type fakeSink struct {
	mu       sync.Mutex
	vals     map[string]int64  // sub-key → value
	tokens   map[string]string // token key → sub-key it guarded
	seqs     map[string]uint64 // sequence hash + writer → last applied
	calls    [][]store.IncrOp
	faults   []fault         // faults[i] applies to call i; later calls succeed
	always   fault           // fault for calls past len(faults)
	reject   map[string]bool // sub-keys that answer rejectAs
	rejectAs error           // store.ErrNotInteger unless set
	gate     chan struct{}   // when set, each call waits for a receive
	// cancelNoReply: a call whose context ends while it waits at the gate
	// answers ErrNoReply for every op, applying none (as a command that
	// was queued on a connection when its caller gave up)
	cancelNoReply bool
	entered       chan struct{} // when set, receives before each call waits on gate
	onCall        func(n int)   // called (without the lock) after call n
	notify        chan int      // receives the call number after each call
	deadline      bool          // every call had a deadline
}

func newFakeSink() *fakeSink {
	return &fakeSink{
		vals:     map[string]int64{},
		tokens:   map[string]string{},
		seqs:     map[string]uint64{},
		reject:   map[string]bool{},
		notify:   make(chan int, 1000),
		deadline: true,
	}
}

var (
	errFakeDown    = fmt.Errorf("fake: connection reset: %w", store.ErrUnavailable)
	errFakeNoReply = fmt.Errorf("fake: %w: %w: i/o timeout", store.ErrUnavailable, store.ErrNoReply)
)

func (f *fakeSink) IncrMulti(ctx context.Context, ops []store.IncrOp) ([]store.IncrResult, error) {
	if f.entered != nil {
		f.entered <- struct{}{}
	}
	if f.gate != nil {
		select {
		case <-f.gate:
		case <-ctx.Done():
			if f.cancelNoReply {
				res := make([]store.IncrResult, len(ops))
				for i := range res {
					res[i].Err = fmt.Errorf("%w: %w", errFakeNoReply, ctx.Err())
				}
				return res, nil
			}
			return nil, fmt.Errorf("%w: %w", store.ErrUnavailable, ctx.Err())
		}
	}
	f.mu.Lock()
	n := len(f.calls)
	f.calls = append(f.calls, append([]store.IncrOp(nil), ops...))
	if _, ok := ctx.Deadline(); !ok {
		f.deadline = false
	}
	fl := f.always
	if n < len(f.faults) {
		fl = f.faults[n]
	}
	var res []store.IncrResult
	var err error
	switch fl {
	case faultRefuse:
		err = errFakeDown
	case faultOpErr:
		res = make([]store.IncrResult, len(ops))
		for i := range res {
			res[i].Err = errFakeDown
		}
	default:
		res = f.applyLocked(ops)
		switch fl {
		case faultLostReply:
			res, err = nil, errFakeDown
		case faultOpLost:
			for i := range res {
				res[i] = store.IncrResult{Err: errFakeDown}
			}
		case faultOpNoReply:
			for i := range res {
				res[i] = store.IncrResult{Err: errFakeNoReply}
			}
		}
	}
	f.mu.Unlock()
	if f.onCall != nil {
		f.onCall(n)
	}
	f.notify <- n
	return res, err
}

func (f *fakeSink) applyLocked(ops []store.IncrOp) []store.IncrResult {
	res := make([]store.IncrResult, len(ops))
	for i, o := range ops {
		if o.SeqKey != "" {
			if keyspace.Slot(o.SeqKey) != keyspace.Slot(o.Key) || o.Writer == "" || o.Seq == 0 {
				res[i].Err = errors.New("fake: bad sequenced op")
				continue
			}
			if o.Seq <= f.seqs[o.SeqKey+" "+o.Writer] {
				continue // Applied false, no error
			}
		}
		if o.TokenKey != "" {
			if keyspace.Slot(o.TokenKey) != keyspace.Slot(o.Key) {
				res[i].Err = errors.New("fake: CROSSSLOT token key")
				continue
			}
			if _, used := f.tokens[o.TokenKey]; used {
				continue // Applied false, no error
			}
		}
		if f.reject[o.Key] {
			as := f.rejectAs
			if as == nil {
				as = store.ErrNotInteger
			}
			res[i].Err = fmt.Errorf("fake: %s: %w", o.Key, as)
			continue
		}
		if o.TokenKey != "" {
			f.tokens[o.TokenKey] = o.Key
		}
		if o.SeqKey != "" {
			f.seqs[o.SeqKey+" "+o.Writer] = o.Seq
		}
		f.vals[o.Key] += o.Delta
		res[i] = store.IncrResult{Applied: true, Value: f.vals[o.Key]}
	}
	return res
}

// total sums the sub-counters of key.
func (f *fakeSink) total(key string) int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	var sum int64
	for sub, v := range f.vals {
		if k, _, ok := keyspace.ParseSubKey(sub); ok && k == key {
			sum += v
		}
	}
	return sum
}

func (f *fakeSink) callCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

func (f *fakeSink) call(i int) []store.IncrOp {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[i]
}

func (f *fakeSink) setAlways(fl fault) {
	f.mu.Lock()
	f.always = fl
	f.mu.Unlock()
}

func (f *fakeSink) setReject(sub string, on bool) {
	f.mu.Lock()
	f.reject[sub] = on
	f.mu.Unlock()
}

// fakeClock is a Clock that moves only when Advance is called.
type fakeClock struct {
	mu      sync.Mutex
	now     time.Time
	tickers []*fakeTicker
	afters  []fakeAfter
	waiting chan struct{} // signalled when After is called
}

type fakeAfter struct {
	at time.Time
	ch chan time.Time
}

type fakeTicker struct {
	c       chan time.Time
	every   time.Duration
	next    time.Time
	stopped bool
}

func newFakeClock() *fakeClock {
	return &fakeClock{now: time.Unix(1_700_000_000, 0), waiting: make(chan struct{}, 100)}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) NewTicker(d time.Duration) clock.Ticker {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := &fakeTicker{c: make(chan time.Time, 1), every: d, next: c.now.Add(d)}
	c.tickers = append(c.tickers, t)
	return &fakeTickerHandle{c: c, t: t}
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.mu.Lock()
	ch := make(chan time.Time, 1)
	c.afters = append(c.afters, fakeAfter{c.now.Add(d), ch})
	c.mu.Unlock()
	c.waiting <- struct{}{}
	return ch
}

// Advance moves time forward, firing tickers (dropping ticks a slow reader
// missed, like time.Ticker) and timers that came due.
func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
	for _, t := range c.tickers {
		for !t.stopped && !t.next.After(c.now) {
			select {
			case t.c <- t.next:
			default:
			}
			t.next = t.next.Add(t.every)
		}
	}
	kept := c.afters[:0]
	for _, a := range c.afters {
		if a.at.After(c.now) {
			kept = append(kept, a)
			continue
		}
		a.ch <- c.now
	}
	c.afters = kept
}

type fakeTickerHandle struct {
	c *fakeClock
	t *fakeTicker
}

func (h *fakeTickerHandle) C() <-chan time.Time { return h.t.c }
func (h *fakeTickerHandle) Stop() {
	h.c.mu.Lock()
	h.t.stopped = true
	h.c.mu.Unlock()
}

// seqRand returns 1, 2, 3, ... so label choice and tokens are predictable.
func seqRand() func() uint64 {
	var mu sync.Mutex
	var n uint64
	return func() uint64 {
		mu.Lock()
		defer mu.Unlock()
		n++
		return n
	}
}
