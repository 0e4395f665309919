package proxy_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/proxy"
)

// The cluster behind the proxy changes while its clients are connected:
// slots move between primaries, a primary joins. Its clients, which take
// the proxy for one Redis, must not see it.

// redirects returns how many MOVED and ASK replies the node at addr has
// sent (INFO errorstats).
func redirects(t *testing.T, ctx context.Context, addr string) (moved, ask int64) {
	t.Helper()
	info, err := testenv.Do(ctx, addr, "INFO", "errorstats")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		for _, f := range []struct {
			prefix string
			n      *int64
		}{{"errorstat_MOVED:count=", &moved}, {"errorstat_ASK:count=", &ask}} {
			if v, ok := strings.CutPrefix(line, f.prefix); ok {
				*f.n, _ = strconv.ParseInt(strings.SplitN(v, ",", 2)[0], 10, 64)
			}
		}
	}
	return moved, ask
}

// settledOwner waits until the primaries ps agree on the owner of key's
// slot (one serves it, the others redirect to it) and returns it. Slots
// moved by hand in quick succession can leave the nodes disagreeing for
// a moment, until their gossip settles.
func settledOwner(t *testing.T, ctx context.Context, ps []string, key string) string {
	t.Helper()
	for {
		var owner string
		owners, moved := 0, map[string]int{}
		for _, a := range ps {
			_, err := testenv.Do(ctx, a, "EXISTS", key)
			if err == nil {
				owner = a
				owners++
				continue
			}
			if f := strings.Fields(err.Error()); len(f) > 0 {
				if i := slices.Index(f, "MOVED"); i >= 0 && i+2 < len(f) {
					moved[f[i+2]]++
				}
			}
		}
		if owners == 1 && moved[owner] == len(ps)-1 {
			return owner
		}
		select {
		case <-ctx.Done():
			t.Fatalf("the primaries do not agree on the owner of %q", key)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// moveKeySlot moves key's slot from its owner to another primary of ps,
// once the primaries agree on its owner, and waits until they agree on
// the new one. It returns the old owner.
func moveKeySlot(t *testing.T, ctx context.Context, ps []string, key string) string {
	t.Helper()
	src := settledOwner(t, ctx, ps, key)
	dst := otherPrimary(ps, src)
	if err := testenv.MigrateSlot(ctx, keyspace.Slot(key), src, dst, ps); err != nil {
		t.Fatal(err)
	}
	for settledOwner(t, ctx, ps, key) != dst {
		time.Sleep(20 * time.Millisecond)
	}
	return src
}

// otherPrimary returns a primary of ps that is not addr.
func otherPrimary(ps []string, addr string) string {
	for _, p := range ps {
		if p != addr {
			return p
		}
	}
	return ""
}

// TestTransactionAcrossSlotMove: a client's MULTI/EXEC (and WATCH) on a
// slot the cluster moves meets MOVED or ASK on the proxy's dedicated
// connection, which rueidis does not follow. The proxy sends the
// transaction again to the new owner, so the client gets what one Redis
// answers; before, it got TRYAGAIN for the queued command and EXECABORT,
// and a transaction right after a move kept failing until the proxy's
// slot map was refreshed. A transaction that WATCHes a key of a slot that
// moved under it answers nil at EXEC, as when a watched key changed.
func TestTransactionAcrossSlotMove(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	ps, err := cl.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p := uniq(t)
	key := "{" + p + "}k"
	slot := keyspace.Slot(key)
	// move moves key's slot to another primary and returns its old owner.
	move := func(t *testing.T) string {
		t.Helper()
		return moveKeySlot(t, ctx, ps, key)
	}
	n := 0 // key's value
	// expect sends cmds and checks their replies.
	expect := func(t *testing.T, r *rawConn, cmds [][]string, want []string) {
		t.Helper()
		for i, cmd := range cmds {
			if got := r.do(cmd...); got != want[i] {
				t.Fatalf("%q: got %q, want %q (as one Redis answers)", cmd, got, want[i])
			}
		}
	}
	incr := func() string { n++; return ":" + strconv.Itoa(n) + "\r\n" }

	t.Run("moved before MULTI", func(t *testing.T) {
		testenv.Retry(t, 3, func(t *testing.T) error {
			e := startProxyOn(t, cl, nil, proxy.Config{})
			r := dialRaw(t, e.addr)
			expect(t, r, [][]string{{"INCR", key}}, []string{incr()})
			src := move(t)
			m0, _ := redirects(t, ctx, src)
			// A pipeline, as go-redis and redis-py send a transaction.
			if _, err := r.nc.Write(append(append(append(encode("MULTI"), encode("INCR", key)...), encode("INCR", key)...), encode("EXEC")...)); err != nil {
				t.Fatal(err)
			}
			a, b := incr(), incr()
			for i, want := range []string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n" + a + b} {
				got, err := readRaw(r.br)
				if err != nil || got != want {
					t.Fatalf("reply %d of MULTI, INCR, INCR, EXEC: got %q (%v), want %q", i, got, err, want)
				}
			}
			if m1, _ := redirects(t, ctx, src); m1 == m0 {
				return errors.New("the proxy knew the slot's new owner before the transaction")
			}
			return nil
		})
	})

	t.Run("moved while queued", func(t *testing.T) {
		e := startProxyOn(t, cl, nil, proxy.Config{})
		r := dialRaw(t, e.addr)
		expect(t, r, [][]string{{"MULTI"}, {"INCR", key}, {"SET", key + "x", "v"}}, []string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n"})
		src := move(t)
		m0, _ := redirects(t, ctx, src)
		a, b := incr(), incr()
		expect(t, r, [][]string{{"INCR", key}, {"GET", key + "x"}, {"EXEC"}},
			[]string{"+QUEUED\r\n", "+QUEUED\r\n", "*4\r\n" + a + "+OK\r\n" + b + "$1\r\nv\r\n"})
		if m1, _ := redirects(t, ctx, src); m1 == m0 {
			t.Fatal("the transaction bound to the old owner met no MOVED")
		}
		expect(t, r, [][]string{{"GET", key}}, []string{"$" + strconv.Itoa(len(strconv.Itoa(n))) + "\r\n" + strconv.Itoa(n) + "\r\n"})
	})

	t.Run("WATCH across a move", func(t *testing.T) {
		e := startProxyOn(t, cl, nil, proxy.Config{})
		r := dialRaw(t, e.addr)
		expect(t, r, [][]string{{"WATCH", key}}, []string{"+OK\r\n"})
		move(t)
		// The watched key left the node that watched it: EXEC fails as
		// for a changed key, and the client's retry succeeds.
		expect(t, r, [][]string{{"MULTI"}, {"INCR", key}, {"EXEC"}}, []string{"+OK\r\n", "+QUEUED\r\n", "*-1\r\n"})
		expect(t, r, [][]string{{"WATCH", key}, {"MULTI"}, {"INCR", key}, {"EXEC"}}, []string{"+OK\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n" + incr()})
	})

	t.Run("BLPOP across a move", func(t *testing.T) {
		// Not a transaction, but on the same kind of connection of its
		// own: the node redirects the blocked client when its slot goes,
		// and the proxy follows.
		e := startProxyOn(t, cl, nil, proxy.Config{})
		r, w := dialRaw(t, e.addr), dialRaw(t, e.addr)
		list := "{" + p + "}list"
		src := settledOwner(t, ctx, ps, key)
		if _, err := r.nc.Write(encode("BLPOP", list, "30")); err != nil {
			t.Fatal(err)
		}
		for blocked := false; !blocked; {
			info, err := testenv.Do(ctx, src, "INFO", "clients")
			if err != nil {
				t.Fatal(err)
			}
			blocked = !strings.Contains(info, "blocked_clients:0")
			select {
			case <-ctx.Done():
				t.Fatal("BLPOP never blocked on the slot's owner")
			case <-time.After(20 * time.Millisecond):
			}
		}
		move(t)
		expect(t, w, [][]string{{"RPUSH", list, "x"}}, []string{":1\r\n"})
		r.nc.SetDeadline(time.Now().Add(30 * time.Second))
		want := fmt.Sprintf("*2\r\n$%d\r\n%s\r\n$1\r\nx\r\n", len(list), list)
		if got, err := readRaw(r.br); err != nil || got != want {
			t.Fatalf("BLPOP blocked while its slot moved: got %q (%v), want %q", got, err, want)
		}
	})

	t.Run("slot migrating (ASK)", func(t *testing.T) {
		e := startProxyOn(t, cl, nil, proxy.Config{})
		r := dialRaw(t, e.addr)
		fresh := "{" + p + "}fresh" // in key's slot, on neither node yet
		src := settledOwner(t, ctx, ps, key)
		dst := otherPrimary(ps, src)
		do := func(addr string, args ...string) string {
			t.Helper()
			out, err := testenv.Do(ctx, addr, args...)
			if err != nil {
				t.Fatalf("%s %v: %v", addr, args, err)
			}
			return out
		}
		sl := strconv.Itoa(int(slot))
		srcID, dstID := do(src, "CLUSTER", "MYID"), do(dst, "CLUSTER", "MYID")
		do(dst, "CLUSTER", "SETSLOT", sl, "IMPORTING", srcID)
		do(src, "CLUSTER", "SETSLOT", sl, "MIGRATING", dstID)
		_, a0 := redirects(t, ctx, src)
		expect(t, r, [][]string{{"MULTI"}, {"SET", fresh, "5"}, {"INCR", fresh}, {"EXEC"}}, []string{"+OK\r\n", "+QUEUED\r\n", "+QUEUED\r\n", "*2\r\n+OK\r\n:6\r\n"})
		expect(t, r, [][]string{{"WATCH", fresh}, {"MULTI"}, {"INCR", fresh}, {"EXEC"}}, []string{"+OK\r\n", "+OK\r\n", "+QUEUED\r\n", "*1\r\n:7\r\n"})
		if _, a1 := redirects(t, ctx, src); a1 == a0 {
			t.Fatal("the migrating slot's owner sent no ASK")
		}
		if err := testenv.MigrateSlot(ctx, slot, src, dst, ps); err != nil {
			t.Fatal(err)
		}
		expect(t, r, [][]string{{"GET", fresh}, {"GET", key}}, []string{"$1\r\n7\r\n", "$" + strconv.Itoa(len(strconv.Itoa(n))) + "\r\n" + strconv.Itoa(n) + "\r\n"})
	})
}

// TestKeylessAfterNodeAdded: a primary joins the cluster and takes a slot
// while the proxy runs. The commands the proxy sends to every primary
// (DBSIZE, KEYS, SCAN, SCRIPT LOAD, ...) read the primaries from the
// cluster; one that rueidis had no connection to yet made them fail with
// "no connection to primary ... yet" until something else routed a
// command to its slots. The proxy connects to it at once.
func TestKeylessAfterNodeAdded(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	testenv.Retry(t, 3, func(t *testing.T) error {
		cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Stop()
		ps, err := cl.Primaries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		e := startProxyOn(t, cl, nil, proxy.Config{})
		r := dialRaw(t, e.addr)
		key := "{" + uniq(t) + "}k"
		if got := r.do("SET", key, "v"); got != "+OK\r\n" {
			t.Fatalf("SET: %q", got)
		}
		nn := joinNode(t, ctx, ps)
		all := append(slices.Clone(ps), nn.Addr)
		src := ownerOfIn(t, cl, key)
		if err := testenv.MigrateSlot(ctx, keyspace.Slot(key), src, nn.Addr, all); err != nil {
			t.Fatal(err)
		}
		m0, _ := redirects(t, ctx, src)
		var direct int64
		for _, a := range all {
			v, err := testenv.Do(ctx, a, "DBSIZE")
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			direct += n
		}
		if got, want := r.do("DBSIZE"), fmt.Sprintf(":%d\r\n", direct); got != want {
			t.Fatalf("DBSIZE after a primary joined: got %q, want %q (the nodes' sum)", got, want)
		}
		if m1, _ := redirects(t, ctx, src); m1 == m0 {
			return errors.New("the proxy knew the new primary before DBSIZE")
		}
		if got := r.do("KEYS", key); got != fmt.Sprintf("*1\r\n$%d\r\n%s\r\n", len(key), key) {
			t.Fatalf("KEYS %s: %q", key, got)
		}
		sha := r.do("SCRIPT", "LOAD", "return redis.call('GET', KEYS[1])")
		sha = strings.TrimSpace(sha[strings.Index(sha, "\n")+1:])
		if got := r.do("EVALSHA", sha, "1", key); got != "$1\r\nv\r\n" {
			t.Fatalf("EVALSHA of a script SCRIPT LOAD loaded, on the new primary: %q", got)
		}
		return nil
	})
}

// TestLoadAcrossSlotMoves: clients that take the proxy for one Redis keep
// incrementing plain keys (in pipelines across slots), a key through a
// script and a buffered counter key, and a cluster client a plain key and
// the counter key, while the cluster moves their slots
// (the counter's sub-counters' slots too) back and forth between
// primaries. No command is answered an error, and every key ends with
// exactly the increments acknowledged: none lost, none counted twice.
func TestLoadAcrossSlotMoves(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	testenv.Retry(t, 3, func(t *testing.T) error {
		cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Stop()
		ps, err := cl.Primaries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		p := uniq(t)
		e := startProxyOn(t, cl, []hotcount.Namespace{{Prefix: p + "likes:", Buffered: true, ReadCacheTTL: readCacheTTL}}, proxy.Config{})
		rdb := redis.NewClient(&redis.Options{Addr: e.addr, PoolSize: 8, MaxRetries: -1})
		defer rdb.Close()
		// A cluster client knows the proxy as the cluster's only node.
		crdb := redis.NewClusterClient(&redis.ClusterOptions{Addrs: []string{e.addr}, PoolSize: 8, MaxRetries: -1})
		defer crdb.Close()
		plain := []string{p + "a", p + "b", p + "c", p + "d", p + "e"}
		scripted, counter := p+"s", p+"likes:post"
		incrScript := redis.NewScript("return redis.call('INCR', KEYS[1])")
		if err := rdb.Incr(ctx, counter).Err(); err != nil {
			t.Fatal(err)
		}
		subs, err := e.client.SubKeys(ctx, counter)
		if err != nil || len(subs) == 0 {
			t.Fatalf("sub-counters of %s: %v %v", counter, subs, err)
		}
		var moving []string // a key of each slot to move
		for _, k := range append(append(slices.Clone(plain), scripted), subs...) {
			if !slices.ContainsFunc(moving, func(m string) bool { return keyspace.Slot(m) == keyspace.Slot(k) }) {
				moving = append(moving, k)
			}
		}
		var (
			mu      sync.Mutex
			acked   = map[string]int64{counter: 1}
			unknown error
			stop    = make(chan struct{})
			wg      sync.WaitGroup
		)
		// note records one command's outcome: a Redis error reply fails
		// the test; a timeout leaves the outcome unknown.
		note := func(key string, err error) {
			mu.Lock()
			defer mu.Unlock()
			var re redis.Error
			switch {
			case err == nil:
				acked[key]++
			case errors.As(err, &re):
				t.Errorf("%s: error reply %q while slots move", key, err)
			default:
				unknown = fmt.Errorf("%s: %w", key, err)
			}
		}
		for w := 0; w < 4; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					cmds, _ := rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
						for _, k := range plain[:4] {
							pl.Incr(ctx, k)
						}
						return nil
					})
					for i, cmd := range cmds {
						note(plain[i], cmd.Err())
					}
					note(scripted, incrScript.Run(ctx, rdb, []string{scripted}).Err())
					note(counter, rdb.Incr(ctx, counter).Err())
					note(plain[4], crdb.Incr(ctx, plain[4]).Err())
					note(counter, crdb.Incr(ctx, counter).Err())
				}
			}()
		}
		var m0 int64
		for _, a := range ps {
			m, k := redirects(t, ctx, a)
			m0 += m + k
		}
		halt := sync.OnceFunc(func() { close(stop); wg.Wait() })
		defer halt()
		for round := 0; round < 3; round++ {
			for _, k := range moving {
				moveKeySlot(t, ctx, ps, k)
			}
		}
		time.Sleep(100 * time.Millisecond)
		halt()
		var m1 int64
		for _, a := range ps {
			m, k := redirects(t, ctx, a)
			m1 += m + k
		}
		if err := e.client.Flush(ctx); err != nil {
			t.Fatal(err)
		}
		time.Sleep(2 * readCacheTTL)
		for _, k := range append(append(slices.Clone(plain), scripted), counter) {
			got, err := rdb.Get(ctx, k).Int64()
			if err != nil {
				t.Fatalf("GET %s: %v", k, err)
			}
			mu.Lock()
			want, unk := acked[k], unknown
			mu.Unlock()
			if got != want && unk == nil {
				t.Errorf("%s: %d after the moves, %d increments acknowledged", k, got, want)
			}
			t.Logf("%s: %d increments, %d moves of %d slots", k, got, 3*len(moving), len(moving))
		}
		if unknown != nil {
			return fmt.Errorf("a command timed out, its outcome unknown: %w", unknown)
		}
		if m1 == m0 {
			return errors.New("no primary sent a redirection: the moves met no command")
		}
		return nil
	})
}

