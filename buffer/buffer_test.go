package buffer

import (
	"context"
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

func TestNewConfig(t *testing.T) {
	labels := func(string) []string { return []string{"0"} }
	tests := []struct {
		name string
		sink Sink
		cfg  Config
	}{
		{"nil sink", nil, Config{Labels: labels}},
		{"no labels", newFakeSink(), Config{}},
		{"negative interval", newFakeSink(), Config{Labels: labels, Interval: -1}},
		{"negative max keys", newFakeSink(), Config{Labels: labels, MaxKeys: -1}},
		{"negative max pending", newFakeSink(), Config{Labels: labels, MaxPendingKeys: -1}},
		{"negative batch", newFakeSink(), Config{Labels: labels, BatchSize: -1}},
		{"negative timeout", newFakeSink(), Config{Labels: labels, BatchTimeout: -1}},
		{"negative ttl", newFakeSink(), Config{Labels: labels, TokenTTL: -1}},
		{"negative backoff", newFakeSink(), Config{Labels: labels, MaxBackoff: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, err := New(tt.sink, tt.cfg)
			if !errors.Is(err, ErrConfig) {
				t.Fatalf("New: err %v, want ErrConfig", err)
			}
			if b != nil {
				t.Fatal("New returned a Buffer with an error")
			}
		})
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg := Config{Labels: func(string) []string { return []string{"0"} }}
	before := cfg
	b, err := New(newFakeSink(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close(context.Background())
	if cfg.Interval != before.Interval || cfg.Clock != nil || cfg.Rand != nil {
		t.Fatal("New changed the caller's Config")
	}
	got := b.cfg
	want := []struct {
		name      string
		got, want int64
	}{
		{"Interval", int64(got.Interval), int64(DefaultInterval)},
		{"MaxKeys", int64(got.MaxKeys), DefaultMaxKeys},
		{"MaxPendingKeys", int64(got.MaxPendingKeys), DefaultMaxPendingKeys},
		{"BatchSize", int64(got.BatchSize), DefaultBatchSize},
		{"BatchTimeout", int64(got.BatchTimeout), int64(DefaultBatchTimeout)},
		{"TokenTTL", int64(got.TokenTTL), int64(store.DefaultTokenTTL)},
		{"MaxBackoff", int64(got.MaxBackoff), int64(DefaultMaxBackoff)},
	}
	for _, w := range want {
		if w.got != w.want {
			t.Errorf("%s = %d, want %d", w.name, w.got, w.want)
		}
	}
	if got.Clock == nil || got.Rand == nil {
		t.Error("Clock or Rand not defaulted")
	}
}

func TestAddPendingOverflow(t *testing.T) {
	tests := []struct {
		name    string
		adds    []int64
		wantErr []error // per add
		pending int64
	}{
		{"small", []int64{1, 2, -5}, []error{nil, nil, nil}, -2},
		{"zero on new key", []int64{0}, []error{nil}, 0},
		{"at bound", []int64{MaxDelta}, []error{nil}, MaxDelta},
		{"new key past bound", []int64{MaxDelta + 1}, []error{ErrOverflow}, 0},
		{"fast path over", []int64{MaxDelta - 1, 5}, []error{nil, ErrOverflow}, MaxDelta - 1},
		{"fast path under", []int64{-MaxDelta + 1, -5}, []error{nil, ErrOverflow}, -MaxDelta + 1},
		{"big delta over", []int64{1, MaxDelta}, []error{nil, ErrOverflow}, 1},
		{"big delta under", []int64{-1, -MaxDelta, math.MinInt64}, []error{nil, ErrOverflow, ErrOverflow}, -1},
		{"big delta past bound over a negative delta", []int64{-1, MaxDelta + 1}, []error{nil, ErrOverflow}, -1},
		{"big delta fits", []int64{MaxDelta, -MaxDelta, MaxDelta / 2}, []error{nil, nil, nil}, MaxDelta / 2},
		{"max int64", []int64{3, math.MaxInt64}, []error{nil, ErrOverflow}, 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b, _ := newTestBuffer(t, newFakeSink(), nil)
			for i, d := range tt.adds {
				err := b.Add("k", d)
				if !errors.Is(err, tt.wantErr[i]) || (tt.wantErr[i] == nil && err != nil) {
					t.Fatalf("Add #%d (%d): err %v, want %v", i, d, err, tt.wantErr[i])
				}
				if err != nil && !errors.Is(err, store.ErrOverflow) {
					t.Fatalf("ErrOverflow does not wrap store.ErrOverflow: %v", err)
				}
			}
			if got := b.Pending("k"); got != tt.pending {
				t.Fatalf("Pending = %d, want %d", got, tt.pending)
			}
			if got := b.Pending("other"); got != 0 {
				t.Fatalf("Pending(other) = %d", got)
			}
		})
	}
}

func TestAddInvalidKey(t *testing.T) {
	b, _ := newTestBuffer(t, newFakeSink(), nil)
	for _, k := range []string{"", "a{b}", "x\n"} {
		if err := b.Add(k, 1); !errors.Is(err, keyspace.ErrInvalidKey) {
			t.Errorf("Add(%q): %v, want ErrInvalidKey", k, err)
		}
	}
}

func TestCellLayout(t *testing.T) {
	var c cell
	if off, size := unsafe.Offsetof(c.v), unsafe.Sizeof(c); off != cacheLine || size != 2*cacheLine {
		t.Fatalf("cell.v at offset %d, cell size %d: want the counter alone on the second of two cache lines", off, size)
	}
}

func TestAddAllocs(t *testing.T) {
	b, _ := newTestBuffer(t, newFakeSink(), nil)
	mustAdd(t, b, "likes:post:42", 1)
	key := string([]byte("likes:post:42")) // a different string with the same bytes
	allocs := testing.AllocsPerRun(1000, func() {
		if err := b.Add(key, 1); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Add on an existing key: %v allocs/op, want 0", allocs)
	}
	if got := b.Pending(key); got != 1001+1 {
		t.Fatalf("Pending = %d, want 1002", got)
	}
}

// TestKeyIdentity mixes keys that share bytes, lengths and backing arrays
// with equal keys held in distinct strings; each must reach its own cell.
func TestKeyIdentity(t *testing.T) {
	b, _ := newTestBuffer(t, newFakeSink(), nil)
	backing := "k:0001k:0002k:0003"
	keys := []string{backing[0:6], backing[6:12], backing[12:18], backing[0:12], "k:0001", strings.Clone("k:0002")}
	want := map[string]int64{}
	for round := range 50 {
		for i, k := range keys {
			mustAdd(t, b, k, int64(i+1))
			want[k] += int64(i + 1)
			if round == 20 {
				if err := b.Flush(context.Background()); err != nil { // retire and recreate cells
					t.Fatal(err)
				}
				for k := range want {
					want[k] = 0
				}
				mustAdd(t, b, k, 0)
			}
		}
	}
	for k, v := range want {
		if got := b.Pending(k); got != v {
			t.Errorf("Pending(%q) = %d, want %d", k, got, v)
		}
	}
}

// TestConcurrentExact runs 32 adders over hot and rotating keys while
// flushes (which cut and retire cells) run concurrently, then closes and
// checks every counter's total in the sink.
func TestConcurrentExact(t *testing.T) {
	sink := newFakeSink()
	b, _ := newTestBuffer(t, sink, func(c *Config) { c.BatchSize = 7 })
	const adders, perAdder = 32, 2000
	want := map[string]int64{}
	var wantMu sync.Mutex
	var wg sync.WaitGroup
	stop := make(chan struct{})
	flushed := make(chan struct{})
	go func() {
		defer close(flushed)
		for {
			select {
			case <-stop:
				return
			default:
				if err := b.Flush(context.Background()); err != nil {
					t.Errorf("Flush: %v", err)
				}
			}
		}
	}()
	for g := range adders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			local := map[string]int64{}
			for i := range perAdder {
				var key string
				switch i % 3 {
				case 0:
					key = "hot"
				case 1:
					key = fmt.Sprintf("warm:%d", i%5)
				default:
					key = fmt.Sprintf("rot:%d:%d", g, i/50) // goes idle, gets retired
				}
				d := int64(i%7 - 2)
				if err := b.Add(key, d); err != nil {
					t.Errorf("Add: %v", err)
					return
				}
				local[key] += d
			}
			wantMu.Lock()
			for k, v := range local {
				want[k] += v
			}
			wantMu.Unlock()
		}()
	}
	wg.Wait()
	close(stop)
	<-flushed
	if err := b.Close(context.Background()); err != nil {
		t.Fatalf("Close: %v", err)
	}
	for k, v := range want {
		if got := sink.total(k); got != v {
			t.Errorf("total(%q) = %d, want %d", k, got, v)
		}
	}
	if s := b.Stats(); s.PendingKeys != 0 || s.Unflushed != 0 || s.HeldKeys != 0 {
		t.Errorf("after Close: %+v", s)
	}
}

func TestRetire(t *testing.T) {
	sink := newFakeSink()
	b, _ := newTestBuffer(t, sink, nil)
	mustAdd(t, b, "a", 2)
	mustAdd(t, b, "b", 3)
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.HeldKeys != 2 || s.PendingKeys != 0 {
		t.Fatalf("after first flush: %+v", s)
	}
	mustAdd(t, b, "b", 1) // keeps b alive
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if s := b.Stats(); s.HeldKeys != 1 {
		t.Fatalf("after second flush HeldKeys = %d, want 1 (a retired)", s.HeldKeys)
	}
	mustAdd(t, b, "a", 5) // a fresh cell
	if got := b.Pending("a"); got != 5 {
		t.Fatalf("Pending(a) = %d", got)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	if sink.total("a") != 7 || sink.total("b") != 4 {
		t.Fatalf("totals a=%d b=%d", sink.total("a"), sink.total("b"))
	}
}

// TestAddAfterRetire adds to a key whose cached cell was retired, with
// deltas of both signs and both paths (small and big).
func TestAddAfterRetire(t *testing.T) {
	for _, d := range []int64{-1, 1, -fastLimit, fastLimit} {
		t.Run(fmt.Sprint(d), func(t *testing.T) {
			sink := newFakeSink()
			b, _ := newTestBuffer(t, sink, nil)
			mustAdd(t, b, "k", 1)
			for range 2 { // flush, then retire the idle cell
				if err := b.Flush(context.Background()); err != nil {
					t.Fatal(err)
				}
			}
			if s := b.Stats(); s.HeldKeys != 0 {
				t.Fatalf("cell not retired: %+v", s)
			}
			for range 3 {
				mustAdd(t, b, "k", d)
			}
			if got := b.Pending("k"); got != 3*d {
				t.Fatalf("Pending = %d, want %d", got, 3*d)
			}
			if err := b.Close(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := sink.total("k"); got != 1+3*d {
				t.Fatalf("total = %d, want %d", got, 1+3*d)
			}
		})
	}
}

func TestBackpressure(t *testing.T) {
	sink := newFakeSink()
	sink.setAlways(faultRefuse)
	b, _ := newTestBuffer(t, sink, func(c *Config) { c.MaxPendingKeys = 5 })
	for i := range 5 {
		mustAdd(t, b, fmt.Sprint("k", i), 1)
	}
	if err := b.Add("k5", 1); !errors.Is(err, ErrBackpressure) {
		t.Fatalf("Add past the bound: %v, want ErrBackpressure", err)
	}
	mustAdd(t, b, "k0", 1) // existing keys still accepted
	if err := b.Flush(context.Background()); !errors.Is(err, ErrUnflushed) || !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Flush with the sink down: %v", err)
	}
	mustAdd(t, b, "k0", 1) // accumulates beside the op in flight
	if got := b.Pending("k0"); got != 3 {
		t.Fatalf("Pending(k0) = %d, want 3", got)
	}
	if err := b.Add("k5", 1); !errors.Is(err, ErrBackpressure) {
		t.Fatalf("Add while ops are held: %v", err)
	}
	if s := b.Stats(); s.Backpressure < 2 || s.InFlight != 5 || s.HeldKeys != 10 {
		t.Fatalf("stats: %+v", s)
	}
	sink.setAlways(faultNone)
	for range 3 { // ack the ops, cut k0's rest, retire the idle cells
		if err := b.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	mustAdd(t, b, "k5", 1)
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		want := int64(1)
		if i == 0 {
			want = 3
		}
		if got := sink.total(fmt.Sprint("k", i)); got != want {
			t.Errorf("total(k%d) = %d, want %d", i, got, want)
		}
	}
}

func TestStatsGauges(t *testing.T) {
	sink := newFakeSink()
	b, clk := newTestBuffer(t, sink, nil)
	mustAdd(t, b, "a", 5)
	clk.Advance(3 * time.Second)
	mustAdd(t, b, "b", -7)
	clk.Advance(time.Second)
	s := b.Stats()
	if s.Unflushed != -2 || s.UnflushedAbs != 12 || s.PendingKeys != 2 || s.HeldKeys != 2 {
		t.Fatalf("stats: %+v", s)
	}
	if s.OldestUnflushed != 4*time.Second {
		t.Fatalf("OldestUnflushed = %v, want 4s", s.OldestUnflushed)
	}
	if err := b.Flush(context.Background()); err != nil {
		t.Fatal(err)
	}
	s = b.Stats()
	if s.Unflushed != 0 || s.OldestUnflushed != 0 || s.Flushes != 1 || s.OpsApplied != 2 {
		t.Fatalf("after flush: %+v", s)
	}
}
