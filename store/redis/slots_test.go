package redis

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/keyspace"
	"github.com/hotcount/hotcount/store"
)

// slotTestKeys returns n keys of many shapes: plain, hash-tagged, sub-keys
// and auxiliary keys, unicode, and degenerate braces.
func slotTestKeys(n int) []string {
	r := rand.New(rand.NewPCG(1, 2))
	fixed := []string{
		"", "{", "}", "{}", "{}x", "x{}", "{}{x}", "{{x}}", "{x}{y}", "a{b}c", "a{}b{c}",
		"{user1000}.following", "{user1000}.followers", "123456789", "foo{bar}zap",
		keyspace.SubKey("likes:post:42", "3"), keyspace.AuxKey("likes:post:42", "3", "tok", "abc"),
		keyspace.MetaKey("views:ü"), "日本語", "{日本}語", "emoji🙂{🙂}",
	}
	keys := append([]string(nil), fixed...)
	alphabet := []rune("abcXYZ019:#{}-_.éü日本🙂 ")
	for len(keys) < n {
		switch r.IntN(5) {
		case 0:
			keys = append(keys, fmt.Sprintf("{user%d}.following", r.IntN(1e6)))
		case 1:
			keys = append(keys, keyspace.SubKey(fmt.Sprintf("k%d", r.IntN(1e5)), fmt.Sprint(r.IntN(64))))
		case 2:
			keys = append(keys, fmt.Sprintf("{k#%d}", r.IntN(1e6)))
		default:
			b := make([]rune, 1+r.IntN(24))
			for i := range b {
				b[i] = alphabet[r.IntN(len(alphabet))]
			}
			keys = append(keys, string(b))
		}
	}
	return keys
}

// TestSlotMatchesClusterKeyslot checks keyspace.Slot against CLUSTER
// KEYSLOT on a live node for 5,000 keys.
func TestSlotMatchesClusterKeyslot(t *testing.T) {
	addr := clusterSeeds(t)[0]
	c := node(t, addr)
	keys := slotTestKeys(5000)
	for chunk := range slices.Chunk(keys, 1000) {
		cmds := make(rueidis.Commands, len(chunk))
		for i, k := range chunk {
			cmds[i] = c.B().ClusterKeyslot().Key(k).Build()
		}
		for i, r := range c.DoMulti(ctxT(t), cmds...) {
			want, err := r.AsInt64()
			if err != nil {
				t.Fatalf("CLUSTER KEYSLOT %q: %v", chunk[i], err)
			}
			if got := keyspace.Slot(chunk[i]); int64(got) != want {
				t.Errorf("Slot(%q) = %d, CLUSTER KEYSLOT = %d", chunk[i], got, want)
			}
		}
	}
}

// TestTopologyMatchesCluster checks the store's slot map against CLUSTER
// SHARDS, and that every key's node answers it without MOVED.
func TestTopologyMatchesCluster(t *testing.T) {
	ctx := ctxT(t)
	s := newClusterStore(t, Config{})
	topo, err := s.Topology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	owners := shardOwners(t, clusterSeeds(t)[0])
	if want := primaries(t); !slices.Equal(topo.Nodes, want) {
		t.Fatalf("Nodes = %v, CLUSTER SHARDS primaries = %v", topo.Nodes, want)
	}
	ps, err := cluster.Primaries(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if slices.Sort(ps); !slices.Equal(topo.Nodes, ps) || len(ps) != 3 {
		t.Fatalf("Nodes = %v, the cluster's primaries = %v", topo.Nodes, ps)
	}
	for slot := range uint16(keyspace.SlotCount) {
		if got := topo.NodeOfSlot(slot); got != owners[slot] {
			t.Fatalf("slot %d: topology says %s, CLUSTER SHARDS says %s", slot, got, owners[slot])
		}
	}
	keys := slotTestKeys(600)
	for _, k := range keys {
		owner := topo.NodeOf(k)
		if err := nodeDo(t, owner, "GET", k).Error(); err != nil && !rueidis.IsRedisNil(err) {
			t.Fatalf("GET %q on %s (its owner by Topology): %v", k, owner, err)
		}
	}
	// The check above can fail: the other nodes answer MOVED.
	k := keys[len(keys)-1]
	for _, n := range topo.Nodes {
		if n == topo.NodeOf(k) {
			continue
		}
		err := nodeDo(t, n, "GET", k).Error()
		if re, ok := rueidis.IsRedisErr(err); !ok || !isMoved(re) {
			t.Fatalf("GET %q on %s (not its owner): %v, want MOVED", k, n, err)
		}
	}
	if s.Cluster() != true || topo.Epoch == 0 {
		t.Fatalf("Cluster() = %v, Epoch = %d", s.Cluster(), topo.Epoch)
	}
}

func isMoved(re *rueidis.RedisError) bool {
	_, ok := re.IsMoved()
	return ok
}

// TestNewUnreachable checks that an address nobody listens on fails New
// with store.ErrUnavailable.
func TestNewUnreachable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	for _, single := range []bool{false, true} {
		start := time.Now()
		s, err := New(ctxT(t), Config{Addrs: []string{addr}, ForceSingle: single})
		t.Logf("New(%s, ForceSingle=%v) failed after %v: %v", addr, single, time.Since(start), err)
		if !errors.Is(err, store.ErrUnavailable) {
			if s != nil {
				s.Close()
			}
			t.Fatalf("New(%s, ForceSingle=%v) error = %v, want ErrUnavailable", addr, single, err)
		}
	}
}

// TestConfig checks validation and that New does not change its argument.
func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		cfg  Config
	}{
		{"no addresses", Config{}},
		{"empty address", Config{Addrs: []string{""}}},
		{"negative timeout", Config{Addrs: []string{"127.0.0.1:1"}, Timeout: -1}},
		{"negative dial timeout", Config{Addrs: []string{"127.0.0.1:1"}, DialTimeout: -1}},
		{"negative refresh", Config{Addrs: []string{"127.0.0.1:1"}, TopologyRefresh: -1}},
		{"negative concurrency", Config{Addrs: []string{"127.0.0.1:1"}, MaxConcurrency: -1}},
		{"negative flush delay", Config{Addrs: []string{"127.0.0.1:1"}, FlushDelay: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := New(ctxT(t), tt.cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("New: %v, want ErrInvalidConfig", err)
			}
		})
	}
	cfg := Config{Addrs: []string{"127.0.0.1:1"}}
	got, err := cfg.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Timeout != 0 || got.Timeout != DefaultTimeout || got.DialTimeout != DefaultDialTimeout ||
		got.TopologyRefresh != DefaultTopologyRefresh || got.MaxConcurrency != DefaultMaxConcurrency {
		t.Fatalf("defaults: %+v (caller's: %+v)", got, cfg)
	}
	got.Addrs[0] = "changed"
	if cfg.Addrs[0] != "127.0.0.1:1" {
		t.Fatal("withDefaults shares the caller's Addrs")
	}
}
