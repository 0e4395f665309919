package proxy_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/hotcount/hotcount"
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
