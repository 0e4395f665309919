package hotcount_test

import (
	"context"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
)

// TestClearAll: ClearAll clears every counter the durable store holds,
// checkpointed fast counters and logged durable ones alike, and leaves
// no trace a restore or an exact read would bring back.
func TestClearAll(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, be := range durStores() {
		t.Run(be.name, func(t *testing.T) {
			db := be.open(t, be.loc(t))
			c := durClient(t, hotcount.Config{
				Namespaces: []hotcount.Namespace{{Prefix: "d:", Mode: hotcount.ModeDurable}, {Prefix: "f:", N: 2}},
				Durability: hotcount.DurabilityConfig{Store: db, CheckpointInterval: time.Hour},
			})
			for _, k := range []string{"d:a", "d:b", "f:a"} {
				if err := c.Incr(ctx, k, 3); err != nil {
					t.Fatal(err)
				}
			}
			if err := c.Flush(ctx); err != nil {
				t.Fatal(err)
			}
			if _, err := c.Checkpoint(ctx); err != nil {
				t.Fatal(err)
			}
			n, err := c.ClearAll(ctx)
			if err != nil || n != 3 {
				t.Fatalf("ClearAll = %d, %v; want 3 counters", n, err)
			}
			for _, k := range []string{"d:a", "d:b", "f:a"} {
				r, err := c.Get(ctx, k)
				if err != nil || r.Value != 0 {
					t.Fatalf("%s after ClearAll: %+v, %v", k, r, err)
				}
			}
			if v, err := c.GetExact(ctx, "d:a"); err != nil || v.Value != 0 {
				t.Fatalf("exact d:a after ClearAll: %+v, %v", v, err)
			}
			if n, err := c.ClearAll(ctx); err != nil || n != 0 {
				t.Fatalf("second ClearAll = %d, %v; want nothing left", n, err)
			}
		})
	}
}
