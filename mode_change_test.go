package hotcount_test

import (
	"context"
	"errors"
	"github.com/hotcount/hotcount/durable"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
)

// TestModeChangeRefused writes counters in one durability mode, closes the
// Client and opens another on the same cache and durable store with
// settings that would give them the other mode. New refuses with ErrConfig
// (and ErrModeChanged), naming the setting and the counters, and changes
// nothing: before, a fast-mode counter taken into durable mode was cut to
// what its log held by the healer's first repair (the 100 it counted were
// gone), and a durable-mode counter taken into fast mode had no
// checkpoint. Settings that keep every counter's mode (N, buffering,
// automatic N) open, with every count kept, and a cleared counter, or one
// whose deadline has passed, may change mode.
func TestModeChangeRefused(t *testing.T) {
	for _, ds := range durStores() {
		t.Run(ds.name, func(t *testing.T) {
			ctx := context.Background()
			loc := ds.loc(t)
			be := ds.open(t, loc)
			open := func(defaults hotcount.Mode, namespaces ...hotcount.Namespace) (*hotcount.Client, error) {
				return hotcount.New(ctx, hotcount.Config{
					Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
					Defaults:   hotcount.Namespace{Mode: defaults, FlushInterval: 20 * time.Millisecond},
					Namespaces: namespaces,
					Reads:      hotcount.ReadConfig{NoCache: true},
					Durability: hotcount.DurabilityConfig{Store: be, HealInterval: 100 * time.Millisecond},
				})
			}
			mustOpen := func(defaults hotcount.Mode, namespaces ...hotcount.Namespace) *hotcount.Client {
				t.Helper()
				c, err := open(defaults, namespaces...)
				if err != nil {
					t.Fatal(err)
				}
				return c
			}
			closeC := func(c *hotcount.Client) {
				t.Helper()
				if err := c.Close(ctx); err != nil {
					t.Fatal(err)
				}
			}
			paid := "paid:" + uniqueKey(t)
			refused := func(want []string, defaults hotcount.Mode, namespaces ...hotcount.Namespace) {
				t.Helper()
				c, err := open(defaults, namespaces...)
				if err == nil {
					// Show what the change does: a durable counter's
					// view is measured against its log once written.
					_ = c.Incr(ctx, paid, 1)
					time.Sleep(500 * time.Millisecond)
					r, rerr := c.Get(ctx, paid)
					closeC(c)
					t.Fatalf("New accepted a mode change of counters the durable store holds (defaults %s, %+v); %s reads %d, %v after one more increment and a few heal intervals",
						defaults, namespaces, paid, r.Value, rerr)
				}
				if !errors.Is(err, hotcount.ErrConfig) || !errors.Is(err, hotcount.ErrModeChanged) {
					t.Errorf("New: %v, want ErrConfig and ErrModeChanged", err)
				}
				for _, w := range want {
					if !strings.Contains(err.Error(), w) {
						t.Errorf("New: %v\nwant it to name %q", err, w)
					}
				}
			}
			fast, dur := hotcount.Namespace{Prefix: "paid:", Mode: hotcount.ModeFast}, hotcount.Namespace{Prefix: "paid:", Mode: hotcount.ModeDurable}
			read := func(c *hotcount.Client, key string, want int64) {
				t.Helper()
				if r, err := c.Get(ctx, key); err != nil || r.Value != want {
					t.Errorf("%s reads %d, %v; want %d", key, r.Value, err, want)
				}
			}

			// Fast, then durable: refused, and the value is still there.
			c := mustOpen(hotcount.ModeFast, fast)
			for range 10 {
				if err := c.Incr(ctx, paid, 10); err != nil {
					t.Fatal(err)
				}
			}
			closeC(c)
			refused([]string{`mode of namespace "paid:" is durable`, "fast-mode checkpoints of 1 of its counters", paid}, hotcount.ModeFast, dur)
			refused([]string{"mode (keys no namespace names) is durable", paid}, hotcount.ModeDurable)
			// The same mode with another N, buffering and automatic N
			// opens, and the count is kept.
			c = mustOpen(hotcount.ModeFast, hotcount.Namespace{Prefix: "paid:", Mode: hotcount.ModeFast, N: 3, Buffered: true, NoColdStart: true})
			read(c, paid, 100)
			if err := c.Incr(ctx, paid, 1); err != nil {
				t.Fatal(err)
			}
			closeC(c)
			c = mustOpen(hotcount.ModeFast)
			read(c, paid, 101)
			// Cleared, the counter may change mode.
			if err := c.Clear(ctx, paid); err != nil {
				t.Fatal(err)
			}
			closeC(c)

			// Durable, then fast: refused, and the value is still there.
			c = mustOpen(hotcount.ModeFast, dur)
			for range 10 {
				if err := c.Incr(ctx, paid, 7); err != nil {
					t.Fatal(err)
				}
			}
			// A fast-mode counter whose deadline passes before the last
			// start below, when it would be durable: it is gone, and
			// its key may start again in any mode.
			gone := "gone:" + uniqueKey(t)
			if err := c.Incr(ctx, gone, 5); err != nil {
				t.Fatal(err)
			}
			end := time.Now().Add(300 * time.Millisecond)
			if ok, err := c.Expire(ctx, gone, end); err != nil || !ok {
				t.Fatalf("Expire: %v, %v", ok, err)
			}
			closeC(c)
			refused([]string{`mode of namespace "paid:" is fast`, "the event log of 1 of its counters", paid}, hotcount.ModeFast, fast)
			// The namespace removed: its counters fall under the defaults.
			refused([]string{"mode (keys no namespace names) is fast", paid}, hotcount.ModeFast)
			// Its prefix changed: the same.
			refused([]string{"mode (keys no namespace names) is fast", paid}, hotcount.ModeFast, hotcount.Namespace{Prefix: "paid:x", Mode: hotcount.ModeDurable})
			time.Sleep(time.Until(end))
			c = mustOpen(hotcount.ModeDurable, hotcount.Namespace{Prefix: "paid:", N: 2, Buffered: true})
			defer closeC(c)
			time.Sleep(300 * time.Millisecond) // a few heal sweeps: nothing to repair
			read(c, paid, 70)
			if r, err := c.GetExact(ctx, paid); err != nil || r.Value != 70 {
				t.Errorf("exact read %d, %v; want 70", r.Value, err)
			}
		})
	}
}

