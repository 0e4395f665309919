package hotcount

import (
	"context"
	"time"
)

// SetRegionRetention sets how long a region keeps the records of a
// counter it cleared or expired before collecting them, for the Clients
// opened after it (for tests); it returns the previous value.
func SetRegionRetention(d time.Duration) time.Duration {
	old := regionRetention
	regionRetention = d
	return old
}

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
