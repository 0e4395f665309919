package regions

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/rueidis"
)

// xadd appends an entry of fields (field, value pairs) to box, as a
// process of any build does.
func xadd(t *testing.T, c rueidis.Client, box string, fields ...string) {
	t.Helper()
	fv := c.B().Xadd().Key(box).Id("*").FieldValue()
	for i := 0; i < len(fields); i += 2 {
		fv = fv.FieldValue(fields[i], fields[i+1])
	}
	if err := c.Do(context.Background(), fv.Build()).Error(); err != nil {
		t.Fatal(err)
	}
}

// entries returns the entries of box, each as its fields.
func entries(t *testing.T, c rueidis.Client, box string) []map[string]string {
	t.Helper()
	es, err := c.Do(context.Background(), c.B().Xrange().Key(box).Start("-").End("+").Build()).AsXRange()
	if err != nil {
		t.Fatal(err)
	}
	out := make([]map[string]string, len(es))
	for i, e := range es {
		out[i] = e.FieldValues
	}
	return out
}

// TestMarkOneField: a mark is one entry per box and up to entryKeys
// counters, the counters joined by NUL in its one field.
func TestMarkOneField(t *testing.T) {
	c := client(t, node(t).Addr)
	ctx := context.Background()
	var keys []string
	for i := 0; len(keys) < entryKeys+3; i++ {
		if k := "k" + string(rune('a'+i%26)) + string(rune('a'+i/26)); shardOf(k) == 0 {
			keys = append(keys, k)
		}
	}
	box := boxKey("out", 0, "us")
	if err := mark(ctx, c, keys, func(int) []string { return []string{box} }); err != nil {
		t.Fatal(err)
	}
	es := entries(t, c, box)
	if len(es) != 2 {
		t.Fatalf("%d entries, want 2 (%d counters, %d an entry)", len(es), len(keys), entryKeys)
	}
	var got []string
	for i, e := range es {
		if len(e) != 1 || e[entryField] == "" {
			t.Fatalf("entry %d has fields %q, want the one field %q", i, e, entryField)
		}
		got = entryKeysOf(got, e)
	}
	if !slices.Equal(got, keys) {
		t.Fatalf("the entries hold %q, want %q", got, keys)
	}
}

