package redis

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/buffer"
	"github.com/hotcount/hotcount/internal/faultproxy"
	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// TestColdFlushNoReply drives a buffer through a connection that first
// loses replies (the commands ran; the connection is reset) and then goes
// half-open (silence, then the commands run late). A cold key's flush
// (a plain INCRBY) that got no reply is never sent again: its counter is
// never above what was added, and what it misses is in ColdDroppedDelta.
// A hot key's flushes (with a token) are retried and counted exactly once.
func TestColdFlushNoReply(t *testing.T) {
	ctx := ctxT(t)
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	try := 0
	testenv.Retry(t, testenv.Tries, func(t *testing.T) error {
		try++
		p, err := faultproxy.New(faultproxy.Config{Target: n.Addr})
		if err != nil {
			t.Fatal(err)
		}
		defer p.Close()
		s, err := New(ctx, Config{Addrs: []string{p.Addr()}, Timeout: 200 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		b, err := buffer.New(s, buffer.Config{
			Interval:     time.Hour, // flushes only when the test asks
			BatchTimeout: 300 * time.Millisecond,
			Labels:       func(string) []string { return []string{"0"} },
		})
		if err != nil {
			t.Fatal(err)
		}
		defer b.Close(context.Background())
		cold, hot := fmt.Sprintf("cold%d", try), fmt.Sprintf("hot%d", try)
		var addedCold, addedHot int64
		add := func() {
			if err := b.Add(cold, 1); err != nil {
				t.Fatal(err)
			}
			addedCold++
			for range 2 * buffer.DefaultHotAt {
				if err := b.Add(hot, 1); err != nil {
					t.Fatal(err)
				}
				addedHot++
			}
		}
		add()
		if err := b.Flush(ctx); err != nil { // no fault: warms the connection and the script
			t.Fatal(err)
		}

		// Replies lost: both ops ran, neither reply came back.
		p.DropReplies(1)
		add()
		_ = b.Flush(ctx)
		p.DropReplies(0)
		lost := p.Stats().RepliesDropped > 0 && b.Stats().ColdDropped > 0

		// Half-open: the commands wait in the silent connection, time
		// out, and run once it flows again.
		p.SetHalfOpen(true)
		add()
		_ = b.Flush(ctx)
		time.Sleep(50 * time.Millisecond)
		p.SetHalfOpen(false)

		// The hot key's op is retried until acknowledged.
		deadline := time.Now().Add(20 * time.Second)
		for b.Stats().InFlight > 0 || b.Pending(hot) != 0 || b.Pending(cold) != 0 {
			if time.Now().After(deadline) {
				t.Fatalf("ops still pending: %+v", b.Stats())
			}
			_ = b.Flush(ctx)
		}
		st := b.Stats()
		vals, err := s.Get(ctx, []string{keyspace.SubKey(cold, "0"), keyspace.SubKey(hot, "0")})
		if err != nil {
			t.Fatal(err)
		}
		if vals[1] != addedHot {
			t.Fatalf("hot key holds %d, want %d (exactly once); stats %+v", vals[1], addedHot, st)
		}
		if vals[0] > addedCold || vals[0] < addedCold-st.ColdDroppedDelta {
			t.Fatalf("cold key holds %d; added %d, dropped %d: want %d..%d; stats %+v",
				vals[0], addedCold, st.ColdDroppedDelta, addedCold-st.ColdDroppedDelta, addedCold, st)
		}
		if !lost {
			return errors.New("the fault did not happen: no cold reply was lost")
		}
		return nil
	})
}

// TestNoReplyErrors: a plain INCRBY whose reply is lost fails with
// store.ErrNoReply; one sent to a node that refuses connections was never
// written and fails with store.ErrUnavailable alone.
func TestNoReplyErrors(t *testing.T) {
	ctx := ctxT(t)
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Stop() })
	p, err := faultproxy.New(faultproxy.Config{Target: n.Addr})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	s, err := New(ctx, Config{Addrs: []string{p.Addr()}, Timeout: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	op := []store.IncrOp{{Key: keyspace.SubKey("nr", "0"), Delta: 1}}
	testenv.Retry(t, testenv.Tries, func(t *testing.T) error {
		if res, err := s.IncrMulti(ctx, op); err != nil || res[0].Err != nil {
			t.Fatalf("warm-up: %v %+v", err, res)
		}
		conns := p.Stats().Accepted
		p.DropReplies(1)
		res, err := s.IncrMulti(ctx, op)
		p.DropReplies(0)
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Err == nil {
			return errors.New("the fault did not happen: the reply came back")
		}
		if p.Stats().Accepted != conns && !errors.Is(res[0].Err, store.ErrNoReply) {
			return fmt.Errorf("the fault did not happen: the op went on a new connection whose handshake lost its reply (%v)", res[0].Err)
		}
		if !errors.Is(res[0].Err, store.ErrNoReply) || !errors.Is(res[0].Err, store.ErrUnavailable) {
			t.Fatalf("lost reply: %v, want ErrUnavailable and ErrNoReply", res[0].Err)
		}
		return nil
	})
	// Every connection reset before its handshake is answered. A command
	// on a connection opened before (rueidis keeps several) may get no
	// reply; one on a connection reset before its handshake was never
	// written, and must say so.
	p.Pause(faultproxy.PauseReset)
	clean := 0
	for i := 0; clean < 3; i++ {
		if i == 50 {
			t.Fatal("50 calls to a node that refuses connections, and none failed as never written")
		}
		res, err := s.IncrMulti(ctx, op)
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case res[0].Err == nil || !errors.Is(res[0].Err, store.ErrUnavailable):
			t.Fatalf("refused: %v, want ErrUnavailable", res[0].Err)
		case !errors.Is(res[0].Err, store.ErrNoReply):
			clean++
		}
	}
}

// TestSequencedOps: an op with a writer sequence is applied once per
// (writer, sequence), a lower or equal sequence is skipped, writers are
// independent, the hash holds one field per writer and expires, and a
// hash kept alive past its TTL drops the writers not heard from since.
func TestSequencedOps(t *testing.T) {
	ctx := ctxT(t)
	s, err := New(ctx, Config{Addrs: clusterSeeds(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := keyspace.SubKey(t.Name(), "0")
	seqKey := keyspace.SeqKey(t.Name(), "0")
	_ = s.Del(ctx, []string{key, seqKey})
	op := func(writer string, seq uint64, delta int64) store.IncrResult {
		t.Helper()
		res, err := s.IncrMulti(ctx, []store.IncrOp{{Key: key, Delta: delta, SeqKey: seqKey, Writer: writer, Seq: seq}})
		if err != nil || res[0].Err != nil {
			t.Fatalf("op %s/%d: %v %+v", writer, seq, err, res)
		}
		return res[0]
	}
	steps := []struct {
		writer  string
		seq     uint64
		applied bool
		value   int64
	}{
		{"a", 1, true, 5},
		{"a", 1, false, 0}, // a retry of an applied op
		{"a", 2, true, 10},
		{"a", 1, false, 0}, // an older op
		{"b", 1, true, 15}, // another writer
		{"b", 3, true, 20},
		{"a", 3, true, 25},
	}
	for i, st := range steps {
		if r := op(st.writer, st.seq, 5); r.Applied != st.applied || r.Value != st.value {
			t.Fatalf("step %d: %+v, want applied %v value %d", i, r, st.applied, st.value)
		}
	}
	addr := primaryOf(t, seqKey)
	if n := nodeDo(t, addr, "HLEN", seqKey); n.Error() != nil || mustInt(t, n) != 2 {
		t.Fatalf("HLEN %v", n)
	}
	if ttl := mustInt(t, nodeDo(t, addr, "PTTL", seqKey)); ttl <= 0 || ttl > store.DefaultTokenTTL.Milliseconds() {
		t.Fatalf("PTTL %d", ttl)
	}
	bad := []store.IncrOp{
		{Key: key, Delta: 1, SeqKey: keyspace.SeqKey("other", "0"), Writer: "a", Seq: 9},
		{Key: key, Delta: 1, SeqKey: seqKey, Seq: 9},
		{Key: key, Delta: 1, SeqKey: seqKey, Writer: "a"},
	}
	res, err := s.IncrMulti(ctx, bad)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range res {
		if !errors.Is(r.Err, ErrInvalidOp) {
			t.Fatalf("bad op %d: %+v", i, r)
		}
	}

	// Writers that ended: with a TTL of 300 ms and a new writer every
	// write, the hash keeps fewer fields than writers once it has lived
	// past its TTL with more than 64.
	pruned := keyspace.SeqKey(t.Name()+"p", "0")
	pkey := keyspace.SubKey(t.Name()+"p", "0")
	start := time.Now()
	n := 0
	for ; n < 100 || time.Since(start) < 500*time.Millisecond; n++ {
		res, err := s.IncrMulti(ctx, []store.IncrOp{{Key: pkey, Delta: 1, SeqKey: pruned, Writer: fmt.Sprint("w", n), Seq: 1, TTL: 300 * time.Millisecond}})
		if err != nil || res[0].Err != nil {
			t.Fatal(err, res)
		}
		time.Sleep(2 * time.Millisecond)
	}
	if h := mustInt(t, nodeDo(t, primaryOf(t, pruned), "HLEN", pruned)); h >= int64(n) {
		t.Fatalf("%d writers over %v left %d fields: none of the ended ones was dropped", n, time.Since(start), h)
	}
}

// primaryOf returns the address of the primary that owns key's slot.
func primaryOf(t *testing.T, key string) string {
	t.Helper()
	return shardOwners(t, clusterSeeds(t)[0])[keyspace.Slot(key)]
}

func mustInt(t *testing.T, r rueidis.RedisResult) int64 {
	t.Helper()
	v, err := r.AsInt64()
	if err != nil {
		t.Fatal(err)
	}
	return v
}
