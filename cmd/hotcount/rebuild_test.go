package main

import (
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/durable/postgres"
	"github.com/hotcount/hotcount/durable/sqlite"
	"github.com/hotcount/hotcount/internal/testenv"
)

func TestRebuildBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--data", "x"},
		{"--redis", "127.0.0.1:1"},
		{"--redis", "127.0.0.1:1", "--data", "x", "--postgres", "postgres://x"},
		{"--redis", "127.0.0.1:1", "--data", "x", "--schema", "s"},
		{"--redis", "127.0.0.1:1", "--data", "x", "--key", "a", "--prefix", "b"},
		{"--redis", "127.0.0.1:1", "--data", "x", "--key", "bad{key"},
		{"--redis", "127.0.0.1:1", "--data", "x", "--n", "0"},
		{"--redis", "127.0.0.1:1", "--data", "x", "extra"},
	} {
		code, _, errOut := clusterCLI(t, t.Context(), append([]string{"rebuild"}, args...)...)
		if code != exitUsage || strings.Count(strings.TrimSpace(errOut), "\n") != 0 || errOut == "" {
			t.Errorf("rebuild %q: exit %d, stderr %q; want exit 2 and one line", args, code, errOut)
		}
	}
}

// TestRebuildCommand writes durable counters, flushes Redis, and checks
// that `hotcount rebuild` brings the cache view back, on SQLite (--data)
// and PostgreSQL (--postgres --schema).
func TestRebuildCommand(t *testing.T) {
	ctx := t.Context()
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (durable.Backend, []string)
	}{
		{"sqlite", func(t *testing.T) (durable.Backend, []string) {
			dir := t.TempDir()
			db, err := sqlite.Open(ctx, sqlite.Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			return db, []string{"--data", dir}
		}},
		{"postgres", func(t *testing.T) (durable.Backend, []string) {
			url, schema := testenv.PostgresURL(), testenv.PostgresSchema(t)
			db, err := postgres.Open(ctx, postgres.Config{URL: url, Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			return db, []string{"--postgres", url, "--schema", schema}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			be, flags := tc.open(t)
			c, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: []string{n.Addr}}, Defaults: hotcount.Namespace{Mode: hotcount.ModeDurable}, Durability: hotcount.DurabilityConfig{Store: be}})
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]int64{}
			for i := range 30 {
				k := fmt.Sprintf("cli:rebuild:%d", i%3)
				if err := c.IncrID(ctx, k, int64(i+1), fmt.Sprint("id-", i)); err != nil {
					t.Fatal(err)
				}
				want[k] += int64(i + 1)
			}
			if err := c.Close(ctx); err != nil {
				t.Fatal(err)
			}
			be.Close()
			if _, err := testenv.Do(ctx, n.Addr, "FLUSHALL"); err != nil {
				t.Fatal(err)
			}
			args := append([]string{"rebuild", "--redis", n.Addr, "--prefix", "cli:rebuild:", "--json"}, flags...)
			code, out, errOut := clusterCLI(t, ctx, args...)
			if code != exitOK {
				t.Fatalf("rebuild: exit %d, stderr %q", code, errOut)
			}
			var rep struct{ Keys, Corrected int }
			if err := json.Unmarshal([]byte(out), &rep); err != nil || rep.Keys != 3 || rep.Corrected != 3 {
				t.Fatalf("rebuild printed %q (%v), want 3 keys corrected", out, err)
			}
			for k, v := range want {
				code, out, errOut := clusterCLI(t, ctx, "get", "--redis", n.Addr, "--key", k, "--json")
				var got struct{ Value int64 }
				if code != exitOK || json.Unmarshal([]byte(out), &got) != nil || got.Value != v {
					t.Fatalf("get %s after rebuild: exit %d, %q %q; want %d", k, code, out, errOut, v)
				}
			}
			// One key, already right: nothing to correct; text output.
			args = append([]string{"rebuild", "--redis", n.Addr, "--key", "cli:rebuild:1"}, flags...)
			code, out, errOut = clusterCLI(t, ctx, args...)
			if code != exitOK || !strings.Contains(out, "1 checked, 0 corrected") {
				t.Fatalf("rebuild --key: exit %d, %q %q", code, out, errOut)
			}
		})
	}
}

