package hotcount

import (
	"context"
)

// RegionsCollected returns how many counters' region records c has
// collected (for tests).
func (c *Client) RegionsCollected() uint64 {
	if c.reg == nil {
		return 0
	}
	return c.reg.Collected()
}

// Labels returns key's write and read label sets (for tests).
func (c *Client) Labels(ctx context.Context, key string) (write, read []string, err error) {
	return c.eng.Labels(ctx, key)
}
