// Package testenv is the test harness: real redis-server processes and
// Redis Clusters on free ports, the test PostgreSQL, throw-away TLS
// certificates, Retry for fault tests, and CheckJSONError for the JSON
// errors of the HTTP faces (serve, the proxy's admin port).
//
// The processes are started by internal/rediscluster, the production
// package behind `hotcount cluster up/down/status`; this package builds on
// it and re-exports its names (Cluster, StartCluster, Do, ...), so that
// tests import one package. The dependency runs one way: production code
// never imports testenv (internal/layout checks it).
//
// Main starts one cluster for a package's tests and stops it when they
// end; a missing redis-server fails the run loudly, never skips it.
//
// Retry runs a fault test (or a load test whose timeouts leave outcomes
// unknown) as up to Tries subtests: a try whose fault did not happen is
// logged and tried again, a try with wrong data fails the test at once,
// and a test whose fault never happened is skipped with the reason, never
// failed, so that the suite passes on a busy machine without a test that
// cannot fail.
package testenv

import (
	"context"

	"github.com/hotcount/hotcount/internal/rediscluster"
)

// Types of rediscluster, under the names the tests use.
type (
	// Cluster is a running Redis Cluster (rediscluster.Cluster).
	Cluster = rediscluster.Cluster
	// ClusterOptions configures StartCluster (rediscluster.ClusterOptions).
	ClusterOptions = rediscluster.ClusterOptions
	// ClusterStatus is StatusReport's answer (rediscluster.ClusterStatus).
	ClusterStatus = rediscluster.ClusterStatus
	// NodeStatus is one node of a ClusterStatus (rediscluster.NodeStatus).
	NodeStatus = rediscluster.NodeStatus
	// Node is one redis-server process (rediscluster.Node).
	Node = rediscluster.Node
	// NodeOptions configures StartNode (rediscluster.NodeOptions).
	NodeOptions = rediscluster.NodeOptions
)

// PortsEnv names the environment variable that sets the range of the
// nodes' ports (rediscluster.PortsEnv).
const PortsEnv = rediscluster.PortsEnv

// Named errors of rediscluster, for errors.Is.
var (
	// ErrNoRedis: no redis-server binary was found.
	ErrNoRedis = rediscluster.ErrNoRedis
	// ErrInvalidOptions: options out of range.
	ErrInvalidOptions = rediscluster.ErrInvalidOptions
	// ErrReply wraps an error reply from Redis.
	ErrReply = rediscluster.ErrReply
	// ErrNil: Redis replied with a nil bulk or array.
	ErrNil = rediscluster.ErrNil
	// ErrProtocol: a reply that is not valid RESP.
	ErrProtocol = rediscluster.ErrProtocol
	// ErrPortInUse: a requested port, or its bus port, is taken.
	ErrPortInUse = rediscluster.ErrPortInUse
	// ErrStopped: a node or cluster stopped for good was used again.
	ErrStopped = rediscluster.ErrStopped
	// ErrNotHealthy: a cluster did not become healthy in time.
	ErrNotHealthy = rediscluster.ErrNotHealthy
	// ErrNoCluster: a directory holds no cluster state.
	ErrNoCluster = rediscluster.ErrNoCluster
	// ErrRunning: a directory already holds a running cluster.
	ErrRunning = rediscluster.ErrRunning
	// ErrBadPorts: PortsEnv holds no valid port range.
	ErrBadPorts = rediscluster.ErrBadPorts
)

// RedisServer returns the path of redis-server (rediscluster.RedisServer).
func RedisServer() (string, error) { return rediscluster.RedisServer() }

// StartCluster starts a Redis Cluster and waits until it is healthy
// (rediscluster.StartCluster).
func StartCluster(ctx context.Context, o ClusterOptions) (*Cluster, error) {
	return rediscluster.StartCluster(ctx, o)
}

// StartNode starts one redis-server (rediscluster.StartNode).
func StartNode(ctx context.Context, o NodeOptions) (*Node, error) {
	return rediscluster.StartNode(ctx, o)
}

// Do runs one command on the node at addr over a fresh connection
// (rediscluster.Do).
func Do(ctx context.Context, addr string, args ...string) (string, error) {
	return rediscluster.Do(ctx, addr, args...)
}

// CommandStats returns the calls per command of the node at addr
// (rediscluster.CommandStats).
func CommandStats(ctx context.Context, addr string) (map[string]int64, error) {
	return rediscluster.CommandStats(ctx, addr)
}

// MigrateSlot moves slot from primary src to primary dst
// (rediscluster.MigrateSlot).
func MigrateSlot(ctx context.Context, slot uint16, src, dst string, primaries []string) error {
	return rediscluster.MigrateSlot(ctx, slot, src, dst, primaries)
}

// Down stops the daemonized cluster in dir (rediscluster.Down).
func Down(dir string) error { return rediscluster.Down(dir) }

// StatusReport describes the daemonized cluster in dir
// (rediscluster.StatusReport).
func StatusReport(ctx context.Context, dir string) (*ClusterStatus, error) {
	return rediscluster.StatusReport(ctx, dir)
}

// Status is StatusReport as text (rediscluster.Status).
func Status(ctx context.Context, dir string) (string, error) {
	return rediscluster.Status(ctx, dir)
}
