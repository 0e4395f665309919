package hotcount

import "context"

// Labels returns key's write and read label sets (for tests).
func (c *Client) Labels(ctx context.Context, key string) (write, read []string, err error) {
	return c.eng.Labels(ctx, key)
}
