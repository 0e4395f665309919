package buffer

import (
	"context"
	"errors"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
)

// atLeastTwoProcs makes the test run with GOMAXPROCS ≥ 2, the only case
// in which cells get lanes.
func atLeastTwoProcs(t *testing.T) {
	if old := runtime.GOMAXPROCS(0); old < 2 {
		runtime.GOMAXPROCS(2)
		t.Cleanup(func() { runtime.GOMAXPROCS(old) })
	}
}

// lanesOf returns key's cell's lanes, or nil.
func lanesOf(b *Buffer, key string) *lanes {
	h := hashString(b.seed, key)
	if c := b.shards[h>>(64-shardBits)].tab.Load().find(h, key); c != nil {
		return c.lanes.Load()
	}
	return nil
}

// spreadKey gives key a cell with lanes and nothing pending in it: it
// adds spreadAt and flushes, the cut that spreads the cell.
func spreadKey(t *testing.T, b *Buffer, key string) {
	t.Helper()
	mustAdd(t, b, key, spreadAt)
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if lanesOf(b, key) == nil {
		t.Fatalf("%q has no lanes after a cut of %d", key, spreadAt)
	}
	if got := b.Pending(key); got != 0 {
		t.Fatalf("Pending after the flush = %d", got)
	}
}

// TestLanesBound runs TestAddPendingOverflow's bound cases on a cell with
// lanes: the bound stays exactly ±MaxDelta, however the delta is spread.
func TestLanesBound(t *testing.T) {
	atLeastTwoProcs(t)
	tests := []struct {
		name    string
		adds    []int64
		wantErr []error
		pending int64
	}{
		{"small", []int64{1, 2, -5}, []error{nil, nil, nil}, -2},
		{"at bound", []int64{MaxDelta}, []error{nil}, MaxDelta},
		{"past bound", []int64{MaxDelta + 1}, []error{ErrOverflow}, 0},
		{"lanes then big over", []int64{5, MaxDelta - 5, 1}, []error{nil, nil, ErrOverflow}, MaxDelta},
		{"lanes then big under", []int64{-5, -MaxDelta + 5, -1}, []error{nil, nil, ErrOverflow}, -MaxDelta},
		{"big then lanes over", []int64{MaxDelta - 1, 1, 1}, []error{nil, nil, ErrOverflow}, MaxDelta},
		{"reserve passed", []int64{MaxDelta - laneReserve, laneReserve / 2, laneReserve / 2, 1}, []error{nil, nil, nil, ErrOverflow}, MaxDelta},
		{"max int64", []int64{3, math.MaxInt64}, []error{nil, ErrOverflow}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sink := newFakeSink()
			b, _ := newTestBuffer(t, sink, nil)
			spreadKey(t, b, "k")
			for i, d := range tt.adds {
				err := b.Add("k", d)
				if !errors.Is(err, tt.wantErr[i]) || (tt.wantErr[i] == nil && err != nil) {
					t.Fatalf("Add #%d (%d): err %v, want %v", i, d, err, tt.wantErr[i])
				}
			}
			if got := b.Pending("k"); got != tt.pending {
				t.Fatalf("Pending = %d, want %d", got, tt.pending)
			}
			if err := b.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := sink.total("k"); got != spreadAt+tt.pending {
				t.Fatalf("total = %d, want %d", got, spreadAt+tt.pending)
			}
		})
	}
}

// TestLanesQuiet: a cell with lanes that gains nothing for a cut gives its
// lanes back, keeping what raced in, and retires at the next quiet cut.
func TestLanesQuiet(t *testing.T) {
	atLeastTwoProcs(t)
	sink := newFakeSink()
	b, _ := newTestBuffer(t, sink, nil)
	spreadKey(t, b, "k")
	mustAdd(t, b, "k", 3)
	tick(b)
	if lanesOf(b, "k") == nil {
		t.Fatal("a cell that gained 3 lost its lanes")
	}
	tick(b) // quiet: lanes go
	if lanesOf(b, "k") != nil {
		t.Fatal("a quiet cell kept its lanes")
	}
	if s := b.Stats(); s.HeldKeys != 1 {
		t.Fatalf("HeldKeys = %d, want 1", s.HeldKeys)
	}
	tick(b) // quiet again: the cell retires
	if s := b.Stats(); s.HeldKeys != 0 {
		t.Fatalf("HeldKeys = %d after two quiet cuts, want 0", s.HeldKeys)
	}
	if got := b.spread.Load(); got != 0 {
		t.Fatalf("spread = %d, want 0", got)
	}
	mustAdd(t, b, "k", 4)
	if err := b.Close(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := sink.total("k"); got != spreadAt+3+4 {
		t.Fatalf("total = %d, want %d", got, spreadAt+3+4)
	}
}

// TestLanesAllocs: an Add to a cell with lanes does not allocate, and
// Pending counts what the lanes hold.
func TestLanesAllocs(t *testing.T) {
	atLeastTwoProcs(t)
	b, _ := newTestBuffer(t, newFakeSink(), nil)
	spreadKey(t, b, "likes:post:42")
	key := string([]byte("likes:post:42"))
	allocs := testing.AllocsPerRun(1000, func() {
		if err := b.Add(key, 1); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Add to a cell with lanes: %v allocs/op, want 0", allocs)
	}
	if got := b.Pending(key); got != 1001 {
		t.Fatalf("Pending = %d, want 1001", got)
	}
}

// TestLanesConcurrentExact adds to one hot key from many goroutines, small
// deltas (lanes) beside big ones that push the cell to its bound (so that
// lanes are folded back and spread again), while cuts run and Close ends
// it all: every successful Add is counted once and no failed one is.
func TestLanesConcurrentExact(t *testing.T) {
	atLeastTwoProcs(t)
	sink := newFakeSink()
	b, _ := newTestBuffer(t, sink, func(c *Config) { c.BatchSize = 3 })
	var sum atomic.Int64
	var overflows atomic.Int64
	stop := make(chan struct{})
	var cutter sync.WaitGroup
	cutter.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
				tick(b)
			}
		}
	})
	cutter.Go(func() { // the sink reports every call; its buffer is finite
		for {
			select {
			case <-sink.notify:
			case <-stop:
				return
			}
		}
	})
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 20000 {
				d := int64(i%5+1) << 12 // small: lanes
				if g == 0 {
					// big: near the bound, positive then negative
					d = MaxDelta / 4
					if i/12%2 == 1 {
						d = -d
					}
				}
				err := b.Add("hot", d)
				switch {
				case err == nil:
					sum.Add(d)
				case errors.Is(err, ErrOverflow):
					// The big adds can bring the cell to its bound, and
					// then a small one is refused too.
					overflows.Add(1)
				case errors.Is(err, ErrClosed):
					return
				default:
					t.Errorf("Add(%d): %v", d, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(stop)
	cutter.Wait()
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got, want := sink.total("hot"), sum.Load(); got != want {
		t.Fatalf("total = %d, want %d (the sum of the successful Adds)", got, want)
	}
	t.Logf("%d adds refused at the bound", overflows.Load())
}
