package redis

import (
	"context"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/faultproxy"
	"github.com/hotcount/hotcount/internal/testenv"
)

// TestNewAfterEmptyFirstMap: the cluster client can end its first slot
// map read with no slots at all, when the only seed it has reached by
// then holds none (a node outside the cluster, or one that lost its
// configuration), and then knows no node. New asks it again, through
// every seed, instead of failing with "no cluster node is known".
func TestNewAfterEmptyFirstMap(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	empty, err := testenv.StartNode(ctx, testenv.NodeOptions{Cluster: true})
	if err != nil {
		t.Fatal(err)
	}
	defer empty.Stop()
	// The cluster's seed answers later than the empty node.
	p, err := faultproxy.New(faultproxy.Config{Target: clusterSeeds(t)[0]})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	p.SetLatency(faultproxy.Downstream, 200*time.Millisecond)
	s, err := New(ctx, Config{Addrs: []string{empty.Addr, p.Addr()}})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	defer s.Close()
	if _, err := s.IncrBy(ctx, "emptymap:k", 1); err != nil {
		t.Fatalf("INCRBY after New: %v", err)
	}
}
