package hotcount_test

import (
	"context"
	"testing"

	"github.com/hotcount/hotcount"
)

// TestRestartEmbedded stops a Client on the embedded store with a SQLite
// durable store and starts a new one on the same file, as `hotcount serve`
// does across a restart: the new process finds the embedded cache empty and
// restores fast-mode counters from their checkpoints, and rebuilds
// durable-mode counters from the log, before it is used.
func TestRestartEmbedded(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	open := func() (*hotcount.Client, func()) {
		return openOnSQLite(t, dir, hotcount.Config{Namespaces: []hotcount.Namespace{{Prefix: "paid:", Mode: hotcount.ModeDurable}}})
	}
	c, done := open()
	for i := range 50 {
		if err := c.Incr(ctx, "likes:post:1", 3); err != nil {
			t.Fatal(err)
		}
		if err := c.Incr(ctx, "paid:views:1", int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.Resize(ctx, "likes:post:1", 3); err != nil {
		t.Fatal(err)
	}
	done()

	c, done = open()
	defer done()
	for key, want := range map[string]int64{"likes:post:1": 150, "paid:views:1": 50 * 51 / 2} {
		r, err := c.Get(ctx, key)
		if err != nil || r.Value != want {
			t.Errorf("%s after restart: %+v %v, want %d", key, r, err, want)
		}
	}
	if r, _ := c.Get(ctx, "likes:post:1"); r.N != 3 {
		t.Errorf("the resize was not kept: N = %d", r.N)
	}
	if len(c.Restores()) == 0 {
		t.Error("no restore was reported")
	}
}
