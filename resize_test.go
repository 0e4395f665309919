package hotcount_test

import (
	"context"
	"errors"
	"sync"
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
					Defaults: hotcount.Namespace{NoColdStart: true, N: 4, Buffered: buffered, FlushInterval: 10 * time.Millisecond},
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

// TestConcurrentResizesConflict: resizes of one key that overlap get
// ErrConflict (never an unnamed error), and the value is kept. A round in
// which no two resizes happened to overlap is tried again.
func TestConcurrentResizesConflict(t *testing.T) {
	c := newClient(t, mustMem(t), hotcount.Config{Meta: hotcount.MetaConfig{TTL: 20 * time.Millisecond}})
	ctx := context.Background()
	if err := c.Incr(ctx, "k", 7); err != nil {
		t.Fatal(err)
	}
	for try := 1; ; try++ {
		var wg sync.WaitGroup
		errs := make([]error, 16)
		for i := range errs {
			wg.Go(func() { errs[i] = c.Resize(ctx, "k", 2+i%3*3) })
		}
		wg.Wait()
		var conflicts int
		for i, err := range errs {
			switch {
			case err == nil:
			case errors.Is(err, hotcount.ErrConflict):
				conflicts++
			default:
				t.Fatalf("resize %d: %v (want nil or ErrConflict)", i, err)
			}
		}
		if r, err := c.Get(ctx, "k"); err != nil || r.Value != 7 {
			t.Fatalf("value after resizes: %+v %v", r, err)
		}
		if conflicts > 0 {
			t.Logf("try %d: %d of %d resizes conflicted", try, conflicts, len(errs))
			return
		}
		if try == 5 {
			t.Skipf("no two resizes overlapped in %d tries: the conflict was not exercised", try)
		}
		t.Logf("try %d: no resizes overlapped; again", try)
	}
}
