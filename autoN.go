package hotcount

import (
	"context"
	"fmt"

	"github.com/hotcount/hotcount/hotkeys"
)

// Automatic N. Every Client keeps a heavy-hitters sketch of the increments
// it sends to the cache unbuffered (buffered keys reach the cache only a
// few times a second per process, so they never need more sub-counters for
// their write rate). With Config.AutoN a controller estimates each hot
// key's cluster-wide write rate (every process adds what it saw to a shared
// counter in the cache), grows N with the safe grow when the rate per
// sub-counter passes AutoNBudget, and folds N back once the key has stayed
// cool for the hysteresis period.

// startHotKeys creates the sketch, and the controller when AutoN is on
// and the store keeps metadata.
func (c *Client) startHotKeys() error {
	sk, err := hotkeys.NewSketch(hotkeys.SketchConfig{Now: c.now})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c.sketch = sk
	if !c.cfg.AutoN {
		return nil
	}
	if c.meta == nil {
		return fmt.Errorf("%w: AutoN needs a store that keeps metadata", ErrConfig)
	}
	shared, err := hotkeys.NewShared(hotkeys.SharedConfig{Store: c.st, Local: sk, Now: c.now})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	c.auto, err = hotkeys.NewController(hotkeys.ControllerConfig{
		Sketch:  sk,
		Rates:   shared,
		Resizer: c.meta,
		Policy:  hotkeys.Policy{Budget: c.cfg.AutoNBudget, MaxN: c.cfg.AutoNMaxN, Hysteresis: c.cfg.AutoNHysteresis},
		Size: func(ctx context.Context, key string) (int, error) {
			w, _, err := c.meta.Labels(ctx, key)
			return len(w), err
		},
		BaseN: func(key string) int { return c.cfg.namespace(key).N },
		OnDecision: func(d hotkeys.Decision) {
			c.cache.drop(d.Key)
		},
	})
	if err != nil {
		return fmt.Errorf("%w: %v", ErrConfig, err)
	}
	return nil
}

// HotKeys returns up to n of the keys this process writes to the cache
// most, with their estimated rates and N; with AutoN, the controller's
// view (cluster-wide rates, the reason of its last decision).
func (c *Client) HotKeys(ctx context.Context, n int) []hotkeys.HotKey {
	if c.auto != nil {
		hot := c.auto.Hot()
		if len(hot) > n {
			hot = hot[:n]
		}
		return hot
	}
	top := c.sketch.Top(n)
	out := make([]hotkeys.HotKey, 0, len(top))
	for _, kr := range top {
		hk := hotkeys.HotKey{Key: kr.Key, Rate: kr.Rate, Reason: "observed by this process"}
		if w, _, err := c.Labels(ctx, kr.Key); err == nil {
			hk.N = len(w)
		}
		out = append(out, hk)
	}
	return out
}

// AutoNDecisions returns the automatic-N controller's recent grow and
// shrink decisions, oldest first (none without AutoN).
func (c *Client) AutoNDecisions() []hotkeys.Decision {
	if c.auto == nil {
		return nil
	}
	return c.auto.Decisions()
}
