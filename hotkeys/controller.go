package hotkeys

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/hotcount/hotcount/clock"
)

// Controller defaults, used when a ControllerConfig field is zero.
const (
	// DefaultInterval is the evaluation period.
	DefaultInterval = 500 * time.Millisecond
	// DefaultTopN is the number of top keys evaluated per period.
	DefaultTopN = 16
	// DefaultHistory is the number of decisions kept.
	DefaultHistory = 256
	// DefaultResizeTimeout bounds one resize.
	DefaultResizeTimeout = 2 * time.Minute
)

// Resizer changes the number of sub-counters of a counter. A resize to the
// current N is a no-op. meta.Manager implements it.
type Resizer interface {
	// Resize makes key have n sub-counters, returning when that is done.
	Resize(ctx context.Context, key string, n int) error
}

// Syncer is implemented by a RateSource that exchanges counts with other
// processes (Shared). A Controller calls Sync once per evaluation, with
// the keys it is about to evaluate, before it asks for their rates.
type Syncer interface {
	// Sync publishes this process's counts of keys and fetches the
	// cluster's.
	Sync(ctx context.Context, keys []string) error
}

// ControllerConfig configures a Controller. Sketch and Resizer are
// required; every other zero field means its documented default.
type ControllerConfig struct {
	// Sketch supplies the candidate keys (its Top).
	Sketch *Sketch
	// Rates estimates cluster-wide rates; nil means the Sketch itself
	// (this process's rates: right for one process, see Scaled and
	// Shared for more).
	Rates RateSource
	// Resizer applies decisions.
	Resizer Resizer
	// Policy decides N.
	Policy Policy
	// Size returns key's current N (e.g. the write-set size from
	// meta.Manager.Labels). nil means the N this Controller last set, or
	// BaseN for a key it has not resized.
	Size func(ctx context.Context, key string) (int, error)
	// Pinned reports whether key's N was set by hand: the controller
	// leaves such a key alone. nil means no key is.
	Pinned func(ctx context.Context, key string) (bool, error)
	// BaseN returns key's configured N; keys never shrink below it (nor
	// below Policy.MinN), but to one when HotRate sends them back cold.
	// nil means Policy.MinN.
	BaseN func(key string) int
	// HotRate returns key's hot rate (see Policy.HotRate); nil means
	// Policy.HotRate for every key.
	HotRate func(key string) float64
	// Interval is the evaluation period; 0 means DefaultInterval.
	Interval time.Duration
	// TopN is the number of top keys evaluated per period; 0 means
	// DefaultTopN. Keys above their BaseN are evaluated as well until
	// they are back to it.
	TopN int
	// History is the number of decisions Decisions keeps; 0 means
	// DefaultHistory.
	History int
	// ResizeTimeout bounds one Resize call (a shrink waits out the
	// metadata TTL); 0 means DefaultResizeTimeout.
	ResizeTimeout time.Duration
	// Clock is the time source; nil means the system clock.
	Clock clock.Clock
	// OnDecision, when set, is called with every grow or shrink decision
	// and every failed resize (for logs and metrics), possibly from
	// several goroutines at once. It must not call the Controller.
	OnDecision func(Decision)
}

// HotKey is one hot counter: what this process measured of it and, with
// automatic N, the controller's view. It is the one hot-key report of
// hotcount; the library, the HTTP API and the dashboard all use it.
type HotKey struct {
	// Key is the counter key.
	Key string `json:"key"`
	// Arrivals is increments accepted per second by this process.
	Arrivals float64 `json:"arrivals"`
	// Writes is cache writes per second sent by this process (below
	// Arrivals for buffered counters).
	Writes float64 `json:"writes"`
	// Rate is the estimated cluster-wide cache writes per second that
	// automatic N sizes the counter by (0 without automatic N).
	Rate float64 `json:"rate"`
	// N is the key's number of sub-counters (0 when unknown).
	N int `json:"n"`
	// Resizing is true while a resize of the key is in flight.
	Resizing bool `json:"resizing,omitempty"`
	// Reason explains the last decision about the key, if any.
	Reason string `json:"reason,omitempty"`
}

