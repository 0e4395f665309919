// Package rediscluster starts and stops local redis-server processes: a
// standalone node or a Redis Cluster of primaries and replicas. It is what
// `hotcount cluster up/down/status` runs, and the test harness
// (internal/testenv) builds its test clusters on it.
//
// A Redis Cluster is built the way redis-cli --cluster create builds one, but
// directly, so that the layout is fixed and the start is quick:
//
//  1. Every node is started as its own redis-server process, cluster-enabled,
//     bound to 127.0.0.1 on a free port whose cluster bus port (port+10000) is
//     free too. Ports are picked at random below the kernel's ephemeral range,
//     so that concurrently running test binaries rarely collide and a stopped
//     node's port is not taken by an outgoing connection before it restarts;
//     a node that loses the race for its port is retried on another one.
//     HOTCOUNT_TEST_PORTS=lo-hi (PortsEnv; both bounds included, hi at most
//     55535 so that bus ports stay valid) sets the range instead, e.g. to
//     keep two suites on one machine apart or to stay inside a firewall's
//     open range; a bad value fails every start with ErrBadPorts, saying
//     what is wrong.
//  2. Primary i gets config epoch i+1 and the slots
//     [i*16384/P, (i+1)*16384/P-1]; then node 0 meets every other node and
//     gossip spreads the membership.
//  3. Once every node knows every other, replica j of primary i (node
//     P+i*R+j) is told to CLUSTER REPLICATE it.
//  4. The cluster is healthy when every running node reports cluster_state:ok
//     with all 16384 slots assigned, all running nodes agree on which node owns
//     which slot, every slot owner is a running node, and every running replica
//     has its replication link up and is seen online by its primary.
//
// Nodes run with a 2000 ms cluster node timeout, a replica validity factor of
// 0 and no replica migration, so that a killed primary is replaced by its own
// replica within a few seconds. Persistence is off (save "", appendonly no);
// data survives a Restart only through a dump file (SAVE, or the copy a
// replica keeps from its last full sync).
//
// Processes started in the foreground (tests) are killed by the kernel when
// the starting process dies (Linux parent-death signal). Daemonized
// processes (for the command line) run in their own session, write
// pidfiles, and are described by a JSON state file in the cluster
// directory, which Down and Status read.
//
// Redis 7.0 or newer is needed (CLUSTER ADDSLOTSRANGE). Ports and bus
// ports are on 127.0.0.1 only.
//
// Do and CommandStats speak a minimal RESP2 dialect over a fresh connection
// per call, so that the package depends on no client library and leaves no
// goroutines behind.
package rediscluster

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// Named errors.
var (
	// ErrNoRedis is returned when no redis-server binary can be found.
	ErrNoRedis = errors.New("rediscluster: redis-server not found (install it: apt-get install -y redis-server)")
	// ErrInvalidOptions is returned for options out of range.
	ErrInvalidOptions = errors.New("rediscluster: invalid options")
	// ErrReply wraps an error reply from Redis (e.g. "ERR ...", "MOVED ...").
	ErrReply = errors.New("rediscluster: redis error reply")
	// ErrNil is returned by Do when Redis replies with a nil bulk or array.
	ErrNil = errors.New("rediscluster: redis nil reply")
	// ErrProtocol is returned for a reply that is not valid RESP.
	ErrProtocol = errors.New("rediscluster: redis protocol error")
	// ErrPortInUse is returned when a requested port, or its cluster bus
	// port, is already taken.
	ErrPortInUse = errors.New("rediscluster: port in use")
	// ErrStopped is returned when a node or cluster that was stopped for good
	// is used again.
	ErrStopped = errors.New("rediscluster: stopped")
	// ErrNotHealthy is returned when a cluster does not become healthy in time.
	ErrNotHealthy = errors.New("rediscluster: cluster not healthy")
	// ErrNoCluster is returned by Down and Status for a directory that holds
	// no cluster state.
	ErrNoCluster = errors.New("rediscluster: no cluster in directory")
	// ErrRunning is returned by StartCluster when the directory already holds
	// a running daemonized cluster.
	ErrRunning = errors.New("rediscluster: cluster already running in directory")
	// ErrBadPorts is returned when PortsEnv holds no valid port range.
	ErrBadPorts = errors.New("rediscluster: bad port range")
)

// fallbackRedis is where Debian and Ubuntu install redis-server.
const fallbackRedis = "/usr/bin/redis-server"

// RedisServer returns the path of redis-server: the one on PATH, else
// /usr/bin/redis-server. The error (ErrNoRedis) says how to install it.
func RedisServer() (string, error) {
	return findRedis(exec.LookPath, fallbackRedis)
}

// findRedis is RedisServer with the lookup and fallback injected.
func findRedis(look func(string) (string, error), fallback string) (string, error) {
	if p, err := look("redis-server"); err == nil {
		return p, nil
	}
	if st, err := os.Stat(fallback); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
		return fallback, nil
	}
	return "", fmt.Errorf("%w; looked on PATH and at %s", ErrNoRedis, fallback)
}
