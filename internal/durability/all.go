package durability

import (
	"context"
	"fmt"
	"sort"

	"github.com/hotcount/hotcount/keyspace"
)

// Counters lists, sorted, every counter key the durable store holds
// something of: a durable counter's log or rollup total, or a fast
// counter's checkpoint (a checkpointed sub-key "{K#L}" stands for K).
func (d *Service) Counters(ctx context.Context) ([]string, error) {
	seen := map[string]struct{}{}
	logged, err := d.be.Keys(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list logged counters: %w", err)
	}
	for _, k := range logged {
		seen[k] = struct{}{}
	}
	cps, err := d.be.ListCheckpoints(ctx, "")
	if err != nil {
		return nil, fmt.Errorf("list checkpoints: %w", err)
	}
	for _, cp := range cps {
		k := cp.Key
		if key, _, ok := keyspace.ParseSubKey(k); ok {
			k = key
		}
		if keyspace.Validate(k) == nil {
			seen[k] = struct{}{}
		}
	}
	out := make([]string, 0, len(seen))
	for k := range seen {
		out = append(out, k)
	}
	sort.Strings(out)
	return out, nil
}
