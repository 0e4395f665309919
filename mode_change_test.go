package hotcount_test

import (
	"context"
	"errors"
	"strings"
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
