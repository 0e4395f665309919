package hotcount_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
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
					N: 4, MetaTTL: 50 * time.Millisecond, NoReadCache: true,
					Buffered: buffered, FlushInterval: 10 * time.Millisecond,
				})
				key := uniqueKey(t)
				var sent atomic.Int64
				stop := make(chan struct{})
				var wg sync.WaitGroup
				for range 16 {
					wg.Add(1)
					go func() {
						defer wg.Done()
						for {
							select {
							case <-stop:
								return
							default:
							}
							if err := c.Incr(ctx, key, 1); err != nil {
								t.Error(err)
								return
							}
							if sent.Add(1)%64 == 0 {
								time.Sleep(time.Millisecond) // pace the writers: the point is concurrency, not volume
							}
						}
					}()
				}
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
				close(stop)
				wg.Wait()
				if err := c.Flush(ctx); err != nil {
					t.Fatal(err)
				}
				got, err := c.Get(ctx, key)
				if err != nil || got.Value != sent.Load() || got.N != 3 {
					t.Fatalf("after grow and shrink: %+v %v, want %d over 3 sub-counters", got, err, sent.Load())
				}
				rep, err := c.Shards(ctx, key)
				if err != nil {
					t.Fatal(err)
				}
				t.Logf("%d increments; labels %v on %d distinct primaries, %d collisions", sent.Load(), rep.Meta.Write, rep.Placement.Distinct, rep.Collisions)
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
	for _, n := range []int{0, -1, hotcount.MaxN + 1} {
		if err := c.Resize(ctx, "k", n); !errors.Is(err, hotcount.ErrConfig) {
			t.Errorf("Resize to %d: %v", n, err)
		}
	}
}
