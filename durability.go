package hotcount

import "context"

// durability connects a Client to its durable store: fast-mode checkpoints
// and restore, durable-mode group-committed event log.
type durability struct {
	c *Client
}

// newDurability starts the checkpointer and the committer.
func newDurability(c *Client) (*durability, error) {
	return &durability{c: c}, nil
}

// incr handles an increment of a key in namespace ns when durability needs
// to see it (durable mode: commit first; fast mode: note the key for the
// next checkpoint). handled says the increment was fully dealt with.
func (d *durability) incr(ctx context.Context, ns Namespace, key string, delta int64, id string) (handled bool, err error) {
	return false, nil
}

// closeLog drains the committer: every accepted increment is committed and
// handed to the buffer.
func (d *durability) closeLog(ctx context.Context) error { return nil }

// close takes a last checkpoint and stops the checkpointer.
func (d *durability) close(ctx context.Context) error { return nil }

// cleared notes that key was cleared.
func (d *durability) cleared(key string) {}