// listings counts the listings of a durable store (Keys and
// ListCheckpoints, and their pages).
type listings struct {
	durable.Backend
	n atomic.Int64
}

func (l *listings) Keys(ctx context.Context, prefix string) ([]string, error) {
	l.n.Add(1)
	return l.Backend.Keys(ctx, prefix)
}

func (l *listings) ListCheckpoints(ctx context.Context, prefix string) ([]durable.Checkpoint, error) {
	l.n.Add(1)
	return l.Backend.ListCheckpoints(ctx, prefix)
}

func (l *listings) KeysAfter(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	l.n.Add(1)
	return l.Backend.KeysAfter(ctx, prefix, after, limit)
}

func (l *listings) ListCheckpointsAfter(ctx context.Context, prefix, after string, limit int) ([]durable.Checkpoint, error) {
	l.n.Add(1)
	return l.Backend.ListCheckpointsAfter(ctx, prefix, after, limit)
}

// TestModeCheckRecorded: the mode check lists the durable store only when
// the settings' modes differ from those of the last start whose check
// passed. A restart with the same modes (other N, buffering) lists nothing:
// before, every start listed the whole store (every log key, with the
// defaults in fast mode), seconds for a store of millions of counters. A
// start that skips the check (NoStartupRepair) under other modes removes
// the record, so the next start that checks lists again and finds what
// that process wrote.
func TestModeCheckRecorded(t *testing.T) {
	ctx := context.Background()
	ds := durStores()[0]
	be := &listings{Backend: ds.open(t, ds.loc(t))}
	open := func(paid hotcount.Namespace, skip bool) (*hotcount.Client, int64, error) {
		before := be.n.Load()
		c, err := hotcount.New(ctx, hotcount.Config{
			Redis:      hotcount.RedisConfig{Addrs: cluster.Seeds()},
			Namespaces: []hotcount.Namespace{paid},
			Reads:      hotcount.ReadConfig{NoCache: true},
			Durability: hotcount.DurabilityConfig{Store: be, HealInterval: -1, CheckpointInterval: time.Hour, NoStartupRepair: skip},
		})
		return c, be.n.Load() - before, err
	}
	paid := "paid:" + uniqueKey(t)
	dur := hotcount.Namespace{Prefix: "paid:", Mode: hotcount.ModeDurable}
	write := func(ns hotcount.Namespace, skip bool, wantLists int64) {
		t.Helper()
		c, lists, err := open(ns, skip)
		if err != nil {
			t.Fatal(err)
		}
		if wantLists >= 0 && lists != wantLists {
			t.Errorf("New (%s, NoStartupRepair %v) listed the durable store %d times, want %d", ns.Mode, skip, lists, wantLists)
		}
		if err := c.Incr(ctx, paid, 5); err != nil {
			t.Fatal(err)
		}
		if err := c.Close(ctx); err != nil {
			t.Fatal(err)
		}
	}
	write(dur, false, -1) // the first start lists
	dur.N, dur.Buffered = 3, true
	write(dur, false, 0) // the same modes: no listing
	// Another process skips the check and writes paid: in fast mode
	// (its Close checkpoints it).
	write(hotcount.Namespace{Prefix: "paid:", Mode: hotcount.ModeFast}, true, -1)
	// The next start with the durable mode lists again and refuses.
	c, lists, err := open(dur, false)
	if err == nil {
		_ = c.Close(ctx)
		t.Fatalf("New accepted durable mode for %s, which another process wrote in fast mode since (it listed %d times)", paid, lists)
	}
	if !errors.Is(err, hotcount.ErrModeChanged) {
		t.Fatalf("New: %v, want ErrModeChanged", err)
	}
}