// TestOldFormTakenAndAcked: entries of the earlier layout (a box
// "…log:…", one field per counter), which a process of an earlier build
// writes, are taken beside the current ones; their ack trims them, and
// the counters a round leaves for later go to the current box of their
// shard, in the current form.
func TestOldFormTakenAndAcked(t *testing.T) {
	c := client(t, node(t).Addr)
	ctx := context.Background()
	boxes := takeBoxes("out", "us")
	old, cur := oldBoxKey("out", 3, "us"), boxKey("out", 3, "us")
	if ackInto(old) != cur || ackInto(cur) != cur || ackInto(oldBoxKey("in", 3, "")) != boxKey("in", 3, "") {
		t.Fatalf("ackInto(%s) = %s, want %s", old, ackInto(old), cur)
	}
	xadd(t, c, old, "a", "", "b", "")
	xadd(t, c, old, "c", "")
	xadd(t, c, cur, "d", "") // the earlier form in a current box is read too
	xadd(t, c, cur, entryField, "e"+entryField+"a")
	taken, err := take(ctx, c, boxes, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if b := taken[old]; b == nil || !slices.Equal(sorted(b.keys), []string{"a", "b", "c"}) {
		t.Fatalf("took %+v from the old box, want a, b, c", b)
	}
	if b := taken[cur]; b == nil || !slices.Equal(sorted(b.keys), []string{"a", "d", "e"}) {
		t.Fatalf("took %+v from the current box, want a, d, e", b)
	}
	// "b" is left for later: it goes to the current box.
	if err := ack(ctx, c, taken, func(k string) bool { return k != "b" }); err != nil {
		t.Fatal(err)
	}
	if es := entries(t, c, old); len(es) != 0 {
		t.Fatalf("the old box holds %q after the ack, want nothing", es)
	}
	if es := entries(t, c, cur); len(es) != 1 || len(es[0]) != 1 || es[0][entryField] != "b" {
		t.Fatalf("the current box holds %q after the ack, want one entry of b alone, in the current form", es)
	}
	taken, err = take(ctx, c, boxes, 1000)
	if err != nil {
		t.Fatal(err)
	}
	if len(taken) != 1 || taken[cur] == nil || !slices.Equal(taken[cur].keys, []string{"b"}) {
		t.Fatalf("the next round took %v, want b from %s", taken, cur)
	}
	if err := ack(ctx, c, taken, func(string) bool { return true }); err != nil {
		t.Fatal(err)
	}
	if n, err := pending(ctx, c, boxes); err != nil || n != 0 {
		t.Fatalf("%d entries left (%v), want none", n, err)
	}
}

// TestOldFormShipped: a region whose outboxes and inbox hold entries of
// the earlier layout ships their counters, its peer keeps them in its
// durable store, and both are emptied.
func TestOldFormShipped(t *testing.T) {
	p := newPair(t, nil, func(c rueidis.Client) rueidis.Client { return c })
	ctx := context.Background()
	tok := p.token(t)
	keys := []string{"old:1", "old:2", "old:3", "new:1"}
	for _, k := range keys[:3] {
		xadd(t, p.local, oldBoxKey("out", shardOf(k), "us"), k, "")
	}
	if err := mark(ctx, p.local, keys[3:], p.eu.outboxes); err != nil {
		t.Fatal(err)
	}
	outboxes := takeBoxes("out", "us")
	for i := 0; ; i++ {
		if _, _, err := p.eu.ship(p.eu.links[0], tok); err != nil && i == 20 {
			t.Fatal(err)
		}
		if n, err := pending(ctx, p.local, outboxes); err == nil && n == 0 {
			break
		}
		if i == 20 {
			t.Fatal("the outboxes were not emptied")
		}
	}
	for _, k := range keys {
		if got, ok := peerPart(t, p.peer, k, "eu"); !ok || got.Value != 7 {
			t.Fatalf("us holds eu's part of %s %+v (%v), want 7", k, got, ok)
		}
	}
	// us's inbox as an earlier build of eu marks it.
	for i := range Shards {
		if err := p.peer.Do(ctx, p.peer.B().Del().Key(boxKey("in", i, "")).Build()).Error(); err != nil {
			t.Fatal(err)
		}
	}
	for _, k := range keys {
		xadd(t, p.peer, oldBoxKey("in", shardOf(k), ""), k, "")
	}
	p.drain(t, 1)
	rows, err := p.usDurable.LoadRegionParts(ctx, keys)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if len(rows[k]) != 1 || rows[k][0].Origin != "eu" || rows[k][0].Value != 7 {
			t.Fatalf("us's durable store holds %+v of %s; want eu's part, 7", rows[k], k)
		}
	}
	if n, err := pending(ctx, p.peer, p.inboxes); err != nil || n != 0 {
		t.Fatalf("us's inbox holds %d entries (%v), want none", n, err)
	}
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

// slowMark is a cache whose next pipelined XADDs (once armed) wait for
// release, after telling started.
type slowMark struct {
	rueidis.Client
	armed   *atomic.Bool
	started chan struct{}
	release chan struct{}
}

func (c slowMark) DoMulti(ctx context.Context, cmds ...rueidis.Completed) []rueidis.RedisResult {
	if len(cmds) > 0 && strings.EqualFold(cmds[0].Commands()[0], "XADD") && c.armed.CompareAndSwap(true, false) {
		close(c.started)
		<-c.release
	}
	return c.Client.DoMulti(ctx, cmds...)
}

// pushService returns a Service of region eu with peer us over the cache
// c, its loops idle, and the outboxes it pushes to.
func pushService(t *testing.T, c rueidis.Client) (*Service, []string) {
	t.Helper()
	s, err := New(Config{Region: "eu", Local: c, Interval: time.Hour, LeaseTTL: time.Hour,
		Totals: func(context.Context, []string) (map[string]int64, error) { return nil, nil },
		Peers: []Peer{{Name: "us", Connect: func(context.Context) (rueidis.Client, error) {
			return nil, errors.New("not connected")
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	return s, takeBoxes("out", "us")
}

// marked returns how many times each counter is in the boxes.
func marked(t *testing.T, c rueidis.Client, boxes []string) map[string]int {
	t.Helper()
	out := map[string]int{}
	for _, b := range boxes {
		for _, e := range entries(t, c, b) {
			for _, k := range entryKeysOf(nil, e) {
				out[k]++
			}
		}
	}
	return out
}

// TestPushesOneAtATime: a push that starts while another is adding its
// marks (the ship loop's, right before its round, and the push loop's,
// whose tickers fire together every interval) does not add them again:
// a round that read the outbox between the two would leave the second's
// entries to another round, which would ship the counters twice.
func TestPushesOneAtATime(t *testing.T) {
	w := slowMark{Client: client(t, node(t).Addr), armed: new(atomic.Bool), started: make(chan struct{}), release: make(chan struct{})}
	s, boxes := pushService(t, w)
	ctx := context.Background()
	s.Mark("k", false)
	w.armed.Store(true)
	first := make(chan error, 1)
	go func() { first <- s.push(ctx, false) }()
	<-w.started
	second := make(chan error, 1)
	go func() { second <- s.push(ctx, false) }()
	time.Sleep(100 * time.Millisecond) // the second push, under way or waiting
	close(w.release)
	for _, ch := range []chan error{first, second} {
		if err := <-ch; err != nil {
			t.Fatal(err)
		}
	}
	if got := marked(t, w, boxes); got["k"] != 1 {
		t.Fatalf("the outbox holds k %d times, want once", got["k"])
	}
}

// TestMarkDuringPushKept: a counter marked again while a push adds its
// earlier mark (its increment may land after the round that takes that
// entry read its total) stays marked: the next push adds it again.
func TestMarkDuringPushKept(t *testing.T) {
	w := slowMark{Client: client(t, node(t).Addr), armed: new(atomic.Bool), started: make(chan struct{}), release: make(chan struct{})}
	s, boxes := pushService(t, w)
	ctx := context.Background()
	s.Mark("k", false)
	w.armed.Store(true)
	done := make(chan error, 1)
	go func() { done <- s.push(ctx, false) }()
	<-w.started
	s.Mark("k", false)
	close(w.release)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := s.push(ctx, false); err != nil {
		t.Fatal(err)
	}
	if got := marked(t, w, boxes); got["k"] != 2 {
		t.Fatalf("the outbox holds k %d times, want twice (the mark made during the first push pushed by the second)", got["k"])
	}
}
