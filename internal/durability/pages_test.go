package durability

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/internal/engine"
	"github.com/hotcount/hotcount/internal/ns"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store/mem"
)

// listings is a durable store that records how many keys each listing of
// it returned, and the keys each ExactMulti measured.
type listings struct {
	durable.Backend
	mu       sync.Mutex
	listed   []int // keys (or checkpoints) per listing call
	measured []string
}

func (l *listings) note(n int) {
	l.mu.Lock()
	l.listed = append(l.listed, n)
	l.mu.Unlock()
}

func (l *listings) Keys(ctx context.Context, prefix string) ([]string, error) {
	keys, err := l.Backend.Keys(ctx, prefix)
	l.note(len(keys))
	return keys, err
}

func (l *listings) KeysAfter(ctx context.Context, prefix, after string, limit int) ([]string, error) {
	keys, err := l.Backend.KeysAfter(ctx, prefix, after, limit)
	l.note(len(keys))
	return keys, err
}

func (l *listings) ListCheckpoints(ctx context.Context, prefix string) ([]durable.Checkpoint, error) {
	cps, err := l.Backend.ListCheckpoints(ctx, prefix)
	l.note(len(cps))
	return cps, err
}

func (l *listings) ListCheckpointsAfter(ctx context.Context, prefix, after string, limit int) ([]durable.Checkpoint, error) {
	cps, err := l.Backend.ListCheckpointsAfter(ctx, prefix, after, limit)
	l.note(len(cps))
	return cps, err
}

func (l *listings) ExactMulti(ctx context.Context, keys []string) (map[string]int64, error) {
	l.mu.Lock()
	l.measured = append(l.measured, keys...)
	l.mu.Unlock()
	return l.Backend.ExactMulti(ctx, keys)
}

// take returns what was recorded since the last take, and forgets it.
func (l *listings) take() (listed []int, measured []string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	listed, measured = l.listed, l.measured
	l.listed, l.measured = nil, nil
	return listed, measured
}