// rebuildCluster starts a 3-primary cluster without replicas for one test.
func rebuildCluster(t *testing.T) *testenv.Cluster {
	t.Helper()
	cl, err := testenv.StartCluster(t.Context(), testenv.ClusterOptions{Primaries: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cl.Stop() })
	return cl
}

// rebuildClient opens a Client on seeds with the SQLite store in dir; it
// checkpoints only when told to.
func rebuildClient(t *testing.T, seeds []string, dir string, nss ...hotcount.Namespace) *hotcount.Client {
	t.Helper()
	be, err := sqlite.Open(t.Context(), sqlite.Config{Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	return rebuildClientOn(t, seeds, be, nss...)
}

// rebuildClientOn is rebuildClient on the store be (closed with the test).
func rebuildClientOn(t *testing.T, seeds []string, be durable.Backend, nss ...hotcount.Namespace) *hotcount.Client {
	t.Helper()
	c, err := hotcount.New(t.Context(), hotcount.Config{
		Redis:      hotcount.RedisConfig{Addrs: seeds},
		Defaults:   hotcount.Namespace{Mode: hotcount.ModeFast},
		Namespaces: nss,
		Reads:      hotcount.ReadConfig{NoCache: true},
		Durability: hotcount.DurabilityConfig{Store: be, CheckpointInterval: time.Hour},
	})
	if err != nil {
		be.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { be.Close() })
	return c
}

// closeClient takes a last checkpoint round and closes c.
func closeClient(t *testing.T, c *hotcount.Client) {
	t.Helper()
	if _, err := c.Checkpoint(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(t.Context()); err != nil {
		t.Fatal(err)
	}
}

// cliGet reads key with `hotcount get` and no durable store (as any
// process that only has the cache does).
func cliGet(t *testing.T, seeds []string, key string) int64 {
	t.Helper()
	code, out, errOut := clusterCLI(t, t.Context(), "get", "--redis", strings.Join(seeds, ","), "--key", key, "--json")
	var got struct{ Value int64 }
	if code != exitOK || json.Unmarshal([]byte(out), &got) != nil {
		t.Fatalf("get %s: exit %d, %q %q", key, code, out, errOut)
	}
	return got.Value
}

// primaryHolding returns the primary that holds key.
func primaryHolding(t *testing.T, cl *testenv.Cluster, key string) string {
	t.Helper()
	prim, err := cl.Primaries(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range prim {
		if out, err := testenv.Do(t.Context(), p, "EXISTS", key); err == nil && out == "1" {
			return p
		}
	}
	t.Fatalf("no primary holds %s", key)
	return ""
}

// cacheDump returns every key of every primary with its DUMP.
func cacheDump(t *testing.T, cl *testenv.Cluster) map[string]string {
	t.Helper()
	prim, err := cl.Primaries(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, p := range prim {
		keys, err := testenv.Do(t.Context(), p, "KEYS", "*")
		if err != nil {
			t.Fatal(err)
		}
		for k := range strings.FieldsSeq(keys) {
			v, err := testenv.Do(t.Context(), p, "DUMP", k)
			if err != nil {
				t.Fatalf("DUMP %s: %v", k, err)
			}
			out[k] = v
		}
	}
	return out
}

// subSum sums the sub-counters "{key#label}" the cache holds, whatever
// the label set says.
func subSum(t *testing.T, cl *testenv.Cluster, key string) int64 {
	t.Helper()
	prim, err := cl.Primaries(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	var sum int64
	for _, p := range prim {
		keys, err := testenv.Do(t.Context(), p, "KEYS", "{"+key+"#*}")
		if err != nil {
			t.Fatal(err)
		}
		for k := range strings.FieldsSeq(keys) {
			if strings.HasSuffix(k, "#meta}") {
				continue
			}
			v, err := testenv.Do(t.Context(), p, "GET", k)
			if err != nil {
				t.Fatalf("GET %s: %v", k, err)
			}
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				t.Fatalf("GET %s = %q: %v", k, v, err)
			}
			sum += n
		}
	}
	return sum
}

func rebuildCLI(t *testing.T, seeds []string, dir string, args ...string) (int, string, string) {
	t.Helper()
	return clusterCLI(t, t.Context(), append([]string{"rebuild", "--redis", strings.Join(seeds, ","), "--data", dir}, args...)...)
}

// TestRebuildRefusesMissingData checks that a --data folder that does not
// exist, or holds no store, is refused with exit 2 and is not created.
func TestRebuildRefusesMissingData(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "nope")
	empty := t.TempDir()
	for _, dir := range []string{missing, empty} {
		code, out, errOut := clusterCLI(t, t.Context(), "rebuild", "--redis", "127.0.0.1:1", "--data", dir)
		if code != exitUsage || !strings.Contains(errOut, "holds no durable store") || out != "" {
			t.Errorf("rebuild --data %s: exit %d, stdout %q, stderr %q; want exit 2 and a clear message", dir, code, out, errOut)
		}
	}
	if _, err := os.Stat(missing); !os.IsNotExist(err) {
		t.Errorf("rebuild created the missing --data folder (%v)", err)
	}
	if ents, _ := os.ReadDir(empty); len(ents) != 0 {
		t.Errorf("rebuild wrote into the empty --data folder: %v", ents)
	}
	url, schema := testenv.PostgresURL(), testenv.PostgresSchema(t)
	code, out, errOut := clusterCLI(t, t.Context(), "rebuild", "--redis", "127.0.0.1:1", "--postgres", url, "--schema", schema)
	if code != exitUsage || !strings.Contains(errOut, "holds no durable store") || out != "" {
		t.Errorf("rebuild --schema %s (none): exit %d, stdout %q, stderr %q; want exit 2 and a clear message", schema, code, out, errOut)
	}
	if ok, err := postgres.Exists(t.Context(), postgres.Config{URL: url, Schema: schema}); err != nil || ok {
		t.Errorf("after the refused rebuild the store exists: %v %v", ok, err)
	}
}

// TestRebuildLeavesFastCounter checks that a fast-mode counter that was
// checkpointed, which the log does not have, is left alone by a rebuild
// of it by name or prefix (it used to be "corrected" to the log's 0).
func TestRebuildLeavesFastCounter(t *testing.T) {
	n, err := testenv.StartNode(t.Context(), testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	seeds, dir := []string{n.Addr}, t.TempDir()
	c := rebuildClient(t, seeds, dir)
	if err := c.Incr(t.Context(), "fastck:a", 100); err != nil {
		t.Fatal(err)
	}
	closeClient(t, c)
	for _, args := range [][]string{{"--key", "fastck:a"}, {"--prefix", "fastck:"}, {}} {
		code, out, errOut := rebuildCLI(t, seeds, dir, append(args, "--json")...)
		var rep struct{ Corrected int }
		if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || rep.Corrected != 0 {
			t.Fatalf("rebuild %q: exit %d, %q %q; want nothing corrected", args, code, out, errOut)
		}
		if v := cliGet(t, seeds, "fastck:a"); v != 100 {
			t.Fatalf("after rebuild %q the fast counter reads %d, want 100", args, v)
		}
	}
}

// TestRebuildRestoresLabelSets writes a counter of a namespace with N=16,
// loses the node that holds its label-set record, and checks that the
// rebuild restores the record with the values: a process without the
// durable store (and with the default N) then reads the whole value.
func TestRebuildRestoresLabelSets(t *testing.T) {
	cl := rebuildCluster(t)
	seeds, dir := cl.Seeds(), t.TempDir()
	const key = "n16:k"
	c := rebuildClient(t, seeds, dir, hotcount.Namespace{Prefix: "n16:", N: 16, Mode: hotcount.ModeFast, NoColdStart: true})
	for range 800 {
		if err := c.Incr(t.Context(), key, 1); err != nil {
			t.Fatal(err)
		}
	}
	sh, err := c.Shards(t.Context(), key)
	if err != nil {
		t.Fatal(err)
	}
	closeClient(t, c)
	metaKey := "{" + key + "#meta}"
	node := primaryHolding(t, cl, metaKey)
	if err := cl.Node(node).RestartEmpty(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitHealthy(t.Context()); err != nil {
		t.Fatal(err)
	}
	code, out, errOut := rebuildCLI(t, seeds, dir)
	if code != exitOK {
		t.Fatalf("rebuild: exit %d, %q %q", code, out, errOut)
	}
	t.Logf("rebuild: %s", out)
	if _, err := testenv.Do(t.Context(), node, "EXISTS", metaKey); err != nil {
		t.Fatal(err)
	}
	if got, _ := testenv.Do(t.Context(), node, "EXISTS", metaKey); got != "1" {
		t.Fatalf("label-set record of %s (%d labels) not restored on %s", key, len(sh.Shards), node)
	}
	if v := cliGet(t, seeds, key); v != 800 {
		t.Fatalf("%s reads %d after the rebuild, want 800 (orphaned sub-counters)", key, v)
	}
}

// TestRebuildRefusesForeignStore serves the cluster with store B
// (PostgreSQL or SQLite), empties the cluster, serves it with store A, then
// runs a rebuild against B: it must be refused (exit 2) and change nothing
// (it used to take every node as lost and add B's checkpoints), also when
// the nodes carry no store mark (a cluster served by an older build). The
// same rebuild against A succeeds.
func TestRebuildRefusesForeignStore(t *testing.T) {
	cl := rebuildCluster(t)
	seeds := cl.Seeds()
	for _, tc := range []struct {
		name string
		open func(t *testing.T) (durable.Backend, []string)
	}{
		{"sqlite", func(t *testing.T) (durable.Backend, []string) {
			dir := t.TempDir()
			be, err := sqlite.Open(t.Context(), sqlite.Config{Dir: dir})
			if err != nil {
				t.Fatal(err)
			}
			return be, []string{"--data", dir}
		}},
		{"postgres", func(t *testing.T) (durable.Backend, []string) {
			url, schema := testenv.PostgresURL(), testenv.PostgresSchema(t)
			be, err := postgres.Open(t.Context(), postgres.Config{URL: url, Schema: schema})
			if err != nil {
				t.Fatal(err)
			}
			return be, []string{"--postgres", url, "--schema", schema}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := cl.FlushAll(t.Context()); err != nil {
				t.Fatal(err)
			}
			beB, flagsB := tc.open(t)
			cb := rebuildClientOn(t, seeds, beB)
			for i := range 30 {
				if err := cb.Incr(t.Context(), fmt.Sprint("foreign:x", i), 1000); err != nil {
					t.Fatal(err)
				}
			}
			closeClient(t, cb)
			if err := cl.FlushAll(t.Context()); err != nil {
				t.Fatal(err)
			}
			dirA := t.TempDir()
			ca := rebuildClient(t, seeds, dirA)
			if err := ca.Incr(t.Context(), "foreign:y", 5); err != nil {
				t.Fatal(err)
			}
			closeClient(t, ca)
			rebuildB := func() (int, string, string) {
				return clusterCLI(t, t.Context(), append([]string{"rebuild", "--redis", strings.Join(seeds, ",")}, flagsB...)...)
			}
			before := cacheDump(t, cl)
			code, out, errOut := rebuildB()
			if code != exitUsage || !strings.Contains(errOut, "does not belong") {
				t.Fatalf("rebuild with a foreign store: exit %d, %q %q; want exit 2 and a refusal", code, out, errOut)
			}
			if after := cacheDump(t, cl); !maps.Equal(before, after) {
				t.Fatalf("refused rebuild changed the cache: %d keys before, %d after", len(before), len(after))
			}
			// Without marks (nodes served by an older build) it is
			// refused too: the nodes hold sentinels the store never saw.
			var marks int
			for k := range before {
				if strings.HasPrefix(k, "hotcount:store:") && !strings.Contains(k, ":init:") {
					if _, err := cl.Do(t.Context(), "DEL", k); err != nil {
						t.Fatal(err)
					}
					marks++
				}
			}
			if marks == 0 {
				t.Log("no store marks in the cache (code before the store identity)")
			}
			before = cacheDump(t, cl)
			code, out, errOut = rebuildB()
			if code != exitUsage || !strings.Contains(errOut, "does not belong") {
				t.Fatalf("rebuild with a foreign store, no marks: exit %d, %q %q; want exit 2 and a refusal", code, out, errOut)
			}
			if after := cacheDump(t, cl); !maps.Equal(before, after) {
				t.Fatalf("refused rebuild changed the cache: %d keys before, %d after", len(before), len(after))
			}
			if v := cliGet(t, seeds, "foreign:x0"); v != 0 {
				t.Fatalf("foreign:x0 = %d, want 0", v)
			}
			code, out, errOut = rebuildCLI(t, seeds, dirA)
			if code != exitOK {
				t.Fatalf("rebuild with the cluster's store: exit %d, %q %q", code, out, errOut)
			}
			if v := cliGet(t, seeds, "foreign:y"); v != 5 {
				t.Fatalf("foreign:y = %d, want 5", v)
			}
		})
	}
}

// lostNodeSetup writes fast counters lim:a and lim:b (300 each, on every
// primary), checkpoints them and restarts a primary empty. It returns the
// cluster, its seeds, the store folder and that primary.
func lostNodeSetup(t *testing.T, extra func(c *hotcount.Client)) (*testenv.Cluster, []string, string, string) {
	cl := rebuildCluster(t)
	seeds, dir := cl.Seeds(), t.TempDir()
	c := rebuildClient(t, seeds, dir, hotcount.Namespace{Prefix: "lim:", N: 8, Mode: hotcount.ModeFast, NoColdStart: true},
		hotcount.Namespace{Prefix: "dur:", N: 8, Mode: hotcount.ModeDurable, NoColdStart: true})
	for i := range 600 {
		if err := c.Incr(t.Context(), []string{"lim:a", "lim:b"}[i%2], 1); err != nil {
			t.Fatal(err)
		}
	}
	if extra != nil {
		extra(c)
	}
	closeClient(t, c)
	node := primaryHolding(t, cl, "hotcount:sentinel:{0}")
	if err := cl.Node(node).RestartEmpty(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := cl.WaitHealthy(t.Context()); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"lim:a", "lim:b"} {
		if v := cliGet(t, seeds, k); v >= 300 {
			t.Fatalf("%s = %d after %s restarted empty: the node held none of it", k, v, node)
		}
	}
	return cl, seeds, dir, node
}

// TestRebuildLimited checks that --key limits the restore of a lost node
// to that counter and does not record the node as restored, so that a
// later full rebuild restores the node's other counters (once each).
func TestRebuildLimited(t *testing.T) {
	cl, seeds, dir, _ := lostNodeSetup(t, nil)
	b0 := cliGet(t, seeds, "lim:b")
	code, out, errOut := rebuildCLI(t, seeds, dir, "--key", "lim:a")
	if code != exitOK {
		t.Fatalf("rebuild --key: exit %d, %q %q", code, out, errOut)
	}
	if a, b := cliGet(t, seeds, "lim:a"), cliGet(t, seeds, "lim:b"); a != 300 || b != b0 {
		t.Fatalf("after rebuild --key lim:a: lim:a = %d (want 300), lim:b = %d (want %d, untouched)", a, b, b0)
	}
	code, out, errOut = rebuildCLI(t, seeds, dir, "--prefix", "lim:a")
	if code != exitOK || cliGet(t, seeds, "lim:a") != 300 || cliGet(t, seeds, "lim:b") != b0 {
		t.Fatalf("rebuild --prefix lim:a again: exit %d, %q %q; lim:a %d lim:b %d", code, out, errOut, cliGet(t, seeds, "lim:a"), cliGet(t, seeds, "lim:b"))
	}
	// A dry run now reports only what is left: lim:b's lost part (lim:a's
	// restore tokens are used).
	lostB := 300 - subSum(t, cl, "lim:b")
	code, out, errOut = rebuildCLI(t, seeds, dir, "--dry-run", "--json")
	var rep struct {
		Restores []struct{ Amount int64 }
	}
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Restores) != 1 || rep.Restores[0].Amount != lostB {
		t.Fatalf("rebuild --dry-run after the limited run: exit %d, %q %q; want one restore of %d (lim:b's lost part)", code, out, errOut, lostB)
	}
	for range 2 {
		code, out, errOut = rebuildCLI(t, seeds, dir)
		if code != exitOK {
			t.Fatalf("full rebuild: exit %d, %q %q", code, out, errOut)
		}
		if a, b := cliGet(t, seeds, "lim:a"), cliGet(t, seeds, "lim:b"); a != 300 || b != 300 {
			t.Fatalf("after the full rebuild: lim:a = %d, lim:b = %d; want 300 each", a, b)
		}
	}
}

// TestRebuildDryRun checks that --dry-run reports the restore and the
// corrections a rebuild would make and changes nothing in the cache or
// the store; the real run then makes them.
func TestRebuildDryRun(t *testing.T) {
	cl, seeds, dir, node := lostNodeSetup(t, func(c *hotcount.Client) {
		for i := range 20 {
			if err := c.IncrID(t.Context(), fmt.Sprint("dur:", i), 7, fmt.Sprint("id", i)); err != nil {
				t.Fatal(err)
			}
		}
	})
	storeState := func() string {
		be, err := sqlite.Open(t.Context(), sqlite.Config{Dir: dir})
		if err != nil {
			t.Fatal(err)
		}
		defer be.Close()
		cps, err := be.ListCheckpoints(t.Context(), "")
		if err != nil {
			t.Fatal(err)
		}
		st := fmt.Sprint(cps)
		for i := range 64 {
			data, err := be.LoadMeta(t.Context(), fmt.Sprintf("hotcount:sentinel:hotcount:sentinel:{%d}", i))
			st += fmt.Sprintf(" %d:%s/%v", i, data, err != nil)
		}
		return st
	}
	cache, stored := cacheDump(t, cl), storeState()
	code, out, errOut := rebuildCLI(t, seeds, dir, "--dry-run", "--json")
	var rep struct {
		DryRun    bool `json:"dry_run"`
		Keys      int
		Corrected int
		Restores  []struct {
			Node string
			Keys int
		}
	}
	if code != exitOK || json.Unmarshal([]byte(out), &rep) != nil {
		t.Fatalf("rebuild --dry-run: exit %d, %q %q", code, out, errOut)
	}
	if !rep.DryRun || rep.Keys != 20 || len(rep.Restores) != 1 || rep.Restores[0].Node != node || rep.Restores[0].Keys == 0 {
		t.Fatalf("rebuild --dry-run reported %s; want 20 durable counters checked and a restore of %s", out, node)
	}
	if after := cacheDump(t, cl); !maps.Equal(cache, after) {
		t.Fatalf("dry run changed the cache: %d keys before, %d after", len(cache), len(after))
	}
	if after := storeState(); after != stored {
		t.Fatalf("dry run changed the store:\n%s\n%s", stored, after)
	}
	code, out, errOut = rebuildCLI(t, seeds, dir)
	if code != exitOK {
		t.Fatalf("rebuild: exit %d, %q %q", code, out, errOut)
	}
	if a, b := cliGet(t, seeds, "lim:a"), cliGet(t, seeds, "lim:b"); a != 300 || b != 300 {
		t.Fatalf("after the real run: lim:a = %d, lim:b = %d; want 300", a, b)
	}
	if v := cliGet(t, seeds, "dur:3"); v != 7 {
		t.Fatalf("after the real run: dur:3 = %d, want 7", v)
	}
	if after := cacheDump(t, cl); maps.Equal(cache, after) {
		t.Fatal("the real run changed nothing either: the dry run had nothing to do")
	}
}
