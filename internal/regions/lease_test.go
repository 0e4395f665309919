package regions

import (
	"context"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/durable"
	"github.com/hotcount/hotcount/internal/faultproxy"
	"github.com/hotcount/hotcount/internal/testenv"
)

// kill stops s as a dead process would: its loops end, nothing is pushed
// and the lease is not given up.
func (s *Service) kill() {
	s.once.Do(func() {
		close(s.stop)
		s.wg.Wait()
	})
}

func node(t *testing.T) *testenv.Node {
	t.Helper()
	n, err := testenv.StartNode(t.Context(), testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	return n
}

func client(t *testing.T, addr string) rueidis.Client {
	t.Helper()
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, DisableCache: true,
		ClientSetInfo: rueidis.DisableClientSetInfo})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c
}

// peerPart reads origin's contribution to key as the peer holds it.
func peerPart(t *testing.T, peer rueidis.Client, key, origin string) (durable.RegionPart, bool) {
	t.Helper()
	hs, err := readHashes(context.Background(), peer, []string{key})
	if err != nil {
		t.Fatal(err)
	}
	st, _ := Parse(key, hs[0])
	p, ok := st.Parts[origin]
	return p, ok
}

func waitPart(t *testing.T, peer rueidis.Client, key, origin string, want int64) durable.RegionPart {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		p, ok := peerPart(t, peer, key, origin)
		if ok && p.Value == want {
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("peer holds %s's part of %s = %+v (%v), want %d", origin, key, p, ok, want)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestLeaseTakeoverAndFencing: two processes of region eu; one ships. It
// dies during a partition with counters in the outbox; the other takes
// the lease over and ships them after the heal, nothing lost. The dead
// holder's late write, with its old token, does not replace the new
// holder's record.
func TestLeaseTakeoverAndFencing(t *testing.T) {
	local, remote := node(t), node(t)
	proxy, err := faultproxy.New(faultproxy.Config{Target: remote.Addr})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	lc := client(t, local.Addr)
	peer := client(t, remote.Addr)
	ctx := context.Background()
	totals := func(ctx context.Context, keys []string) (map[string]int64, error) {
		out := map[string]int64{}
		for _, k := range keys {
			v, err := lc.Do(ctx, lc.B().Get().Key("own:"+k).Build()).AsInt64()
			if err != nil && !rueidis.IsRedisNil(err) {
				return nil, err
			}
			out[k] = v
		}
		return out, nil
	}
	start := func() *Service {
		s, err := New(Config{Region: "eu", Local: lc, Totals: totals, Interval: 50 * time.Millisecond, LeaseTTL: time.Second,
			Peers: []Peer{{Name: "us", Connect: func(ctx context.Context) (rueidis.Client, error) {
				return rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{proxy.Addr()}, DisableCache: true,
					ClientSetInfo: rueidis.DisableClientSetInfo, ConnWriteTimeout: time.Second})
			}}}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close(context.Background()) })
		return s
	}
	a, b := start(), start()
	incr := func(s *Service, n int64) {
		if err := lc.Do(ctx, lc.B().Incrby().Key("own:k").Increment(n).Build()).Error(); err != nil {
			t.Fatal(err)
		}
		s.Mark("k", false)
	}
	incr(a, 5)
	incr(b, 1)
	waitPart(t, peer, "k", "eu", 6)
	// One holder at a time.
	var holder, other *Service
	deadline := time.Now().Add(30 * time.Second)
	for holder == nil {
		ta, tb := a.token.Load(), b.token.Load()
		switch {
		case ta != 0 && tb != 0:
			t.Fatalf("both processes hold the lease: tokens %d and %d", ta, tb)
		case ta != 0:
			holder, other = a, b
		case tb != 0:
			holder, other = b, a
		case time.Now().After(deadline):
			t.Fatal("no process holds the lease")
		}
	}
	oldTok := holder.token.Load()
	// The partition, then the holder dies with counters in the outbox.
	proxy.Pause(faultproxy.PauseReset)
	incr(holder, 10)
	incr(other, 100)
	if err := holder.push(ctx, true); err != nil {
		t.Fatal(err)
	}
	holder.kill()
	// The other process takes over once the lease runs out.
	deadline = time.Now().Add(30 * time.Second)
	for other.token.Load() == 0 {
		if time.Now().After(deadline) {
			t.Fatal("the lease was not taken over")
		}
		time.Sleep(20 * time.Millisecond)
	}
	newTok := other.token.Load()
	if newTok <= oldTok {
		t.Fatalf("new token %d not above the dead holder's %d", newTok, oldTok)
	}
	if p, _ := peerPart(t, peer, "k", "eu"); p.Value != 6 {
		t.Fatalf("the peer got %d during the partition", p.Value)
	}
	proxy.Resume()
	p := waitPart(t, peer, "k", "eu", 116)
	if p.Lease != newTok {
		t.Fatalf("record of lease %d, want the new holder's %d", p.Lease, newTok)
	}
	// The dead holder wakes up with its old token and ships a value read
	// now: the peer keeps the new holder's record. (The new holder dies
	// too, so that it does not ship the value first.)
	other.kill()
	if err := lc.Do(ctx, lc.B().Incrby().Key("own:k").Increment(1000).Build()).Error(); err != nil {
		t.Fatal(err)
	}
	if err := mark(ctx, lc, []string{"k"}, holder.outboxes); err != nil {
		t.Fatal(err)
	}
	holder.token.Store(oldTok)
	// (Its connection broke in the partition: rueidis reconnects on a
	// later call.)
	var n int
	for range 20 {
		if n, _, err = holder.ship(holder.links[0], oldTok); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil || n == 0 {
		t.Fatalf("the stale holder's round: %d records, %v; want it to try", n, err)
	}
	if got, _ := peerPart(t, peer, "k", "eu"); got.Value != 116 || got.Lease != newTok {
		t.Fatalf("a stale holder replaced the record: %+v", got)
	}
	// A third process takes the lease over and ships the new value, with
	// a token above both.
	c := start()
	p = waitPart(t, peer, "k", "eu", 1116)
	if p.Lease <= newTok || c.token.Load() != p.Lease {
		t.Fatalf("record of lease %d, want the third holder's (%d, above %d)", p.Lease, c.token.Load(), newTok)
	}
}

// TestApplyScript: the receiving script keeps the highest version, as
// State.Merge does.
func TestApplyScript(t *testing.T) {
	n := node(t)
	c := client(t, n.Addr)
	ctx := context.Background()
	apply := func(p durable.RegionPart) {
		t.Helper()
		if err := round(ctx, c, nil, []call{hcall(applyScript, p.Key, field(p), Encode(p))})[0].Error(); err != nil {
			t.Fatal(err)
		}
	}
	var want State
	for i, p := range []durable.RegionPart{
		rec("us", durable.PartContribution, 0, 1, 1, 10),
		rec("us", durable.PartContribution, 0, 1, 3, 30),
		rec("us", durable.PartContribution, 0, 1, 2, 20),
		rec("us", durable.PartContribution, 0, 0, 9, 90),
		rec("us", durable.PartContribution, 0, 1_700_000_000_000, 0, 31),
		rec("us", durable.PartContribution, 2*1_700_000_000_000, 0, 0, 1),
		rec("us", durable.PartContribution, 0, 9, 9, 99),
		rec("us", durable.PartFence, 4, 1, 1, 7),
		rec("us", durable.PartFence, 2, 1, 9, 8),
	} {
		apply(p)
		want.Merge(p)
		got, _ := peerPart(t, c, "k", "us")
		if got.Version(want.Parts["us"]) != 0 || got.Value != want.Parts["us"].Value {
			t.Fatalf("step %d: script holds %+v, Merge %+v", i, got, want.Parts["us"])
		}
	}
	fence := func() string {
		t.Helper()
		hs, err := readHashes(ctx, c, []string{"k"})
		if err != nil {
			t.Fatal(err)
		}
		return hs[0]["f:us"]
	}
	h := fence()
	if f, _ := Decode("k", "f:us", h); f.Value != 7 {
		t.Fatalf("fence = %+v, want the epoch-4 one", f)
	}
	// A clear turns the contribution into a fence and starts an odd epoch
	// above 2 × now in ms.
	odd, err := hexec(ctx, c, clearScript, "k").ToString()
	if err != nil {
		t.Fatal(err)
	}
	e, _ := strconv.ParseUint(odd, 10, 64)
	if e%2 != 1 || e < uint64(2*time.Now().Add(-time.Minute).UnixMilli()) {
		t.Fatalf("clear epoch %d", e)
	}
	h = fence()
	if f, _ := Decode("k", "f:us", h); f.Value != 1 || f.Epoch != 2*1_700_000_000_000 {
		t.Fatalf("fence after clear = %+v, want the contribution it observed", f)
	}
}

// TestOutboxKeepsReMarked: a counter marked again after it was taken is
// shipped once more, by the round after; one marked once leaves the
// outbox; what a round took and did not acknowledge is taken again, and
// what it left for later comes after.
func TestOutboxKeepsReMarked(t *testing.T) {
	n := node(t)
	c := client(t, n.Addr)
	ctx := context.Background()
	box := func(shard int) []string { return []string{boxKey("out", shard, "us")} }
	boxes := make([]string, Shards)
	for i := range boxes {
		boxes[i] = boxKey("out", i, "us")
	}
	takeKeys := func() (map[string]*batch, []string) {
		t.Helper()
		taken, err := take(ctx, c, boxes, 1000)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, b := range taken {
			keys = append(keys, b.keys...)
		}
		slices.Sort(keys)
		return taken, keys
	}
	do := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	all := func(string) bool { return true }
	do(mark(ctx, c, []string{"a", "b"}, box))
	if _, got := takeKeys(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("took %v, want [a b]", got)
	}
	// Not acknowledged (the round failed): taken again, with "a" marked
	// again meanwhile given once.
	do(mark(ctx, c, []string{"a"}, box))
	taken, got := takeKeys()
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("took %v again, want [a b]", got)
	}
	do(mark(ctx, c, []string{"a"}, box)) // while "shipping"
	do(ack(ctx, c, taken, all))
	taken, got = takeKeys()
	if !slices.Equal(got, []string{"a"}) {
		t.Fatalf("after the ack the round took %v, want [a]", got)
	}
	// Left for later (not ready): it comes back after the marks since.
	do(mark(ctx, c, []string{"c"}, box))
	do(ack(ctx, c, taken, func(k string) bool { return k != "a" }))
	if taken, got = takeKeys(); !slices.Equal(got, []string{"a", "c"}) {
		t.Fatalf("after an ack that left a, the round took %v, want [a c]", got)
	}
	do(ack(ctx, c, taken, all))
	if n, err := pending(ctx, c, boxes); err != nil || n != 0 {
		t.Fatalf("after the last ack the outbox holds %d entries (%v), want none", n, err)
	}
	// A round takes at most its limit of counters from a box; the rest
	// waits for the next.
	var many []string
	for i := 0; len(many) < 3*entryKeys; i++ {
		if k := "m" + strconv.Itoa(i); shardOf(k) == 0 {
			many = append(many, k)
		}
	}
	one := []string{boxKey("out", 0, "us")}
	do(mark(ctx, c, many, func(int) []string { return one }))
	first, err := take(ctx, c, one, entryKeys)
	do(err)
	if b := first[one[0]]; b == nil || len(b.keys) != entryKeys || !b.full {
		t.Fatalf("a round of limit %d took %+v", entryKeys, b)
	}
	do(ack(ctx, c, first, all))
	if n, err := pending(ctx, c, one); err != nil || n != 2 {
		t.Fatalf("%d entries left (%v), want 2", n, err)
	}
}

