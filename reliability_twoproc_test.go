//go:build linux

package hotcount_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/store/redis"
)

// twoProcEnv makes the test binary the second server process of
// TestTwoProcessesNodeEmpty: "SEEDS|SCHEMA". It runs from init (no shared
// cluster), prints "ready", then one line per restore it made
// ("restore AMOUNT"), and on stdin's end closes its Client and prints its
// healer's repairs ("repairs N AMOUNT").
const twoProcEnv = "HOTCOUNT_TWOPROC_CHILD"

func init() {
	if spec := os.Getenv(twoProcEnv); spec != "" {
		os.Exit(twoProcChild(spec))
	}
}

// twoProcConfig is the configuration both processes share: fast-mode
// counters under "fast:", durable ones elsewhere.
func twoProcConfig(seeds []string, be hotcount.DurabilityConfig) hotcount.Config {
	be.CheckpointInterval, be.HealInterval = durHealInterval, durHealInterval
	return hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: seeds},
		Defaults:   hotcount.Namespace{Mode: hotcount.ModeDurable, FlushInterval: 100 * time.Millisecond},
		Namespaces: []hotcount.Namespace{{Prefix: "fast:", Mode: hotcount.ModeFast}},
		Reads:      hotcount.ReadConfig{NoCache: true},
		Timeout:    500 * time.Millisecond,
		Durability: be,
	}
}

func twoProcChild(spec string) int {
	seeds, schema, _ := strings.Cut(spec, "|")
	be, err := durOpenSpec("postgres:" + schema)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	out := make(chan string, 64)
	cfg := twoProcConfig(strings.Split(seeds, ","), hotcount.DurabilityConfig{Store: be,
		OnRestore: func(r hotcount.Restore) { out <- fmt.Sprintf("restore %d", r.Amount) }})
	c, err := hotcount.New(context.Background(), cfg)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 1
	}
	fmt.Println("ready")
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(done)
	}()
	for {
		select {
		case l := <-out:
			fmt.Println(l)
		case <-done:
			err := c.Close(context.Background())
			s := c.Stats().Durability
			fmt.Printf("repairs %d %d\n", s.Repairs, s.RepairedAmount)
			if err != nil {
				fmt.Fprintln(os.Stderr, "child close:", err)
				return 1
			}
			return 0
		}
	}
}

