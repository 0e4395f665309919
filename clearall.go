package hotcount

import (
	"context"
	"errors"
)

// ClearAll clears every counter the durable store knows of (as Clear
// does: its cache parts, checkpoints, log and metadata go, and no restore
// brings it back), after sending this process's buffered deltas. It
// returns how many counters it cleared. Counters that live only in the
// cache are not listed anywhere; a caller that empties the cache (the
// proxy's FLUSHALL) removes them. Without a durable store it clears
// nothing. Clearing is per counter, not atomic: an increment that another
// process sends meanwhile may survive.
func (c *Client) ClearAll(ctx context.Context) (int, error) {
	if c.closed.Load() {
		return 0, ErrClosed
	}
	if err := c.eng.Flush(ctx); err != nil {
		return 0, err
	}
	if c.dur == nil {
		return 0, nil
	}
	var errs []error
	n := 0
	err := c.dur.Counters(ctx, func(keys []string) error {
		for _, k := range keys {
			if err := c.Clear(ctx, k); err != nil {
				errs = append(errs, err)
				continue
			}
			n++
		}
		return nil
	})
	if err != nil {
		errs = append(errs, err)
	}
	return n, errors.Join(errs...)
}