// TestInboxEmptiedWithoutDurableStore: a region without a durable store
// still empties the inbox peers fill.
func TestInboxEmptiedWithoutDurableStore(t *testing.T) {
	n := node(t)
	c := client(t, n.Addr)
	ctx := context.Background()
	if err := mark(ctx, c, []string{"a", "b"}, func(shard int) []string { return []string{boxKey("in", shard, "")} }); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Region: "eu", Local: c, Interval: 50 * time.Millisecond, LeaseTTL: time.Second,
		Totals: func(context.Context, []string) (map[string]int64, error) { return nil, nil }})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	boxes := make([]string, Shards)
	for i := range boxes {
		boxes[i] = boxKey("in", i, "")
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		left, err := pending(ctx, c, boxes)
		if err != nil {
			t.Fatal(err)
		}
		if left == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the inbox still holds %d counters", left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestOwnEpochBehindPeer: the peer holds this region's part of a counter
// under a newer own epoch than this region's hash has (the hash was
// collected after the counter ended, or lost with the cache). The next
// records are not refused for good: the region takes an epoch above the
// peer's, and the peer ends up with the current total.
func TestOwnEpochBehindPeer(t *testing.T) {
	local, remote := node(t), node(t)
	lc, peer := client(t, local.Addr), client(t, remote.Addr)
	ctx := context.Background()
	old := durable.RegionPart{Key: "k", Origin: "eu", Kind: durable.PartContribution, Epoch: 1_000_000, Lease: 1 << 50, Seq: 9, Value: 5, At: time.Now()}
	if err := round(ctx, peer, nil, []call{hcall(applyScript, "k", field(old), Encode(old))})[0].Error(); err != nil {
		t.Fatal(err)
	}
	s, err := New(Config{Region: "eu", Local: lc, Interval: 50 * time.Millisecond, LeaseTTL: time.Second,
		Totals: func(ctx context.Context, keys []string) (map[string]int64, error) {
			out := map[string]int64{}
			for _, k := range keys {
				out[k] = 7
			}
			return out, nil
		},
		Peers: []Peer{{Name: "us", Connect: func(ctx context.Context) (rueidis.Client, error) {
			return rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{remote.Addr}, DisableCache: true,
				ClientSetInfo: rueidis.DisableClientSetInfo})
		}}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close(context.Background()) })
	s.Mark("k", false)
	p := waitPart(t, peer, "k", "eu", 7)
	if p.Epoch <= old.Epoch {
		t.Fatalf("the peer holds %+v; want an epoch above %d", p, old.Epoch)
	}
}
