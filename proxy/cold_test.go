package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/proxy"
)

// TestColdIncrExact: in a buffered namespace, INCR of a cold counter goes
// to the cluster at once as one INCRBY on its one sub-counter and answers
// that reply, the exact value, without a summed read; a counter that gets
// Buffer.HotAt increments in a flush interval turns hot, is buffered and
// answers the estimate, and nothing is lost either way.
func TestColdIncrExact(t *testing.T) {
	p := uniq(t)
	e := startProxy(t, []hotcount.Namespace{{Prefix: p, Buffered: true}}, proxy.Config{})
	r := dialRaw(t, e.addr)
	ctx := context.Background()
	for i := range 50 {
		k := fmt.Sprintf("%spost:%d", p, i)
		if got := r.do("INCR", k); got != ":1\r\n" {
			t.Fatalf("INCR %s: %q", k, got)
		}
		if got := r.do("INCRBY", k, "4"); got != ":5\r\n" {
			t.Fatalf("INCRBY %s 4: %q", k, got)
		}
		// Written at once: the sub-counter holds it before any flush.
		if v, err := cluster.Do(ctx, "GET", "{"+k+"#0}"); err != nil || strings.TrimSpace(v) != "5" {
			t.Fatalf("{%s#0} holds %q (%v), want 5", k, v, err)
		}
	}
	if s := e.srv.Stats(); s.CounterReads != 0 || s.EstimateAnswers != 0 {
		t.Fatalf("cold INCRs read the counters: %+v", s)
	}

	// One key, INCR after INCR: once it gets HotAt increments within a
	// flush interval it is buffered and answers the estimate.
	hot := p + "viral"
	n := 0
	for e.srv.Stats().CounterReads+e.srv.Stats().EstimateAnswers == 0 {
		if n == 100_000 {
			t.Fatal("100,000 INCRs of one key and it never turned hot")
		}
		n++
		got := r.do("INCR", hot)
		if v, err := strconv.Atoi(strings.TrimSpace(strings.TrimPrefix(got, ":"))); err != nil || v <= 0 || v > n {
			t.Fatalf("INCR %d of %s: %q", n, hot, got)
		}
	}
	for range 100 {
		r.do("INCR", hot)
		n++
	}
	if err := e.client.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if rd, err := e.client.GetFresh(ctx, hot); err != nil || rd.Value != int64(n) {
		t.Fatalf("%s after %d INCRs: %+v %v", hot, n, rd, err)
	}
	if s := e.client.Stats().Buffer; s.OpsApplied == 0 {
		t.Fatalf("the hot key was never buffered: %+v", s)
	}
}

// primaryCalls sums INFO commandstats calls of cmds over the shared
// cluster's primaries.
func primaryCalls(t *testing.T, cmds ...string) int64 {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ps, err := cluster.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var n int64
	for _, p := range ps {
		st, err := testenv.CommandStats(ctx, p)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range cmds {
			n += st[c]
		}
	}
	return n
}

// TestColdIncrMark: the INCR of a cold counter the proxy has not seen
// checks the counter's record mark in the same round trip as its INCRBY
// and reads no metadata record (INFO commandstats: no GET at all, one
// EXISTS per counter). A counter another process sharded has its mark:
// the proxy looks its labels up and answers the estimate, and nothing is
// lost. A record whose mark went missing gets it back from the next
// look-up.
func TestColdIncrMark(t *testing.T) {
	p := uniq(t)
	e := startProxy(t, []hotcount.Namespace{{Prefix: p, Buffered: true}}, proxy.Config{})
	r := dialRaw(t, e.addr)
	ctx := context.Background()

	gets, exists := primaryCalls(t, "get"), primaryCalls(t, "exists")
	const n = 50
	for i := range n {
		k := fmt.Sprintf("%spost:%d", p, i)
		if got := r.do("INCR", k); got != ":1\r\n" {
			t.Fatalf("INCR %s: %q", k, got)
		}
	}
	if d := primaryCalls(t, "get") - gets; d != 0 {
		t.Errorf("%d cold INCRs sent %d GETs, want none", n, d)
	}
	if d := primaryCalls(t, "exists") - exists; d < n {
		t.Errorf("%d cold INCRs sent %d EXISTS, want one each", n, d)
	}
	if s := e.srv.Stats(); s.CounterReads != 0 || s.EstimateAnswers != 0 {
		t.Fatalf("cold INCRs read the counters: %+v", s)
	}

	admin, err := hotcount.New(ctx, hotcount.Config{Redis: hotcount.RedisConfig{Addrs: cluster.Seeds()}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Close(context.Background()) })
	sharded, healed := p+"sharded", p+"healed"
	for _, k := range []string{sharded, healed} {
		if err := admin.Incr(ctx, k, 5); err != nil {
			t.Fatal(err)
		}
		if err := admin.Resize(ctx, k, 3); err != nil {
			t.Fatal(err)
		}
		if v, err := cluster.Do(ctx, "EXISTS", keyspace.MarkKey(k)); err != nil || strings.TrimSpace(v) != "1" {
			t.Fatalf("sharded %s: its mark exists = %q %v, want 1", k, v, err)
		}
	}

	s0, gets := e.srv.Stats(), primaryCalls(t, "get")
	if got := r.do("INCR", sharded); !strings.HasPrefix(got, ":") {
		t.Fatalf("INCR %s: %q", sharded, got)
	}
	if primaryCalls(t, "get") == gets {
		t.Error("the INCR of a sharded counter looked nothing up")
	}
	if s := e.srv.Stats(); s.CounterReads+s.EstimateAnswers == s0.CounterReads+s0.EstimateAnswers {
		t.Errorf("the INCR of a sharded counter answered as a cold one: %+v", s)
	}
	if err := e.client.Flush(ctx); err != nil {
		t.Fatal(err)
	}
	if rd, err := admin.GetFresh(ctx, sharded); err != nil || rd.Value != 6 {
		t.Fatalf("%s = %+v %v, want 6", sharded, rd, err)
	}

	// The mark lost (a failover, a node that came back empty): a look-up
	// that finds the record sets it again.
	if _, err := cluster.Do(ctx, "DEL", keyspace.MarkKey(healed)); err != nil {
		t.Fatal(err)
	}
	if rd, err := e.client.Get(ctx, healed); err != nil || rd.Value != 5 {
		t.Fatalf("%s = %+v %v, want 5", healed, rd, err)
	}
	if v, err := cluster.Do(ctx, "EXISTS", keyspace.MarkKey(healed)); err != nil || strings.TrimSpace(v) != "1" {
		t.Fatalf("after a look-up, %s's mark exists = %q %v, want 1", healed, v, err)
	}
}