// joinNode starts a cluster-enabled node, has it MEET the cluster of
// primaries ps and waits until every node knows it and it sees the
// cluster healthy. It stops with the test.
func joinNode(t *testing.T, ctx context.Context, ps []string) *testenv.Node {
	t.Helper()
	nn, err := testenv.StartNode(ctx, testenv.NodeOptions{Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { nn.Stop() })
	host, port, _ := strings.Cut(nn.Addr, ":")
	if _, err := testenv.Do(ctx, ps[0], "CLUSTER", "MEET", host, port); err != nil {
		t.Fatal(err)
	}
	id, err := testenv.Do(ctx, nn.Addr, "CLUSTER", "MYID")
	if err != nil {
		t.Fatal(err)
	}
	all := append(slices.Clone(ps), nn.Addr)
	for known := false; !known; {
		known = true
		for _, a := range all {
			nodes, err := testenv.Do(ctx, a, "CLUSTER", "NODES")
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(nodes, id) || strings.Count(nodes, "master") < len(all) {
				known = false
			}
		}
		if info, err := testenv.Do(ctx, nn.Addr, "CLUSTER", "INFO"); err != nil || !strings.Contains(info, "cluster_state:ok") {
			known = false
		}
		select {
		case <-ctx.Done():
			t.Fatal("the new node did not join the cluster")
		case <-time.After(50 * time.Millisecond):
		}
	}
	return nn
}

// TestKeylessAfterNodeRemoved: a primary leaves the cluster as
// redis-cli --cluster del-node removes it (its slots moved away, CLUSTER
// FORGET on the others, CLUSTER RESET SOFT on it) while the proxy still
// has a connection to it. The commands that reach every primary asked
// any one node for the cluster's map, at times the removed one, which
// answers an empty map: DBSIZE answered 0, KEYS nothing, and SCRIPT LOAD
// closed the connection on an internal error. CONFIG SET took its node
// list from the first node by address in the same way. The proxy now
// takes the map from a node that is in the cluster.
func TestKeylessAfterNodeRemoved(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	testenv.Retry(t, 3, func(t *testing.T) error {
		cl, err := testenv.StartCluster(ctx, testenv.ClusterOptions{Primaries: 3})
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Stop()
		ps, err := cl.Primaries(ctx)
		if err != nil {
			t.Fatal(err)
		}
		nn := joinNode(t, ctx, ps)
		all := append(slices.Clone(ps), nn.Addr)
		key := "{" + uniq(t) + "}k"
		slot := keyspace.Slot(key)
		src := ownerOfIn(t, cl, key)
		if err := testenv.MigrateSlot(ctx, slot, src, nn.Addr, all); err != nil {
			t.Fatal(err)
		}
		// The proxy starts knowing four primaries.
		e := startProxyOn(t, cl, nil, proxy.Config{AllowConfig: true})
		r := dialRaw(t, e.addr)
		if got := r.do("SET", key, "v"); got != "+OK\r\n" {
			t.Fatalf("SET: %q", got)
		}
		// del-node: the slot goes back, the others forget the node, it
		// resets.
		if err := testenv.MigrateSlot(ctx, slot, nn.Addr, src, all); err != nil {
			t.Fatal(err)
		}
		id, err := testenv.Do(ctx, nn.Addr, "CLUSTER", "MYID")
		if err != nil {
			t.Fatal(err)
		}
		for _, a := range ps {
			if _, err := testenv.Do(ctx, a, "CLUSTER", "FORGET", id); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := testenv.Do(ctx, nn.Addr, "CLUSTER", "RESET", "SOFT"); err != nil {
			t.Fatal(err)
		}
		before, err := testenv.CommandStats(ctx, nn.Addr)
		if err != nil {
			t.Fatal(err)
		}
		var direct int64
		for _, a := range ps {
			v, err := testenv.Do(ctx, a, "DBSIZE")
			if err != nil {
				t.Fatal(err)
			}
			n, _ := strconv.ParseInt(v, 10, 64)
			direct += n
		}
		for i := 0; i < 20; i++ {
			if got, want := r.do("DBSIZE"), fmt.Sprintf(":%d\r\n", direct); got != want {
				t.Fatalf("DBSIZE %d after a primary left: got %q, want %q (the primaries' sum)", i, got, want)
			}
			if got := r.do("KEYS", key); got != fmt.Sprintf("*1\r\n$%d\r\n%s\r\n", len(key), key) {
				t.Fatalf("KEYS %s %d after a primary left: %q", key, i, got)
			}
			if got := r.do("SCRIPT", "LOAD", "return "+strconv.Itoa(i)); !strings.HasPrefix(got, "$40\r\n") {
				t.Fatalf("SCRIPT LOAD %d after a primary left: %q", i, got)
			}
		}
		if got := r.do("CONFIG", "SET", "lfu-decay-time", "7"); got != "+OK\r\n" {
			t.Fatalf("CONFIG SET after a primary left: %q", got)
		}
		for _, a := range ps {
			if v, err := testenv.Do(ctx, a, "CONFIG", "GET", "lfu-decay-time"); err != nil || !strings.HasSuffix(strings.TrimSpace(v), "7") {
				t.Fatalf("CONFIG GET lfu-decay-time on %s after CONFIG SET through the proxy: %q %v", a, v, err)
			}
		}
		after, err := testenv.CommandStats(ctx, nn.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if after["cluster|slots"] == before["cluster|slots"] && after["cluster|nodes"] == before["cluster|nodes"] {
			return errors.New("the proxy never asked the removed node for the cluster's map")
		}
		return nil
	})
}
