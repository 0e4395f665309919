package hotcount_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/store/mem"
)

// dropNode deletes every key the embedded store's node holds, as a node
// that restarted empty would have lost them.
func dropNode(t *testing.T, st *mem.Store, node string) {
	t.Helper()
	ctx := context.Background()
	topo, err := st.Topology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var lost []string
	for _, k := range st.Keys() {
		if topo.NodeOf(k) == node {
			lost = append(lost, k)
		}
	}
	if err := st.Del(ctx, lost); err != nil {
		t.Fatal(err)
	}
}

// TestFastRestoreOnceAcrossProcesses: two Clients (two processes) share a
// cache and a durable store. A node loses its data; both notice it in the
// same round and restore, and every lost sub-counter is restored exactly
// once; writes made after the loss are kept. A third Client started later
// restores nothing.
func TestFastRestoreOnceAcrossProcesses(t *testing.T) {
	ctx := context.Background()
	st := mustMem(t)
	ds := durStores()[0]
	loc := ds.loc(t)
	var restored atomic.Int64
	cfg := hotcount.Config{
		Store:      st,
		Defaults:   hotcount.Namespace{NoColdStart: true},
		Reads:      hotcount.ReadConfig{NoCache: true},
		Durability: hotcount.DurabilityConfig{Store: ds.open(t, loc), CheckpointInterval: time.Hour, OnRestore: func(r hotcount.Restore) { restored.Add(r.Amount) }},
	}
	c1 := durClient(t, cfg)
	cfg.Durability.Store = ds.open(t, loc)
	c2 := durClient(t, cfg)
	keys := []string{"likes:1", "likes:2", "views:3"}
	want := map[string]int64{}
	for i := range 300 {
		k := keys[i%3]
		if err := c1.Incr(ctx, k, int64(1+i%4)); err != nil {
			t.Fatal(err)
		}
		want[k] += int64(1 + i%4)
	}
	for _, c := range []*hotcount.Client{c1, c2} {
		if _, err := c.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if s := c1.Stats().Durability; s.Saved != 24 || s.Tracked != 3 {
		t.Fatalf("after one checkpoint: %+v, want 24 sub-counters saved, 3 counters watched", s)
	}
	// A second round reads and saves nothing: the first read every
	// counter after its last acknowledged write.
	if rep, err := c1.Checkpoint(ctx); err != nil || rep.Saved != 0 || rep.Counters != 0 {
		t.Fatalf("idle round: %+v %v", rep, err)
	}

	onNode, node := emptyNode(t, st, c1, keys)
	for range 10 { // writers do not stop
		if err := c2.Incr(ctx, "likes:1", 1); err != nil {
			t.Fatal(err)
		}
	}
	want["likes:1"] += 10

	var wg sync.WaitGroup
	reps := make([]hotcount.CheckpointReport, 2)
	for i, c := range []*hotcount.Client{c1, c2} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var err error
			if reps[i], err = c.Checkpoint(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if restored.Load() != onNode {
		t.Fatalf("restored %d in all, want %d (what the node held); %+v %+v", restored.Load(), onNode, reps[0], reps[1])
	}
	for _, k := range keys {
		r, err := c1.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if r.Value != want[k] {
			t.Fatalf("%s = %d after restore, want %d", k, r.Value, want[k])
		}
	}
	if n := len(c1.Restores()) + len(c2.Restores()); n < 1 {
		t.Fatalf("no restore recorded: %+v %+v", reps[0], reps[1])
	}
	t.Logf("restores: %+v %+v", c1.Restores(), c2.Restores())

	// Later rounds and a fresh process restore nothing more.
	cfg.Durability.Store = ds.open(t, loc)
	c3 := durClient(t, cfg)
	for _, c := range []*hotcount.Client{c1, c2, c3} {
		if rep, err := c.Checkpoint(ctx); err != nil || len(rep.Restores) != 0 {
			t.Fatalf("later round: %+v %v", rep, err)
		}
	}
	if restored.Load() != onNode {
		t.Fatalf("restored %d in all after later rounds, want %d", restored.Load(), onNode)
	}

	// Clear is checkpointed too: a loss after it does not bring the value
	// back.
	if err := c1.Clear(ctx, "views:3"); err != nil {
		t.Fatal(err)
	}
	if _, err := c1.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	dropNode(t, st, node)
	if _, err := c1.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if r, _ := c1.Get(ctx, "views:3"); r.Value != 0 {
		t.Fatalf("cleared counter restored to %d", r.Value)
	}
}

// TestFastModePrimaryRestartedEmpty runs writers against a 3-primary
// cluster without replicas, restarts one primary with its memory wiped,
// and checks that the counters are restored from their checkpoints while
// the writers keep going, losing at most what was written since the last
// checkpoint before the restart.
func TestFastModePrimaryRestartedEmpty(t *testing.T) {
	const interval = 200 * time.Millisecond
	ctx := context.Background()
	cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Stop() })
	ds := durStores()[0]

	const workers = 8
	var acked, uncertain atomic.Int64
	restoredCh := make(chan hotcount.Restore, 8)
	c := durClient(t, hotcount.Config{
		Redis: hotcount.RedisConfig{Addrs: cl.Seeds()},
		Reads: hotcount.ReadConfig{NoCache: true},
		// The Client checkpoints every interval; the test drives further
		// rounds at the same pace to know what each one saw.
		Durability: hotcount.DurabilityConfig{Store: ds.open(t, ds.loc(t)), CheckpointInterval: interval, OnRestore: func(r hotcount.Restore) { restoredCh <- r }},
		Timeout:    500 * time.Millisecond,
	})
	keys := []string{"fast:a", "fast:b", "fast:c", "fast:d"}

	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				if err := c.Incr(ctx, keys[(w+i)%len(keys)], 1); err != nil {
					uncertain.Add(1) // refused, or applied without a reply
					continue
				}
				acked.Add(1)
			}
		}()
	}
	// The checkpointer: lastGood is the acknowledged count just before
	// the last round that saved every node (its read came after it).
	var lastGood, goodRounds atomic.Int64
	driverDone := make(chan struct{})
	go func() {
		defer close(driverDone)
		tk := time.NewTicker(interval)
		defer tk.Stop()
		for {
			select {
			case <-stop:
				return
			case <-tk.C:
			}
			a := acked.Load()
			rep, err := c.Checkpoint(ctx)
			if err == nil && rep.Skipped == 0 && len(rep.Restores) == 0 {
				lastGood.Store(a)
				goodRounds.Add(1)
			}
		}
	}()
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for !cond() {
			if time.Now().After(deadline) {
				close(stop)
				t.Fatalf("timed out waiting for %s", what)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	start := time.Now()
	waitFor("three good checkpoint rounds", func() bool { return goodRounds.Load() >= 3 })

	prim, err := cl.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a1 := lastGood.Load()
	if err := cl.Node(prim[0]).RestartEmpty(ctx); err != nil {
		t.Fatal(err)
	}
	// The old process is gone: later acknowledgements are of writes that
	// reached the new, empty one (or another node), except at most one in
	// flight per writer whose reply was read before the exit.
	a2 := acked.Load() + workers
	var r hotcount.Restore
	select {
	case r = <-restoredCh:
	case <-time.After(30 * time.Second):
		close(stop)
		t.Fatal("no restore after the primary restarted empty")
	}
	g := goodRounds.Load()
	waitFor("two good rounds after the restore", func() bool { return goodRounds.Load() >= g+2 })
	close(stop)
	wg.Wait()
	<-driverDone
	elapsed := time.Since(start)

	var final int64
	for _, k := range keys {
		v, err := c.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		final += v.Value
	}
	loss := acked.Load() - final
	bound := a2 - a1
	rate := float64(acked.Load()) / elapsed.Seconds()
	t.Logf("restore %+v", r)
	t.Logf("acked %d, uncertain %d, final %d: loss %d; bound (acked between the start of the last checkpoint before the restart and the restart) %d; rate %.0f/s × interval %v = %.0f",
		acked.Load(), uncertain.Load(), final, loss, bound, rate, interval, rate*interval.Seconds())
	if r.Node != prim[0] || r.Keys == 0 || r.Amount == 0 {
		t.Fatalf("restore %+v, want sub-counters of %s restored", r, prim[0])
	}
	if loss > bound {
		t.Fatalf("lost %d increments, more than the %d acknowledged since the last checkpoint", loss, bound)
	}
	if loss < -uncertain.Load() {
		t.Fatalf("final %d exceeds acknowledged %d plus uncertain %d: double-counted restore", final, acked.Load(), uncertain.Load())
	}
}

// hookMeta is a durable store whose LoadMeta of a sentinel record runs
// before, once after it is set, a function (another process acting
// between this process's read of the sentinels and its read of their
// records), and whose SaveMeta of a sentinel record fails, once, after
// failSave is set.
type hookMeta struct {
	durable.Backend
	before   atomic.Pointer[func()]
	failSave atomic.Bool
}

func (h *hookMeta) LoadMeta(ctx context.Context, key string) ([]byte, error) {
	if strings.HasPrefix(key, "hotcount:sentinel:") {
		if f := h.before.Swap(nil); f != nil {
			(*f)()
		}
	}
	return h.Backend.LoadMeta(ctx, key)
}

func (h *hookMeta) SaveMeta(ctx context.Context, key string, data []byte) error {
	if strings.HasPrefix(key, "hotcount:sentinel:") && h.failSave.Swap(false) {
		return errors.New("save meta: connection reset")
	}
	return h.Backend.SaveMeta(ctx, key, data)
}

// restoreFixture writes 40 counters with c, saves them with every Client
// of cs, empties node 1 of st and returns what it held and the values.
func restoreFixture(t *testing.T, st *mem.Store, c *hotcount.Client, cs ...*hotcount.Client) (onNode int64, want map[string]int64) {
	t.Helper()
	ctx := context.Background()
	want = map[string]int64{}
	for i := range 40 {
		k := fmt.Sprintf("likes:%d", i)
		want[k] = int64(i + 1)
		if err := c.Incr(ctx, k, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range cs {
		if _, err := c.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}
	onNode, _ = emptyNode(t, st, c, slices.Collect(maps.Keys(want)))
	return onNode, want
}

// emptyNode empties node 1 of st and returns what keys' sub-counters (as
// c places them) held on it, and the node; it fails t when they held
// nothing there.
func emptyNode(t *testing.T, st *mem.Store, c *hotcount.Client, keys []string) (int64, string) {
	t.Helper()
	ctx := context.Background()
	topo, _ := st.Topology(ctx)
	node := topo.Nodes[1]
	var onNode int64
	for _, k := range keys {
		subs, err := c.SubKeys(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		for _, sub := range subs {
			if topo.NodeOf(sub) == node {
				v, _ := st.Get(ctx, []string{sub})
				onNode += v[0]
			}
		}
	}
	if onNode == 0 {
		t.Fatal("no sub-counter on the node")
	}
	dropNode(t, st, node)
	return onNode, node
}

// checkValues fails t unless c reads every counter of want as want.
func checkValues(t *testing.T, c *hotcount.Client, want map[string]int64) {
	t.Helper()
	for k, w := range want {
		r, err := c.Get(context.Background(), k)
		if err != nil {
			t.Fatal(err)
		}
		if r.Value != w {
			t.Errorf("%s = %d after the restore, want %d", k, r.Value, w)
		}
	}
}

// TestFastRestoreSentinelReadBeforeRecord: a process reads a lost node's
// sentinel missing, and before it reads the store's record another
// process creates the sentinel, restores the node and records the new
// incarnation. The first process must take the node as restored: it used
// to create a second incarnation on top of the first (its creation token
// is named after the record it read, the new one) and restore the node
// again, doubling every sub-counter and reporting the amount twice.
func TestFastRestoreSentinelReadBeforeRecord(t *testing.T) {
	ctx := context.Background()
	st := mustMem(t)
	ds := durStores()[0]
	loc := ds.loc(t)
	var restored atomic.Int64
	cfg := hotcount.Config{
		Store:      st,
		Reads:      hotcount.ReadConfig{NoCache: true},
		Durability: hotcount.DurabilityConfig{Store: ds.open(t, loc), CheckpointInterval: time.Hour, OnRestore: func(r hotcount.Restore) { restored.Add(r.Amount) }},
	}
	c1 := durClient(t, cfg)
	hook := &hookMeta{Backend: ds.open(t, loc)}
	cfg.Durability.Store = hook
	c2 := durClient(t, cfg)
	onNode, want := restoreFixture(t, st, c1, c1, c2)
	ran := false
	other := func() {
		ran = true
		if _, err := c1.Checkpoint(ctx); err != nil {
			t.Error(err)
		}
	}
	hook.before.Store(&other)
	if _, err := c2.Checkpoint(ctx); err != nil {
		t.Fatal(err)
	}
	if !ran {
		t.Fatal("the second process did not read a sentinel record")
	}
	if got := restored.Load(); got != onNode {
		t.Errorf("restored %d in all, want %d (what the node held); restores: %+v, %+v", got, onNode, c1.Restores(), c2.Restores())
	}
	checkValues(t, c1, want)
	// Later rounds of both restore nothing more.
	for _, c := range []*hotcount.Client{c1, c2} {
		if rep, err := c.Checkpoint(ctx); err != nil || len(rep.Restores) != 0 {
			t.Fatalf("later round: %+v %v", rep, err)
		}
	}
}

// TestFastRestoreReportedWhenRecordFails: a round restores a lost node,
// then fails to record its new incarnation in the durable store. The
// restore is reported all the same (OnRestore, the round's report), as
// the Stats count it; the next round records the node and restores
// nothing twice. The restore used to be dropped from the reports, and the
// next round's repeat reported nothing applied: OnRestore never saw the
// amount.
func TestFastRestoreReportedWhenRecordFails(t *testing.T) {
	ctx := context.Background()
	st := mustMem(t)
	ds := durStores()[0]
	var restored atomic.Int64
	hook := &hookMeta{Backend: ds.open(t, ds.loc(t))}
	c := durClient(t, hotcount.Config{
		Store:      st,
		Reads:      hotcount.ReadConfig{NoCache: true},
		Durability: hotcount.DurabilityConfig{Store: hook, CheckpointInterval: time.Hour, OnRestore: func(r hotcount.Restore) { restored.Add(r.Amount) }},
	})
	onNode, want := restoreFixture(t, st, c, c)
	hook.failSave.Store(true)
	rep, err := c.Checkpoint(ctx)
	if err == nil {
		t.Fatal("the round whose record failed reported no error")
	}
	if len(rep.Restores) != 1 || rep.Restores[0].Amount != onNode {
		t.Errorf("the round whose record failed reports %+v, want one restore of %d", rep.Restores, onNode)
	}
	if got := restored.Load(); got != onNode {
		t.Errorf("OnRestore saw %d after the round whose record failed, want %d", got, onNode)
	}
	if rep, err := c.Checkpoint(ctx); err != nil || len(rep.Restores) != 1 || rep.Restores[0].Amount != 0 {
		t.Errorf("the next round: %+v %v, want one restore of nothing (done already)", rep, err)
	}
	if got, s := restored.Load(), c.Stats().Durability; got != onNode || s.RestoredAmount != onNode {
		t.Errorf("OnRestore saw %d in all, Stats %d, want %d", got, s.RestoredAmount, onNode)
	}
	if rep, err := c.Checkpoint(ctx); err != nil || len(rep.Restores) != 0 {
		t.Errorf("a later round: %+v %v, want no restore", rep, err)
	}
	checkValues(t, c, want)
}
