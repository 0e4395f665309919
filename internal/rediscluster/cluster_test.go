package rediscluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// shared is the 3+3 cluster of this package's tests.
var shared *Cluster

func TestMain(m *testing.M) {
	code := runWithCluster(m.Run)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// runWithCluster starts shared, runs the tests and stops it; without
// redis-server or a cluster the run fails, saying why.
func runWithCluster(run func() int) int {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	c, err := StartCluster(ctx, ClusterOptions{Replicas: 1})
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "rediscluster: these tests need a real Redis: %v\n", err)
		return 1
	}
	shared = c
	code := run()
	if err := c.Stop(); err != nil {
		fmt.Fprintf(os.Stderr, "rediscluster: stopping the test cluster: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// testCtx returns a context that ends after d or with the test.
func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

// nodeEntries returns CLUSTER NODES of addr, parsed.
func nodeEntries(t *testing.T, ctx context.Context, addr string) []nodeEntry {
	t.Helper()
	s, err := Do(ctx, addr, "CLUSTER", "NODES")
	if err != nil {
		t.Fatal(err)
	}
	return parseClusterNodes(s)
}

func TestSharedClusterHealthy(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	seeds := shared.Seeds()
	if len(seeds) != 6 || len(shared.Nodes()) != 6 {
		t.Fatalf("seeds %v, want 6", seeds)
	}
	lo, hi, err := portRange()
	if err != nil {
		t.Fatal(err)
	}
	ports := map[int]bool{}
	for _, n := range shared.Nodes() {
		if ports[n.Port] {
			t.Fatalf("port %d used twice", n.Port)
		}
		ports[n.Port] = true
		if n.Port < lo || n.Port >= hi {
			t.Errorf("port %d outside the picked range [%d,%d)", n.Port, lo, hi)
		}
		if portFree(n.Port + busOffset) {
			t.Errorf("%s: bus port %d is not listened on", n.Addr, n.Port+busOffset)
		}
		if shared.Node(n.Addr) != n {
			t.Errorf("Node(%q) is not the node", n.Addr)
		}
		info, err := Do(ctx, n.Addr, "CLUSTER", "INFO")
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range []string{"cluster_state:ok", "cluster_slots_assigned:16384", "cluster_known_nodes:6", "cluster_size:3"} {
			if !strings.Contains(info, f) {
				t.Errorf("%s: CLUSTER INFO lacks %q", n.Addr, f)
			}
		}
	}
	if shared.Node("127.0.0.1:1") != nil {
		t.Error("Node of an unknown address is not nil")
	}
	ps, err := shared.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 3 {
		t.Fatalf("primaries %v, want 3", ps)
	}
	for _, p := range ps {
		repl, err := Do(ctx, p, "INFO", "replication")
		if err != nil {
			t.Fatal(err)
		}
		if v, _ := infoField(repl, "connected_slaves"); v != "1" {
			t.Errorf("%s: connected_slaves %q, want 1", p, v)
		}
		if v, _ := infoField(repl, "slave0"); !strings.Contains(v, "state=online") {
			t.Errorf("%s: replica %q not online", p, v)
		}
	}
}

func TestClusterDoFlushAndStats(t *testing.T) {
	ctx := testCtx(t, 20*time.Second)
	if err := shared.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	if err := shared.ResetStats(ctx); err != nil {
		t.Fatal(err)
	}
	const keys = 30 // enough to land on every primary
	for i := range keys {
		if _, err := shared.Do(ctx, "INCRBY", "k"+strconv.Itoa(i), strconv.Itoa(i+1)); err != nil {
			t.Fatal(err)
		}
	}
	for i := range keys {
		v, err := shared.Do(ctx, "GET", "k"+strconv.Itoa(i))
		if err != nil || v != strconv.Itoa(i+1) {
			t.Fatalf("GET k%d = %q, %v; want %d", i, v, err, i+1)
		}
	}
	ps, err := shared.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var incrs int64
	for _, p := range ps {
		st, err := CommandStats(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		if st["incrby"] == 0 {
			t.Errorf("%s: no INCRBY counted (%v)", p, st)
		}
		incrs += st["incrby"]
	}
	if incrs != keys {
		t.Errorf("INCRBY calls on primaries = %d, want %d", incrs, keys)
	}
	if err := shared.FlushAll(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := shared.Do(ctx, "GET", "k0"); !errors.Is(err, ErrNil) {
		t.Errorf("GET after FlushAll: %v, want ErrNil", err)
	}
	if _, err := Do(ctx, ps[0], "NOSUCHCOMMAND"); !errors.Is(err, ErrReply) {
		t.Errorf("unknown command: %v, want ErrReply", err)
	}
	s, err := Do(ctx, ps[0], "CLUSTER", "KEYSLOT", "{user1000}.following")
	if err != nil || s != "3443" {
		t.Errorf("CLUSTER KEYSLOT = %q, %v; want 3443", s, err)
	}
}

// replicasOf returns the replicas of the primary at addr, as it sees them.
func replicasOf(t *testing.T, ctx context.Context, addr string) []string {
	t.Helper()
	es := nodeEntries(t, ctx, addr)
	me, ok := myself(es)
	if !ok {
		t.Fatalf("%s: no myself entry", addr)
	}
	var out []string
	for _, e := range es {
		if e.has("slave") && e.master == me.id && !e.has("fail") {
			out = append(out, e.addr)
		}
	}
	return out
}

// keyOn returns a key that the primary at addr owns, set to value.
func keyOn(t *testing.T, ctx context.Context, addr, value string) string {
	t.Helper()
	for i := range 1000 {
		k := "failover:" + strconv.Itoa(i)
		_, err := Do(ctx, addr, "SET", k, value)
		if err == nil {
			return k
		}
		if !strings.Contains(err.Error(), "MOVED") {
			t.Fatal(err)
		}
	}
	t.Fatalf("no key owned by %s", addr)
	return ""
}

func TestKillPrimaryFailsOverAndRestartRejoins(t *testing.T) {
	ctx := testCtx(t, 40*time.Second)
	ps, err := shared.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := shared.Node(ps[0])
	rs := replicasOf(t, ctx, p.Addr)
	if len(rs) != 1 {
		t.Fatalf("primary %s has replicas %v, want one", p.Addr, rs)
	}
	replica := rs[0]
	key := keyOn(t, ctx, p.Addr, "before-kill")
	if n, err := Do(ctx, p.Addr, "WAIT", "1", "5000"); err != nil || n != "1" {
		t.Fatalf("WAIT = %q, %v", n, err)
	}

	start := time.Now()
	if err := p.Kill(); err != nil {
		t.Fatal(err)
	}
	if p.Running() || p.PID() != 0 {
		t.Fatal("killed node still running")
	}
	if err := p.Kill(); err != nil {
		t.Fatalf("second Kill: %v", err)
	}
	if err := poll(ctx, func(ctx context.Context) error {
		ps, err := shared.Primaries(ctx)
		if err != nil {
			return err
		}
		if !slices.Contains(ps, replica) || slices.Contains(ps, p.Addr) {
			return fmt.Errorf("primaries %v", ps)
		}
		return nil
	}); err != nil {
		t.Fatalf("replica %s not promoted: %v", replica, err)
	}
	if err := shared.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("failover took %v", time.Since(start))
	if v, err := Do(ctx, replica, "GET", key); err != nil || v != "before-kill" {
		t.Errorf("GET %s on the promoted replica = %q, %v", key, v, err)
	}

	start = time.Now()
	if err := p.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := shared.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart and rejoin took %v", time.Since(start))
	repl, err := Do(ctx, p.Addr, "INFO", "replication")
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := infoField(repl, "role"); v != "slave" {
		t.Errorf("restarted old primary has role %q, want slave", v)
	}
	if v, err := Do(ctx, p.Addr, "GET", key); err == nil || !strings.Contains(err.Error(), "MOVED") {
		t.Errorf("GET on the old primary = %q, %v; want a MOVED redirect", v, err)
	}
	if ps, err := shared.Primaries(ctx); err != nil || len(ps) != 3 {
		t.Errorf("primaries after rejoin %v, %v", ps, err)
	}
}

func TestRestartEmptyReplicaResyncs(t *testing.T) {
	ctx := testCtx(t, 30*time.Second)
	ps, err := shared.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	key := keyOn(t, ctx, ps[1], "kept")
	if n, err := Do(ctx, ps[1], "WAIT", "1", "5000"); err != nil || n != "1" {
		t.Fatalf("WAIT = %q, %v", n, err)
	}
	replicas := replicasOf(t, ctx, ps[1])
	if len(replicas) != 1 {
		t.Fatalf("primary %s has replicas %v, want one", ps[1], replicas)
	}
	r := shared.Node(replicas[0])
	if err := r.RestartEmpty(ctx); err != nil {
		t.Fatal(err)
	}
	if err := shared.WaitHealthy(ctx); err != nil {
		t.Fatal(err)
	}
	// READONLY holds for one connection only, so pipeline it with the read.
	rs, err := exchange(ctx, r.Addr, [][]string{{"READONLY"}, {"GET", key}})
	if err != nil {
		t.Fatal(err)
	}
	if rs[1].str != "kept" {
		t.Errorf("GET %s on the resynced replica = %+v, want kept", key, rs[1])
	}
}

func TestStopLeavesNoProcesses(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 30*time.Second)
	c, err := StartCluster(ctx, ClusterOptions{Primaries: 3})
	if err != nil {
		t.Fatal(err)
	}
	var pids []int
	for _, n := range c.Nodes() {
		pids = append(pids, n.PID())
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	for i, pid := range pids {
		if !processGone(pid) {
			t.Errorf("pid %d of %s still runs", pid, c.Nodes()[i].Addr)
		}
	}
	if _, err := os.Stat(c.Dir()); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("temporary dir %s not removed: %v", c.Dir(), err)
	}
	if err := c.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	if err := c.Nodes()[0].Restart(ctx); !errors.Is(err, ErrStopped) {
		t.Errorf("Restart after Stop: %v, want ErrStopped", err)
	}
}

func TestStartClusterRejectsBadOptions(t *testing.T) {
	t.Parallel()
	ctx := testCtx(t, 5*time.Second)
	for _, o := range []ClusterOptions{
		{Primaries: -1},
		{Replicas: -1},
		{BasePort: -1},
		{BasePort: 65530},
	} {
		if _, err := StartCluster(ctx, o); !errors.Is(err, ErrInvalidOptions) {
			t.Errorf("StartCluster(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
}