// TestTwoProcessesNodeEmpty: two server processes share one Redis Cluster
// and one PostgreSQL store. A primary comes back empty; both processes
// notice. Every fast-mode counter is restored exactly once (the restores
// of both processes add up to what was lost, and the values are what was
// written), and every durable counter's view heals to its exact value and
// stays there (no second repair).
func TestTwoProcessesNodeEmpty(t *testing.T) {
	ctx, cl := faultCluster(t, 0)
	schema := testenv.PostgresSchema(t)
	ds := durStores()[1]
	restoredA := make(chan int64, 16)
	a := durClient(t, twoProcConfig(cl.Seeds(), hotcount.DurabilityConfig{Store: ds.open(t, schema),
		OnRestore: func(r hotcount.Restore) { restoredA <- r.Amount }}))

	want := map[string]int64{}
	var fastKeys, durKeys []string
	for i := range 30 {
		f, d := fmt.Sprintf("fast:%d", i), fmt.Sprintf("dur:%d", i)
		fastKeys, durKeys = append(fastKeys, f), append(durKeys, d)
		want[f], want[d] = int64(i+1), int64(i+1)
		if err := a.Incr(ctx, f, int64(i+1)); err != nil {
			t.Fatal(err)
		}
		if err := a.Incr(ctx, d, int64(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	if err := a.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	for range 2 { // the second round saves what the first saw first
		if _, err := a.Checkpoint(ctx); err != nil {
			t.Fatal(err)
		}
	}

	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), twoProcEnv+"="+strings.Join(cl.Seeds(), ",")+"|"+schema)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 64)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	select {
	case l := <-lines:
		if l != "ready" {
			t.Fatalf("child said %q", l)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("child not ready after 60 s")
	}

	prim, err := cl.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	// The node's share of the fast counters: what a restore must add.
	var lost int64
	topo := subNodes(t, a, cl.Seeds(), fastKeys)
	for _, k := range fastKeys {
		if topo[k] == prim[0] {
			lost += want[k]
		}
	}
	var amountA, amountB int64
	var seenA, seenB bool
	// The restart deletes the node's files: it always comes back empty.
	// (A second restart would be a second loss, restored again.)
	if err := cl.Node(prim[0]).RestartEmpty(ctx); err != nil {
		t.Fatal(err)
	}
	var probe int64
	for _, k := range fastKeys {
		if topo[k] == prim[0] {
			if r, err := a.GetFresh(ctx, k); err == nil {
				probe += r.Value
			}
		}
	}
	t.Logf("right after the restart the node's fast counters read %d of %d", probe, lost)
	// Collect the restore reports of both processes until both reported
	// or the node's fast counters read what was written again (a process
	// that finds the restore done by the other reports nothing); reports
	// that come later are added at the end, before the check.
	restored := func() bool {
		for _, k := range fastKeys {
			if topo[k] != prim[0] {
				continue
			}
			if r, err := a.GetFresh(ctx, k); err != nil || r.Value != want[k] {
				return false
			}
		}
		return true
	}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	deadline := time.After(30 * time.Second)
collect:
	for !seenA || !seenB {
		select {
		case x := <-restoredA:
			amountA, seenA = amountA+x, true
		case l, ok := <-lines:
			if !ok {
				t.Fatal("the other process ended early")
			}
			if v, ok := strings.CutPrefix(l, "restore "); ok {
				x, _ := strconv.ParseInt(v, 10, 64)
				amountB, seenB = amountB+x, true
			}
		case <-tick.C:
			if restored() {
				break collect
			}
		case <-deadline:
			break collect
		}
	}
	t.Logf("node %s back empty; restore reports so far: this process %v (added %d), the other %v (added %d); the node held %d of the fast counters",
		prim[0], seenA, amountA, seenB, amountB, lost)
	exact := map[string]int64{}
	for _, k := range durKeys {
		exact[k] = want[k]
	}
	durConverge(t, a, exact, time.Now())
	// Several more sweeps of both processes: nothing is repaired twice,
	// and the fast counters hold exactly what was written.
	time.Sleep(10 * durHealInterval)
	if gap := durViewGap(t, a, exact); gap != 0 {
		t.Errorf("durable views off by %d after further sweeps: a repair counted twice", gap)
	}
	for _, k := range fastKeys {
		r, err := a.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if r.Value != want[k] {
			t.Errorf("%s = %d, want %d", k, r.Value, want[k])
		}
	}
	_ = stdin.Close()
	var repB string
	for l := range lines {
		if strings.HasPrefix(l, "repairs ") {
			repB = l
		}
		if v, ok := strings.CutPrefix(l, "restore "); ok {
			x, _ := strconv.ParseInt(v, 10, 64)
			amountB, seenB = amountB+x, true
		}
	}
	if err := a.Close(ctx); err != nil {
		t.Fatal(err)
	}
	for len(restoredA) > 0 {
		amountA, seenA = amountA+<-restoredA, true
	}
	t.Logf("restore reports in all: this process %v (added %d), the other %v (added %d); the node held %d of the fast counters",
		seenA, amountA, seenB, amountB, lost)
	// Each sub-counter is added back once, by one of the two, which
	// reports it: the reports add up to what the node held. (Only a
	// restore whose reply was lost after it applied goes unreported.)
	if sum := amountA + amountB; sum != lost {
		t.Errorf("the two processes report restoring %d in all (%d and %d), the node held %d", sum, amountA, amountB, lost)
	}
	s := a.Stats().Durability
	t.Logf("this process: repairs %d of %+d, sweeps %d, intervals swept by the other %d; the other: %s",
		s.Repairs, s.RepairedAmount, s.HealSweeps, s.HealSkipped, repB)
}

// subNodes returns the node of each cold fast counter's one sub-counter.
func subNodes(t *testing.T, c *hotcount.Client, seeds []string, keys []string) map[string]string {
	t.Helper()
	ctx := context.Background()
	st, err := redis.New(ctx, redis.Config{Addrs: seeds})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	topo, err := st.Topology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, k := range keys {
		subs, err := c.SubKeys(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		if len(subs) != 1 {
			t.Fatalf("%s has %d sub-counters, want 1 (cold)", k, len(subs))
		}
		out[k] = topo.NodeOf(subs[0])
	}
	return out
}
