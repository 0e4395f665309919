package redis

import (
	"errors"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// TestUnavailable checks that timeouts and a dead server surface as
// store.ErrUnavailable, and that a token op retried after a timeout whose
// first attempt did run later is applied exactly once.
func TestUnavailable(t *testing.T) {
	ctx := ctxT(t)
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer n.Stop()
	s, err := New(ctx, Config{Addrs: []string{n.Addr}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	key := keyspace.SubKey("u", "0")
	op := store.IncrOp{Key: key, Delta: 7, TokenKey: keyspace.AuxKey("u", "0", "flush", "t1")}
	if _, err := s.IncrMulti(ctx, []store.IncrOp{{Key: key, Delta: 0, TokenKey: op.TokenKey + "warm"}}); err != nil {
		t.Fatal(err) // loads the script
	}

	// The server stops answering for 600 ms: the op times out, but it is
	// queued and runs when the pause ends.
	mustDo(t, n.Addr, "CLIENT", "PAUSE", "600", "ALL")
	res, err := s.IncrMulti(ctx, []store.IncrOp{op})
	if err != nil || !errors.Is(res[0].Err, store.ErrUnavailable) || res[0].Applied {
		t.Fatalf("paused: %+v, %v; want ErrUnavailable", res, err)
	}
	if _, err := s.Get(ctx, []string{key}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("paused Get: %v", err)
	}
	for { // the caller's retry loop, with the same token
		res, err = s.IncrMulti(ctx, []store.IncrOp{op})
		if err != nil {
			t.Fatal(err)
		}
		if res[0].Err == nil {
			break
		}
		if !errors.Is(res[0].Err, store.ErrUnavailable) || ctx.Err() != nil {
			t.Fatalf("retry: %v", res[0].Err)
		}
	}
	if v := get1(t, s, key); v != 7 {
		t.Fatalf("after retries value = %d, want 7 (applied exactly once)", v)
	}

	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IncrBy(ctx, key, 1); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("IncrBy on a dead server: %v", err)
	}
	res, _ = s.IncrMulti(ctx, []store.IncrOp{op, {Key: key, Delta: 1}})
	for _, r := range res {
		if !errors.Is(r.Err, store.ErrUnavailable) {
			t.Fatalf("IncrMulti on a dead server: %+v", r)
		}
	}
	if _, err := s.Get(ctx, []string{key}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Get on a dead server: %v", err)
	}
}
