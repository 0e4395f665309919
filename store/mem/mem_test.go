package mem

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/hotcount/hotcount/clock"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

func TestRoutingMatchesSlots(t *testing.T) {
	s, err := New(Config{Nodes: 3})
	if err != nil {
		t.Fatal(err)
	}
	topo, _ := s.Topology(context.Background())
	// A fresh 3-primary Redis Cluster splits the slots 0-5460, 5461-10922,
	// 10923-16383; the embedded store does the same.
	for _, tc := range []struct {
		slot uint16
		node string
	}{{0, "mem-00"}, {5460, "mem-00"}, {5461, "mem-01"}, {10922, "mem-01"}, {10923, "mem-02"}, {16383, "mem-02"}} {
		if got := topo.NodeOfSlot(tc.slot); got != tc.node {
			t.Errorf("slot %d on %s, want %s", tc.slot, got, tc.node)
		}
	}
	if got := topo.NodeOf("foo"); got != topo.NodeOfSlot(keyspace.Slot("foo")) {
		t.Errorf("NodeOf(foo) = %s", got)
	}
}

func TestTokensAndOverflow(t *testing.T) {
	clk := clock.NewFake()
	s, _ := New(Config{Clock: clk})
	ctx := context.Background()
	key := keyspace.SubKey("k", "0")
	tok := keyspace.AuxKey("k", "0", "tok", "t1")
	op := store.IncrOp{Key: key, Delta: 5, TokenKey: tok, TTL: time.Minute}
	for i, wantApplied := range []bool{true, false, false} {
		res, err := s.IncrMulti(ctx, []store.IncrOp{op})
		if err != nil || res[0].Err != nil || res[0].Applied != wantApplied {
			t.Fatalf("attempt %d: %+v %v", i, res, err)
		}
	}
	clk.Advance(2 * time.Minute) // the token expired
	if res, _ := s.IncrMulti(ctx, []store.IncrOp{op}); !res[0].Applied {
		t.Fatalf("after expiry: %+v", res)
	}
	if v, _ := s.Get(ctx, []string{key}); v[0] != 10 {
		t.Fatalf("value %d, want 10", v[0])
	}
	// Overflow changes nothing and does not burn the token.
	big := store.IncrOp{Key: key, Delta: math.MaxInt64, TokenKey: keyspace.AuxKey("k", "0", "tok", "t2")}
	res, _ := s.IncrMulti(ctx, []store.IncrOp{big})
	if !errors.Is(res[0].Err, store.ErrOverflow) {
		t.Fatalf("overflow: %+v", res)
	}
	big.Delta = 1
	if res, _ := s.IncrMulti(ctx, []store.IncrOp{big}); !res[0].Applied {
		t.Fatalf("token burnt by a failed op: %+v", res)
	}
	// A token outside its key's slot is refused.
	bad := store.IncrOp{Key: key, Delta: 1, TokenKey: "elsewhere"}
	if res, _ := s.IncrMulti(ctx, []store.IncrOp{bad}); res[0].Err == nil || res[0].Applied {
		t.Fatalf("cross-slot token accepted: %+v", res)
	}
}

func TestClosedAndConfig(t *testing.T) {
	if _, err := New(Config{Nodes: -1}); !errors.Is(err, ErrConfig) {
		t.Fatalf("New(-1) = %v", err)
	}
	s, _ := New(Config{})
	_ = s.Close()
	if _, err := s.Get(context.Background(), []string{"a"}); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("Get after Close: %v", err)
	}
	if _, err := s.IncrBy(context.Background(), "a", 1); !errors.Is(err, store.ErrClosed) {
		t.Fatalf("IncrBy after Close: %v", err)
	}
}
