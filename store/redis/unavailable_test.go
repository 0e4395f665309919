package redis

import (
	"errors"
	"fmt"
	"testing"

	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// TestUnavailable checks that timeouts surface as store.ErrUnavailable,
// and that a token op retried after a timeout whose first attempt did run
// later is applied exactly once.
func TestUnavailable(t *testing.T) {
	ctx := ctxT(t)
	n, s := shortTimeoutStore(ctx, t)
	if _, err := s.IncrMulti(ctx, []store.IncrOp{{Key: keyspace.SubKey("u", "0"), Delta: 0, TokenKey: keyspace.AuxKey("u", "0", "flush", "warm")}}); err != nil {
		t.Fatal(err) // loads the script
	}

	// The server stops answering for 600 ms: the op times out, but it is
	// queued and runs when the pause ends. On a busy machine the op may
	// reach the server only after the pause: then it is tried again.
	try := 0
	testenv.Retry(t, testenv.Tries, func(t *testing.T) error {
		try++
		ctx := ctxT(t)
		base := fmt.Sprintf("u%d", try)
		key := keyspace.SubKey(base, "0")
		op := store.IncrOp{Key: key, Delta: 7, TokenKey: keyspace.AuxKey(base, "0", "flush", "t1")}
		mustDo(t, n.Addr, "CLIENT", "PAUSE", "600", "ALL")
		var missed error
		res, err := s.IncrMulti(ctx, []store.IncrOp{op})
		switch {
		case err != nil:
			t.Fatalf("paused: %v", err)
		case res[0].Err == nil:
			missed = fmt.Errorf("the fault did not happen: the op was answered (%+v): it reached the server after the pause", res[0])
		case !errors.Is(res[0].Err, store.ErrUnavailable) || res[0].Applied:
			t.Fatalf("paused: %+v; want ErrUnavailable", res)
		}
		if missed == nil {
			if _, err := s.Get(ctx, []string{key}); err == nil {
				missed = errors.New("the fault did not happen: the Get was answered: it reached the server after the pause")
			} else if !errors.Is(err, store.ErrUnavailable) {
				t.Fatalf("paused Get: %v", err)
			}
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
		return missed
	})
}

// TestUnavailableDeadServer: every call to a server that is gone fails
// with store.ErrUnavailable.
func TestUnavailableDeadServer(t *testing.T) {
	ctx := ctxT(t)
	n, s := shortTimeoutStore(ctx, t)
	key := keyspace.SubKey("u", "0")
	op := store.IncrOp{Key: key, Delta: 7, TokenKey: keyspace.AuxKey("u", "0", "flush", "t1")}
	if _, err := s.IncrMulti(ctx, []store.IncrOp{op}); err != nil {
		t.Fatal(err)
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.IncrBy(ctx, key, 1); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("IncrBy on a dead server: %v", err)
	}
	res, _ := s.IncrMulti(ctx, []store.IncrOp{op, {Key: key, Delta: 1}})
	for _, r := range res {
		if !errors.Is(r.Err, store.ErrUnavailable) {
			t.Fatalf("IncrMulti on a dead server: %+v", r)
		}
	}
	if _, err := s.Get(ctx, []string{key}); !errors.Is(err, store.ErrUnavailable) {
		t.Fatalf("Get on a dead server: %v", err)
	}
}
