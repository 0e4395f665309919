package durability

import (
	"context"
	"fmt"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/keyspace"
)

// Counters calls fn with every counter key the durable store holds
// something of, a page (at most listPage keys) at a time: first the
// counters with a log or a rollup total (durable mode), in key order, then
// those with a checkpoint (fast mode: a checkpointed sub-key "{K#L}"
// stands for K). Each page is read from the store after fn returned for
// the one before, each within its own timeout, so fn may change the store
// as it goes (a counter cleared by fn is not listed again). A counter
// comes once from each part it has rows in; the checkpoints of one
// counter that straddle more than two pages may name it again. An error
// of fn ends the walk and is returned.
func (d *Service) Counters(ctx context.Context, fn func(keys []string) error) error {
	var fnErr error // fn's own, returned as it is
	call := func(keys []string) error {
		fnErr = fn(keys)
		return fnErr
	}
	if err := d.keyPages(ctx, "", call); err != nil {
		if fnErr != nil {
			return fnErr
		}
		return fmt.Errorf("list logged counters: %w", err)
	}
	// The sub-keys of one counter are near each other in key order: the
	// counters of the page before are enough to name each once.
	var prev map[string]bool
	err := d.checkpointPages(ctx, "", func(cps []durable.Checkpoint) error {
		cur := make(map[string]bool, len(cps))
		keys := make([]string, 0, len(cps))
		for _, cp := range cps {
			k := cp.Key
			if key, _, ok := keyspace.ParseSubKey(k); ok {
				k = key
			}
			if cur[k] || prev[k] || keyspace.Validate(k) != nil {
				continue
			}
			cur[k] = true
			keys = append(keys, k)
		}
		prev = cur
		if len(keys) == 0 {
			return nil
		}
		return call(keys)
	})
	if err != nil {
		if fnErr != nil {
			return fnErr
		}
		return fmt.Errorf("list checkpoints: %w", err)
	}
	return nil
}
