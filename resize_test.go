package hotcount_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/keyspace"
)

// TestResizeUnderLoad grows 4→8 and shrinks 8→3 while 16 writers increment,
// unbuffered and buffered, and checks the exact total afterwards.
func TestResizeUnderLoad(t *testing.T) {
	for _, b := range allBackends() {
		for _, buffered := range []bool{false, true} {
			name := b.name + "/unbuffered"
			if buffered {
				name = b.name + "/buffered"
			}
			t.Run(name, func(t *testing.T) {
				ctx := context.Background()
				c := newClient(t, b.open(t), hotcount.Config{
					Defaults: hotcount.Namespace{N: 4, Buffered: buffered, FlushInterval: 10 * time.Millisecond},
					Reads:    hotcount.ReadConfig{NoCache: true},
					Meta:     hotcount.MetaConfig{TTL: 50 * time.Millisecond},
				})
				key := uniqueKey(t)
				stop := startWriters(t, c, key, 16, 64)
				for _, n := range []int{8, 3} {
					time.Sleep(50 * time.Millisecond)
					if err := c.Resize(ctx, key, n); err != nil {
						t.Fatal(err)
					}
					w, r, err := c.Labels(ctx, key)
					if err != nil || len(w) != n || len(r) != n {
						t.Fatalf("after Resize(%d): write %v read %v %v", n, w, r, err)
					}
				}
				time.Sleep(30 * time.Millisecond)
				sent := stop()
				if err := c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				got, err := c.Get(ctx, key)
				if err != nil || got.Value != sent || got.N != 3 {
					t.Fatalf("after grow and shrink: %+v %v, want %d over 3 sub-counters", got, err, sent)
				}
				rep, err := c.Shards(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d increments; labels %v on %d distinct primaries, %d collisions", sent, rep.Shards, rep.DistinctNodes, rep.Collisions)
			})
		}
	}
}

func TestResizeErrors(t *testing.T) {
	c := newClient(t, mustMem(t), hotcount.Config{})
	ctx := context.Background()
	if err := c.Resize(ctx, "bad{", 2); !errors.Is(err, hotcount.ErrInvalidKey) {
		t.Errorf("bad key: %v", err)
	}
	for _, n := range []int{0, -1, keyspace.MaxN + 1} {
		if err := c.Resize(ctx, "k", n); !errors.Is(err, hotcount.ErrInvalidN) {
			t.Errorf("Resize to %d: %v", n, err)
		}
	}
}
