package redis

import (
	"context"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
	"github.com/hotcount/hotcount/keyspace"
)

// shardOwners reads CLUSTER SHARDS from addr and returns the primary
// ("ip:port") of every slot.
func shardOwners(t testing.TB, addr string) [keyspace.SlotCount]string {
	t.Helper()
	shards, err := nodeDo(t, addr, "CLUSTER", "SHARDS").ToArray()
	if err != nil {
		t.Fatalf("CLUSTER SHARDS: %v", err)
	}
	var owners [keyspace.SlotCount]string
	for _, sh := range shards {
		m, err := sh.AsMap()
		if err != nil {
			t.Fatalf("shard: %v", err)
		}
		nm0 := m["nodes"]
		nodes, _ := nm0.ToArray()
		primary := ""
		for _, n := range nodes {
			nm, _ := n.AsMap()
			role, ip, port := nm["role"], nm["ip"], nm["port"]
			r, _ := role.ToString()
			h, _ := ip.ToString()
			p, _ := port.AsInt64()
			if r == "master" {
				primary = net.JoinHostPort(h, strconv.FormatInt(p, 10))
			}
		}
		sl := m["slots"]
		slots, _ := sl.AsIntSlice()
		for i := 0; i+1 < len(slots); i += 2 {
			for s := slots[i]; s <= slots[i+1]; s++ {
				owners[s] = primary
			}
		}
	}
	return owners
}

// primaries returns the sorted primaries that own slots.
func primaries(t testing.TB) []string {
	t.Helper()
	owners := shardOwners(t, clusterSeeds(t)[0])
	var out []string
	for _, o := range owners {
		if o != "" && !slices.Contains(out, o) {
			out = append(out, o)
		}
	}
	slices.Sort(out)
	return out
}

// commandCalls returns the calls of one command (lower case) from INFO
// commandstats of addr.
func commandCalls(t testing.TB, addr, cmd string) int64 {
	t.Helper()
	st, err := testenv.CommandStats(ctxT(t), addr)
	if err != nil {
		t.Fatalf("INFO commandstats on %s: %v", addr, err)
	}
	return st[cmd]
}

// clusterID returns the node id of addr.
func clusterID(t testing.TB, addr string) string {
	t.Helper()
	id, err := nodeDo(t, addr, "CLUSTER", "MYID").ToString()
	if err != nil {
		t.Fatalf("CLUSTER MYID on %s: %v", addr, err)
	}
	return id
}

// migrateSlot moves slot from src to dst the way redis-cli --cluster
// reshard does: IMPORTING on dst, MIGRATING on src, MIGRATE every key, then
// SETSLOT NODE on every primary.
func migrateSlot(t testing.TB, slot uint16, src, dst string, all []string) {
	t.Helper()
	s := strconv.Itoa(int(slot))
	srcID, dstID := clusterID(t, src), clusterID(t, dst)
	must := func(addr string, args ...string) {
		t.Helper()
		if err := nodeDo(t, addr, args...).Error(); err != nil {
			t.Fatalf("%s on %s: %v", strings.Join(args, " "), addr, err)
		}
	}
	must(dst, "CLUSTER", "SETSLOT", s, "IMPORTING", srcID)
	must(src, "CLUSTER", "SETSLOT", s, "MIGRATING", dstID)
	host, port, _ := net.SplitHostPort(dst)
	for {
		keys, err := nodeDo(t, src, "CLUSTER", "GETKEYSINSLOT", s, "100").AsStrSlice()
		if err != nil {
			t.Fatalf("GETKEYSINSLOT: %v", err)
		}
		if len(keys) == 0 {
			break
		}
		must(src, append([]string{"MIGRATE", host, port, "", "0", "5000", "KEYS"}, keys...)...)
	}
	for _, a := range all {
		must(a, "CLUSTER", "SETSLOT", s, "NODE", dstID)
	}
	waitOwner(t, slot, dst, all)
}

// shortTimeoutStore starts a standalone node and a Store on it with a
// Timeout of 100ms, both stopped at the end of the test.
func shortTimeoutStore(ctx context.Context, t testing.TB) (*testenv.Node, *Store) {
	t.Helper()
	n, err := testenv.StartNode(ctx, testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	s, err := New(ctx, Config{Addrs: []string{n.Addr}, Timeout: 100 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return n, s
}

func ctxT(t testing.TB) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}
