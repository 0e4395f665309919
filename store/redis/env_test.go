package redis

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/redis/rueidis"

	"github.com/hotcount/hotcount/internal/testenv"
)

// cluster is the package's shared Redis Cluster: 3 primaries, 1 replica
// each, real redis-server processes on free ports.
var cluster *testenv.Cluster

func TestMain(m *testing.M) {
	code := testenv.Main(m, testenv.ClusterOptions{Primaries: 3, Replicas: 1}, &cluster)
	closeNodeClients()
	if single != nil {
		single.Stop()
	}
	os.Exit(code)
}

func clusterSeeds(t testing.TB) []string {
	t.Helper()
	return cluster.Seeds()
}

var (
	singleOnce sync.Once
	single     *testenv.Node
	singleErr  error
)

// standaloneAddr returns the address of a standalone redis-server shared by
// the package's tests, starting it on first use.
func standaloneAddr(t testing.TB) string {
	t.Helper()
	singleOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		single, singleErr = testenv.StartNode(ctx, testenv.NodeOptions{})
	})
	if singleErr != nil {
		t.Fatalf("start standalone redis: %v", singleErr)
	}
	return single.Addr
}

// flushCluster empties every primary of the cluster.
func flushCluster(t testing.TB) {
	t.Helper()
	if err := cluster.FlushAll(ctxT(t)); err != nil {
		t.Fatalf("FLUSHALL: %v", err)
	}
}

var (
	nodeMu      sync.Mutex
	nodeClients = map[string]rueidis.Client{}
)

// node returns a direct (non-cluster) client of one server, shared by the
// tests and closed by TestMain.
func node(t testing.TB, addr string) rueidis.Client {
	t.Helper()
	nodeMu.Lock()
	defer nodeMu.Unlock()
	if c, ok := nodeClients[addr]; ok {
		return c
	}
	c, err := rueidis.NewClient(rueidis.ClientOption{InitAddress: []string{addr}, ForceSingleClient: true, DisableCache: true})
	if err != nil {
		t.Fatalf("connect %s: %v", addr, err)
	}
	nodeClients[addr] = c
	return c
}

func closeNodeClients() {
	nodeMu.Lock()
	defer nodeMu.Unlock()
	for a, c := range nodeClients {
		c.Close()
		delete(nodeClients, a)
	}
}

// nodeDo runs one command on one server, without following redirects.
func nodeDo(t testing.TB, addr string, args ...string) rueidis.RedisResult {
	t.Helper()
	c := node(t, addr)
	return c.Do(ctxT(t), c.B().Arbitrary(args[0]).Args(args[1:]...).Build())
}