// Controller evaluates the hottest keys every Interval and resizes them as
// its Policy decides: asynchronously, one resize per key at a time.
type Controller struct {
	cfg    ControllerConfig
	policy Policy
	rates  RateSource

	evalMu sync.Mutex           // serializes Evaluate
	states map[string]*keyState // guarded by evalMu

	mu       sync.Mutex
	closed   bool
	inflight map[string]bool
	known    map[string]int // N set by a finished resize (Size == nil)
	history  []Decision     // ring of the last History decisions
	next     int            // next slot of history once full
	hot      []HotKey

	base      context.Context
	cancel    context.CancelFunc
	wg        sync.WaitGroup // the loop and resizes
	done      chan struct{}
	closeOnce sync.Once
}

type keyState struct {
	KeyState
	managed bool // N was above base: keep evaluating until it is back
	n       int  // N at the last evaluation
}

// NewController validates cfg, copies it, and starts the evaluation loop.
// The caller's ControllerConfig is not modified. Close stops the loop.
func NewController(cfg ControllerConfig) (*Controller, error) {
	if cfg.Sketch == nil || cfg.Resizer == nil {
		return nil, fmt.Errorf("%w: Controller needs a Sketch and a Resizer", ErrConfig)
	}
	p, err := cfg.Policy.withDefaults()
	if err != nil {
		return nil, err
	}
	if cfg.Interval < 0 || cfg.TopN < 0 || cfg.History < 0 || cfg.ResizeTimeout < 0 {
		return nil, fmt.Errorf("%w: negative Interval, TopN, History or ResizeTimeout", ErrConfig)
	}
	if cfg.Interval == 0 {
		cfg.Interval = DefaultInterval
	}
	if cfg.TopN == 0 {
		cfg.TopN = DefaultTopN
	}
	if cfg.History == 0 {
		cfg.History = DefaultHistory
	}
	if cfg.ResizeTimeout == 0 {
		cfg.ResizeTimeout = DefaultResizeTimeout
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.Real()
	}
	c := &Controller{
		cfg:      cfg,
		policy:   p,
		rates:    cfg.Rates,
		states:   map[string]*keyState{},
		inflight: map[string]bool{},
		known:    map[string]int{},
		done:     make(chan struct{}),
	}
	if c.rates == nil {
		c.rates = cfg.Sketch
	}
	c.base, c.cancel = context.WithCancel(context.Background())
	t := cfg.Clock.NewTicker(cfg.Interval)
	c.wg.Add(1)
	go c.loop(t)
	go func() {
		c.wg.Wait()
		close(c.done)
	}()
	return c, nil
}

func (c *Controller) loop(t clock.Ticker) {
	defer c.wg.Done()
	defer t.Stop()
	for {
		select {
		case <-c.base.Done():
			return
		case <-t.C():
			c.Evaluate(c.base)
		}
	}
}

