package redis

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

func newClusterStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	cfg.Addrs = clusterSeeds(t)
	s, err := New(ctxT(t), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newStandaloneStore(t testing.TB, cfg Config) *Store {
	t.Helper()
	cfg.Addrs = []string{standaloneAddr(t)}
	s, err := New(ctxT(t), cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// backends runs f against the cluster and against a standalone server.
func backends(t *testing.T, f func(t *testing.T, s *Store)) {
	t.Run("cluster", func(t *testing.T) {
		s := newClusterStore(t, Config{})
		if !s.Cluster() {
			t.Fatal("Cluster() = false on a cluster")
		}
		flushCluster(t)
		f(t, s)
	})
	t.Run("standalone", func(t *testing.T) {
		s := newStandaloneStore(t, Config{})
		if s.Cluster() {
			t.Fatal("Cluster() = true on a standalone server")
		}
		topo, _ := s.Topology(ctxT(t))
		if len(topo.Nodes) != 1 || topo.Nodes[0] != standaloneAddr(t) || topo.NodeOfSlot(16383) != topo.Nodes[0] {
			t.Fatalf("standalone topology nodes %v", topo.Nodes)
		}
		if err := nodeDo(t, standaloneAddr(t), "FLUSHALL").Error(); err != nil {
			t.Fatal(err)
		}
		f(t, s)
	})
}

// set writes a raw value on the node that owns key.
func set(t *testing.T, s *Store, key, value string) {
	t.Helper()
	topo, _ := s.Topology(ctxT(t))
	if err := nodeDo(t, topo.NodeOf(key), "SET", key, value).Error(); err != nil {
		t.Fatalf("SET %s: %v", key, err)
	}
}

func raw(t *testing.T, s *Store, args ...string) (int64, error) {
	t.Helper()
	topo, _ := s.Topology(ctxT(t))
	return nodeDo(t, topo.NodeOf(args[1]), args...).AsInt64()
}

func get1(t *testing.T, s *Store, key string) int64 {
	t.Helper()
	v, err := s.Get(ctxT(t), []string{key})
	if err != nil {
		t.Fatalf("Get %s: %v", key, err)
	}
	return v[0]
}

func TestGetIncrDel(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := ctxT(t)
		keys := make([]string, 40)
		for i := range keys {
			keys[i] = keyspace.SubKey("c", strconv.Itoa(i))
		}
		got, err := s.Get(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if v != 0 {
				t.Fatalf("missing key %s reads %d", keys[i], v)
			}
		}
		for i, k := range keys {
			if v, err := s.IncrBy(ctx, k, int64(i)-7); err != nil || v != int64(i)-7 {
				t.Fatalf("IncrBy %s = %d, %v", k, v, err)
			}
		}
		if v, err := s.IncrBy(ctx, keys[3], 10); err != nil || v != 6 {
			t.Fatalf("IncrBy again = %d, %v; want 6", v, err)
		}
		got, err = s.Get(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			want := int64(i) - 7
			if i == 3 {
				want = 6
			}
			if v != want {
				t.Fatalf("Get %s = %d, want %d", keys[i], v, want)
			}
		}
		if err := s.Del(ctx, append(keys[:20:20], "never-written")); err != nil {
			t.Fatal(err)
		}
		got, err = s.Get(ctx, keys)
		if err != nil {
			t.Fatal(err)
		}
		for i, v := range got {
			if (i < 20) != (v == 0) && !(i == 7) { // keys[7] holds 0 anyway
				t.Fatalf("after Del, %s = %d", keys[i], v)
			}
		}
		if got, err := s.Get(ctx, nil); err != nil || len(got) != 0 {
			t.Fatalf("Get(nil) = %v, %v", got, err)
		}
	})
}

func TestErrors(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := ctxT(t)
		tests := []struct {
			name    string
			initial string // raw value; "" = missing
			delta   int64
			want    error
		}{
			{"overflow up", strconv.FormatInt(math.MaxInt64-1, 10), 2, store.ErrOverflow},
			{"overflow down", strconv.FormatInt(math.MinInt64+1, 10), -2, store.ErrOverflow},
			{"max exactly", strconv.FormatInt(math.MaxInt64-1, 10), 1, nil},
			{"not an integer", "abc", 1, store.ErrNotInteger},
			{"float", "1.5", 1, store.ErrNotInteger},
		}
		for i, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				key := keyspace.SubKey("err", strconv.Itoa(i))
				set(t, s, key, tt.initial)
				_, err := s.IncrBy(ctx, key, tt.delta)
				if !errors.Is(err, tt.want) && !(tt.want == nil && err == nil) {
					t.Fatalf("IncrBy: %v, want %v", err, tt.want)
				}
				res, err := s.IncrMulti(ctx, []store.IncrOp{{Key: key, Delta: tt.delta}})
				if err != nil {
					t.Fatal(err)
				}
				if tt.want != nil && (!errors.Is(res[0].Err, tt.want) || res[0].Applied) {
					t.Fatalf("IncrMulti: %+v, want %v", res[0], tt.want)
				}
				if tt.want == store.ErrOverflow {
					if v := get1(t, s, key); strconv.FormatInt(v, 10) != tt.initial {
						t.Fatalf("after overflow value = %d, want %s", v, tt.initial)
					}
				}
				if tt.want == store.ErrNotInteger {
					if _, err := s.Get(ctx, []string{"x", key}); !errors.Is(err, store.ErrNotInteger) {
						t.Fatalf("Get: %v, want ErrNotInteger", err)
					}
				}
			})
		}
		t.Run("wrong type", func(t *testing.T) {
			key := keyspace.SubKey("err", "hash")
			if _, err := raw(t, s, "HSET", key, "f", "1"); err != nil {
				t.Fatal(err)
			}
			if _, err := s.IncrBy(ctx, key, 1); !errors.Is(err, store.ErrNotInteger) {
				t.Fatalf("IncrBy on a hash: %v", err)
			}
			if _, err := s.Get(ctx, []string{key}); !errors.Is(err, store.ErrNotInteger) {
				t.Fatalf("Get of a hash: %v", err)
			}
		})
	})
}

