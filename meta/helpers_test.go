package meta_test

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/meta"
)

// fakeClock advances only when told to, or when a fold sleeps: After
// moves it on by d at once and fires.
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_700_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) After(d time.Duration) <-chan time.Time {
	c.Advance(d)
	c.mu.Lock()
	c.slept += d
	ch := make(chan time.Time, 1)
	ch <- c.now
	c.mu.Unlock()
	return ch
}

func (c *fakeClock) NewTicker(time.Duration) clock.Ticker { panic("meta tests use no ticker") }

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Slept() time.Duration {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.slept
}

// fakeDurable is a map standing in for the durable store in unit tests.
type fakeDurable struct {
	mu    sync.Mutex
	recs  map[string][]byte
	saves int
}

func (d *fakeDurable) SaveMeta(_ context.Context, key string, data []byte) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.recs == nil {
		d.recs = map[string][]byte{}
	}
	d.recs[key] = append([]byte(nil), data...)
	d.saves++
	return nil
}

func (d *fakeDurable) LoadMeta(_ context.Context, key string) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.recs[key], nil
}

func (d *fakeDurable) DeleteMeta(_ context.Context, key string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.recs, key)
	return nil
}

func (d *fakeDurable) LoadMetas(_ context.Context, keys []string) (map[string][]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	out := map[string][]byte{}
	for _, k := range keys {
		if v, ok := d.recs[k]; ok {
			out[k] = v
		}
	}
	return out, nil
}

// sum reads every label of the read set and adds them up.
func sum(t testing.TB, b meta.Backend, key string, read []string) int64 {
	t.Helper()
	keys := make([]string, len(read))
	for i, l := range read {
		keys[i] = keyspace.SubKey(key, l)
	}
	vals, err := b.Get(context.Background(), keys)
	if err != nil {
		t.Fatalf("read %q: %v", key, err)
	}
	var s int64
	for _, v := range vals {
		s += v
	}
	return s
}

// settled fails unless key's record has no journal and read == write.
func settled(t testing.TB, m *meta.Manager, key string, n int) meta.Meta {
	t.Helper()
	mt, err := m.Meta(context.Background(), key)
	if err != nil {
		t.Fatalf("Meta(%q): %v", key, err)
	}
	if len(mt.Folds) != 0 || len(mt.Write) != n || len(mt.Read) != n {
		t.Fatalf("record of %q not settled at %d labels: %+v", key, n, mt)
	}
	for _, l := range mt.Write {
		found := false
		for _, r := range mt.Read {
			found = found || r == l
		}
		if !found {
			t.Fatalf("write label %q not in read set: %+v", l, mt)
		}
	}
	return mt
}

func decodeMeta(t testing.TB, data []byte) meta.Meta {
	t.Helper()
	var m meta.Meta
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("decode %s: %v", data, err)
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

func ftoa(f float64) string { return strconv.FormatFloat(f, 'f', 4, 64) }
