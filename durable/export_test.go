package durable

// Pending returns the number of accepted events not yet handed to the
// Appender (tests only).
func (c *Committer) Pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	if c.cur != nil {
		n = len(c.cur.events)
	}
	for _, b := range c.ready {
		n += len(b.events)
	}
	return n
}