func TestIncrMultiTokens(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := ctxT(t)
		key := keyspace.SubKey("tok", "1")
		tok := keyspace.AuxKey("tok", "1", "flush", "a1")

		t.Run("applied once", func(t *testing.T) {
			op := store.IncrOp{Key: key, Delta: 5, TokenKey: tok, TTL: time.Minute}
			res, err := s.IncrMulti(ctx, []store.IncrOp{op})
			if err != nil || res[0].Err != nil || !res[0].Applied || res[0].Value != 5 {
				t.Fatalf("first: %+v, %v", res, err)
			}
			res, err = s.IncrMulti(ctx, []store.IncrOp{op, op})
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range res {
				if r.Applied || r.Err != nil {
					t.Fatalf("retry: %+v, want not applied", r)
				}
			}
			if v := get1(t, s, key); v != 5 {
				t.Fatalf("value %d, want 5", v)
			}
			pttl, err := raw(t, s, "PTTL", tok)
			if err != nil || pttl <= 0 || pttl > time.Minute.Milliseconds() {
				t.Fatalf("token PTTL %d, %v", pttl, err)
			}
		})
		t.Run("default ttl", func(t *testing.T) {
			tok2 := keyspace.AuxKey("tok", "1", "flush", "a2")
			res, err := s.IncrMulti(ctx, []store.IncrOp{{Key: key, Delta: 1, TokenKey: tok2}})
			if err != nil || !res[0].Applied || res[0].Value != 6 {
				t.Fatalf("%+v, %v", res, err)
			}
			pttl, _ := raw(t, s, "PTTL", tok2)
			if pttl <= time.Minute.Milliseconds() || pttl > store.DefaultTokenTTL.Milliseconds() {
				t.Fatalf("token PTTL %d, want about %v", pttl, store.DefaultTokenTTL)
			}
		})
		t.Run("overflow keeps token", func(t *testing.T) {
			k := keyspace.SubKey("tok", "2")
			tk := keyspace.AuxKey("tok", "2", "flush", "b")
			set(t, s, k, strconv.FormatInt(math.MaxInt64-1, 10))
			op := store.IncrOp{Key: k, Delta: 5, TokenKey: tk}
			res, err := s.IncrMulti(ctx, []store.IncrOp{op})
			if err != nil || !errors.Is(res[0].Err, store.ErrOverflow) || res[0].Applied {
				t.Fatalf("%+v, %v; want ErrOverflow", res, err)
			}
			if n, _ := raw(t, s, "EXISTS", tk); n != 0 {
				t.Fatal("overflow burnt the token")
			}
			if v := get1(t, s, k); v != math.MaxInt64-1 {
				t.Fatalf("value changed to %d", v)
			}
			set(t, s, k, "0")
			res, _ = s.IncrMulti(ctx, []store.IncrOp{op})
			if !res[0].Applied || res[0].Value != 5 {
				t.Fatalf("after reset: %+v", res[0])
			}
		})
		t.Run("exact up to the bound", func(t *testing.T) {
			k := keyspace.SubKey("tok", "3")
			set(t, s, k, strconv.FormatInt(store.MaxValue-10, 10))
			res, _ := s.IncrMulti(ctx, []store.IncrOp{{Key: k, Delta: 10, TokenKey: keyspace.AuxKey("tok", "3", "flush", "c")}})
			if !res[0].Applied || res[0].Value != store.MaxValue {
				t.Fatalf("%+v, want Value %d", res[0], int64(store.MaxValue))
			}
			res, _ = s.IncrMulti(ctx, []store.IncrOp{{Key: k, Delta: 1, TokenKey: keyspace.AuxKey("tok", "3", "flush", "c2")}})
			if !errors.Is(res[0].Err, store.ErrOverflow) || res[0].Applied {
				t.Fatalf("%+v, want ErrOverflow past the bound", res[0])
			}
			if v := get1(t, s, k); v != store.MaxValue {
				t.Fatalf("value %d after a refused op, want %d", v, int64(store.MaxValue))
			}
		})
		t.Run("not an integer", func(t *testing.T) {
			k := keyspace.SubKey("tok", "4")
			set(t, s, k, "x")
			res, _ := s.IncrMulti(ctx, []store.IncrOp{{Key: k, Delta: 3, TokenKey: keyspace.AuxKey("tok", "4", "flush", "d")}})
			if !errors.Is(res[0].Err, store.ErrNotInteger) {
				t.Fatalf("%+v", res[0])
			}
		})
		t.Run("invalid ops", func(t *testing.T) {
			res, err := s.IncrMulti(ctx, []store.IncrOp{
				{Key: key, Delta: 1, TokenKey: "elsewhere"},
				{Key: key, Delta: 1, TokenKey: tok + ":x", TTL: -time.Second},
				{Key: key, Delta: 1},
			})
			if err != nil {
				t.Fatal(err)
			}
			if !errors.Is(res[0].Err, ErrInvalidOp) || !errors.Is(res[1].Err, ErrInvalidOp) || res[2].Err != nil || !res[2].Applied {
				t.Fatalf("%+v", res)
			}
		})
		t.Run("many keys", func(t *testing.T) {
			var ops []store.IncrOp
			for i := range 60 {
				op := store.IncrOp{Key: keyspace.SubKey("many", strconv.Itoa(i)), Delta: int64(i + 1)}
				if i%2 == 0 {
					op.TokenKey = keyspace.AuxKey("many", strconv.Itoa(i), "flush", "z")
				}
				ops = append(ops, op)
			}
			for round := range 2 {
				res, err := s.IncrMulti(ctx, ops)
				if err != nil {
					t.Fatal(err)
				}
				for i, r := range res {
					wantApplied := round == 0 || ops[i].TokenKey == ""
					if r.Err != nil || r.Applied != wantApplied {
						t.Fatalf("round %d op %d: %+v", round, i, r)
					}
				}
			}
			keys := make([]string, len(ops))
			for i := range ops {
				keys[i] = ops[i].Key
			}
			got, _ := s.Get(ctx, keys)
			for i, v := range got {
				want := ops[i].Delta
				if ops[i].TokenKey == "" {
					want *= 2
				}
				if v != want {
					t.Fatalf("%s = %d, want %d", keys[i], v, want)
				}
			}
		})
		t.Run("script flushed", func(t *testing.T) {
			topo, _ := s.Topology(ctx)
			for _, n := range topo.Nodes {
				if err := nodeDo(t, n, "SCRIPT", "FLUSH").Error(); err != nil {
					t.Fatal(err)
				}
			}
			k := keyspace.SubKey("tok", "5")
			res, _ := s.IncrMulti(ctx, []store.IncrOp{{Key: k, Delta: 2, TokenKey: keyspace.AuxKey("tok", "5", "flush", "e")}})
			if !res[0].Applied || res[0].Value != 2 {
				t.Fatalf("after SCRIPT FLUSH: %+v", res[0])
			}
		})
	})
}

func TestClose(t *testing.T) {
	backends(t, func(t *testing.T, s *Store) {
		ctx := ctxT(t)
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatalf("second Close: %v", err)
		}
		_, err1 := s.IncrBy(ctx, "k", 1)
		_, err2 := s.Get(ctx, []string{"k"})
		err3 := s.Del(ctx, []string{"k"})
		_, err4 := s.IncrMulti(ctx, []store.IncrOp{{Key: "k", Delta: 1}})
		_, err5 := s.Topology(ctx)
		err6 := s.RefreshTopology(ctx)
		for i, err := range []error{err1, err2, err3, err4, err5, err6} {
			if !errors.Is(err, store.ErrClosed) {
				t.Errorf("call %d after Close: %v", i+1, err)
			}
		}
	})
}

var _ = fmt.Sprint