// pagedService returns a Service in durable mode over an empty embedded
// cache and a SQLite store of the log keys "h:000".."h:<n-1>" (each with
// a total of 1), its loops stopped (sweeps run when the test calls Heal),
// with pages of page keys and sweeps of perSweep.
func pagedService(t *testing.T, n, page, perSweep int) (*Service, *listings, *clock.Fake) {
	t.Helper()
	ctx := context.Background()
	oldPage, oldSweep := listPage, healPerSweep
	listPage, healPerSweep = page, perSweep
	t.Cleanup(func() { listPage, healPerSweep = oldPage, oldSweep })
	clk := clock.NewFake()
	db, err := sqlite.Open(ctx, sqlite.Config{Path: t.TempDir() + "/hotcount.db", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	var evs []durable.Event
	for i := range n {
		evs = append(evs, durable.Event{Key: fmt.Sprintf("h:%03d", i), Delta: 1, ID: "a"})
	}
	if _, err := db.AppendEvents(ctx, evs); err != nil {
		t.Fatal(err)
	}
	be := &listings{Backend: db}
	st, err := mem.New(mem.Config{Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	table, err := ns.New(ns.Namespace{N: 1, Mode: ns.ModeDurable, FlushInterval: 10 * time.Millisecond,
		ReadCacheTTL: time.Second, HotRate: 1000}, nil)
	if err != nil {
		t.Fatal(err)
	}
	eng, err := engine.New(engine.Config{Store: st, Namespaces: table, Timeout: time.Second, Clock: clk, Rand: rand.Uint64})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = eng.CloseBuffers(ctx) })
	d, err := New(Config{Backend: be, Engine: eng, CheckpointInterval: time.Hour, RollupAge: time.Hour,
		Timeout: time.Second, Clock: clk, Rand: rand.Uint64, HealInterval: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if err := d.Close(ctx); err != nil { // the loops stop; Heal still runs
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.CloseLog(ctx) })
	return d, be, clk
}

// TestHealSweepReadsAPage: one heal sweep over a log of more keys than a
// sweep measures reads at most that many keys from the store, in pages of
// at most listPage, and never lists the whole log; the sweeps that follow
// go on from where it stopped, so that a pass measures every counter once,
// and the next pass starts again from the first.
func TestHealSweepReadsAPage(t *testing.T) {
	const n, page, perSweep = 250, 40, 100
	d, be, clk := pagedService(t, n, page, perSweep)
	ctx := context.Background()
	var pass []string
	for sweep, want := range []int{100, 100, 50, 100} {
		clk.Advance(time.Minute) // a new interval to claim
		rep, err := d.Heal(ctx)
		if err != nil || !rep.Claimed {
			t.Fatalf("sweep %d: %+v, %v", sweep, rep, err)
		}
		listed, measured := be.take()
		total := 0
		for _, l := range listed {
			total += l
			if l > page {
				t.Errorf("sweep %d: one listing returned %d keys, more than a page (%d)", sweep, l, page)
			}
		}
		if total > perSweep {
			t.Errorf("sweep %d read %d keys from the store (listings %v), want at most %d", sweep, total, listed, perSweep)
		}
		if rep.Keys != want || len(measured) != want {
			t.Errorf("sweep %d measured %d counters (%d read from the log), want %d", sweep, rep.Keys, len(measured), want)
		}
		if sweep < 3 {
			pass = append(pass, measured...)
		} else if len(measured) > 0 && measured[0] != "h:000" {
			t.Errorf("the next pass starts at %q, want h:000", measured[0])
		}
	}
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("h:%03d", i))
	}
	if !slices.Equal(pass, want) {
		t.Errorf("one pass measured %d counters %v…, want each of the %d once, in order", len(pass), pass[:min(len(pass), 5)], n)
	}
}

// TestCountersInPages: Counters gives every counter of the log and of the
// checkpoints once, a page at a time, also when the checkpoints of one
// counter straddle a page boundary; the store is never listed whole.
func TestCountersInPages(t *testing.T) {
	const n, page = 25, 4
	d, be, _ := pagedService(t, n, page, 100)
	ctx := context.Background()
	var cps []durable.Checkpoint
	for i := range 7 {
		for _, l := range []string{"0", "1", "2"} {
			cps = append(cps, durable.Checkpoint{Key: keyspace.SubKey(fmt.Sprintf("f:%d", i), l), Total: 1, Epoch: 1})
		}
	}
	if err := d.be.SaveCheckpoints(ctx, cps); err != nil {
		t.Fatal(err)
	}
	be.take()
	var got []string
	err := d.Counters(ctx, func(keys []string) error {
		if len(keys) > page {
			t.Errorf("a page of %d counters, more than %d", len(keys), page)
		}
		got = append(got, keys...)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for i := range n {
		want = append(want, fmt.Sprintf("h:%03d", i))
	}
	for i := range 7 {
		want = append(want, fmt.Sprintf("f:%d", i))
	}
	if !slices.Equal(got, want) {
		t.Errorf("Counters gave %v, want %v", got, want)
	}
	listed, _ := be.take()
	for _, l := range listed {
		if l > page {
			t.Errorf("a listing of %d, more than a page (%d): %v", l, page, listed)
		}
	}
}

// TestHealNodeLossEndsWithAPass: after a node loss every durable counter
// may be behind until a pass over the log that started after the loss has
// ended, also when a pass takes several sweeps (it never ended then).
func TestHealNodeLossEndsWithAPass(t *testing.T) {
	d, _, clk := pagedService(t, 250, 40, 100)
	ctx := context.Background()
	sweep := func() {
		t.Helper()
		clk.Advance(time.Minute)
		if rep, err := d.Heal(ctx); err != nil || !rep.Claimed {
			t.Fatalf("sweep: %+v, %v", rep, err)
		}
	}
	sweep() // a pass starts
	d.heal.nodeLost(clk.Now())
	sweep()
	sweep() // the pass that started before the loss ends
	if d.Behind("other") == 0 {
		t.Fatal("the loss's staleness ended with a pass that started before it")
	}
	sweep()
	sweep()
	if d.Behind("other") == 0 {
		t.Fatal("the loss's staleness ended before a whole pass after it")
	}
	sweep() // the first pass after the loss ends
	if b := d.Behind("other"); b != 0 {
		t.Fatalf("Behind = %v after a whole pass that started after the loss", b)
	}
}

// TestRestoreInPages: a node's restore reads the checkpoints a page at a
// time and restores each counter from all of its checkpoints at once,
// also when they straddle pages: every sub-counter comes back once, and
// the label-set record written for a counter names all its labels.
func TestRestoreInPages(t *testing.T) {
	d, be, _ := pagedService(t, 0, 4, 100)
	ctx := context.Background()
	labels := []string{"0", "1", "2"}
	var cps []durable.Checkpoint
	want := map[string]int64{}
	for i := range 9 {
		for j, l := range labels {
			sub := keyspace.SubKey(fmt.Sprintf("r:%d", i), l)
			cps = append(cps, durable.Checkpoint{Key: sub, Total: int64(10*i + j + 1), Epoch: 1})
			want[sub] = int64(10*i + j + 1)
		}
	}
	if err := d.be.SaveCheckpoints(ctx, cps); err != nil {
		t.Fatal(err)
	}
	be.take()
	topo, err := d.eng.Store().Topology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	restored := 0
	for _, node := range topo.Nodes {
		r, err := d.ck.restore(ctx, topo, node, 7, time.Time{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		restored += r.Keys
	}
	if restored != len(cps) {
		t.Errorf("restored %d sub-counters, want %d", restored, len(cps))
	}
	listed, _ := be.take()
	for _, l := range listed {
		if l > 4 {
			t.Errorf("a listing of %d checkpoints, more than a page: %v", l, listed)
		}
	}
	subs := make([]string, 0, len(want))
	for sub := range want {
		subs = append(subs, sub)
	}
	vals, err := d.eng.Store().Get(ctx, subs)
	if err != nil {
		t.Fatal(err)
	}
	for i, sub := range subs {
		if vals[i] != want[sub] {
			t.Errorf("%s = %d, want %d", sub, vals[i], want[sub])
		}
	}
	for i := range 9 {
		key := fmt.Sprintf("r:%d", i)
		_, read, err := d.eng.Labels(ctx, key)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(read, labels) {
			t.Errorf("%s reads labels %v, want %v", key, read, labels)
		}
	}
}