// Evaluate runs one evaluation now: it takes the top keys, asks the Policy
// about each, starts the resizes it decides, and returns the grow and
// shrink decisions. The loop calls it every Interval.
func (c *Controller) Evaluate(ctx context.Context) []Decision {
	c.evalMu.Lock()
	defer c.evalMu.Unlock()
	top := c.cfg.Sketch.Top(c.cfg.TopN)
	keys := make([]string, 0, len(top)+len(c.states))
	inTop := make(map[string]bool, len(top))
	for _, kr := range top {
		keys = append(keys, kr.Key)
		inTop[kr.Key] = true
	}
	for k, st := range c.states {
		if st.managed && !inTop[k] {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	if s, ok := c.rates.(Syncer); ok {
		// A failed sync leaves the source with its last counts: the
		// evaluation goes on with them.
		_ = s.Sync(ctx, keys)
	}
	now := c.cfg.Clock.Now()
	var hot []HotKey
	var out []Decision
	for _, key := range keys {
		if ctx.Err() != nil {
			break
		}
		rate := c.rates.Rate(key)
		c.mu.Lock()
		busy := c.inflight[key]
		c.mu.Unlock()
		if busy {
			h := HotKey{Key: key, Rate: rate, Resizing: true, Reason: "resize in flight"}
			if st := c.states[key]; st != nil {
				h.N = st.n
			}
			hot = append(hot, h)
			continue
		}
		if c.cfg.Pinned != nil {
			if pinned, err := c.cfg.Pinned(ctx, key); err != nil || pinned {
				reason := "N pinned by a manual resize"
				if err != nil {
					reason = "pinned or not: " + err.Error()
				}
				hot = append(hot, HotKey{Key: key, Rate: rate, Reason: reason})
				delete(c.states, key)
				continue
			}
		}
		base := c.baseN(key)
		cur, err := c.size(ctx, key, base)
		if err != nil {
			hot = append(hot, HotKey{Key: key, Rate: rate, Reason: "current N unknown: " + err.Error()})
			continue
		}
		st := c.states[key]
		if st == nil {
			st = &keyState{}
			c.states[key] = st
		}
		p := c.policy
		p.MinN = min(max(p.MinN, base), p.MaxN)
		if c.cfg.HotRate != nil {
			p.HotRate = c.cfg.HotRate(key)
		}
		d := p.Decide(now, key, rate, cur, &st.KeyState)
		st.n = cur
		st.managed = cur > p.MinN || (p.HotRate > 0 && cur > 1) || d.Action == ActionGrow
		h := HotKey{Key: key, Rate: rate, N: cur, Reason: d.Reason}
		if d.Action != ActionNone && c.start(d) {
			h.Resizing = true
			out = append(out, d)
		}
		hot = append(hot, h)
	}
	for k, st := range c.states {
		if !inTop[k] && !st.managed {
			delete(c.states, k)
		}
	}
	slices.SortStableFunc(hot, func(a, b HotKey) int {
		switch {
		case a.Rate > b.Rate:
			return -1
		case a.Rate < b.Rate:
			return 1
		}
		return 0
	})
	c.mu.Lock()
	c.hot = hot
	c.mu.Unlock()
	return out
}

func (c *Controller) baseN(key string) int {
	if c.cfg.BaseN == nil {
		return c.policy.MinN
	}
	return max(c.cfg.BaseN(key), 1)
}

func (c *Controller) size(ctx context.Context, key string, base int) (int, error) {
	if c.cfg.Size != nil {
		return c.cfg.Size(ctx, key)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if n, ok := c.known[key]; ok {
		return n, nil
	}
	return base, nil
}

// start records d and runs its resize in a goroutine, unless the
// Controller is closed or key already has one in flight.
func (c *Controller) start(d Decision) bool {
	c.mu.Lock()
	if c.closed || c.inflight[d.Key] {
		c.mu.Unlock()
		return false
	}
	c.inflight[d.Key] = true
	c.recordLocked(d)
	c.wg.Add(1)
	c.mu.Unlock()
	if c.cfg.OnDecision != nil {
		c.cfg.OnDecision(d)
	}
	go func() {
		defer c.wg.Done()
		ctx, cancel := context.WithTimeout(c.base, c.cfg.ResizeTimeout)
		err := c.cfg.Resizer.Resize(ctx, d.Key, d.To)
		cancel()
		if err != nil {
			failed := d
			failed.At = c.cfg.Clock.Now()
			failed.Err = err.Error()
			failed.Reason = fmt.Sprintf("%s to %d failed", d.Action, d.To)
			if c.cfg.OnDecision != nil {
				c.cfg.OnDecision(failed)
			}
			c.mu.Lock()
			c.recordLocked(failed)
		} else {
			c.mu.Lock()
			c.known[d.Key] = d.To
		}
		delete(c.inflight, d.Key)
		c.mu.Unlock()
	}()
	return true
}

func (c *Controller) recordLocked(d Decision) {
	if len(c.history) < c.cfg.History {
		c.history = append(c.history, d)
		return
	}
	c.history[c.next] = d
	c.next = (c.next + 1) % len(c.history)
}

// Decisions returns the last History grow and shrink decisions and failed
// resizes, oldest first.
func (c *Controller) Decisions() []Decision {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]Decision, 0, len(c.history))
	out = append(out, c.history[c.next:]...)
	return append(out, c.history[:c.next]...)
}

// Hot returns the keys of the last evaluation, hottest first.
func (c *Controller) Hot() []HotKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.hot)
}

// ErrCloseTimeout is returned by Close when ctx ended before the
// in-flight resizes returned.
var ErrCloseTimeout = errors.New("hotkeys: resizes still running at close")

// Close stops the loop, cancels in-flight resizes (a resize interrupted by
// cancellation is resumed by the next one, see meta) and waits for them
// until ctx ends. It is idempotent.
func (c *Controller) Close(ctx context.Context) error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		c.closed = true
		c.mu.Unlock()
		c.cancel()
	})
	select {
	case <-c.done:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w: %w", ErrCloseTimeout, ctx.Err())
	}
}
