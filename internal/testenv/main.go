package testenv

import (
	"context"
	"fmt"
	"io"
	"os"
	"testing"
	"time"
)

// mainStartTimeout bounds the cluster start in Main.
const mainStartTimeout = 2 * time.Minute

// Main runs a package's tests against one shared cluster:
//
//	var cluster *testenv.Cluster
//
//	func TestMain(m *testing.M) { os.Exit(testenv.Main(m, testenv.ClusterOptions{Replicas: 1}, &cluster)) }
//
// It starts the cluster, sets *c, runs m.Run, stops the cluster and returns
// the exit code. If redis-server is missing or the cluster does not start it
// says so on stderr and returns 1: tests are never skipped silently.
func Main(m *testing.M, o ClusterOptions, c **Cluster) int {
	return runMain(m.Run, o, c, os.Stderr, RedisServer)
}

// runMain is Main with the test run, stderr and the redis-server lookup
// injected.
func runMain(run func() int, o ClusterOptions, c **Cluster, stderr io.Writer, find func() (string, error)) int {
	if _, err := find(); err != nil {
		fmt.Fprintf(stderr, "testenv: these tests need a real Redis: %v\n", err)
		return 1
	}
	ctx, cancel := context.WithTimeout(context.Background(), mainStartTimeout)
	cl, err := StartCluster(ctx, o)
	cancel()
	if err != nil {
		fmt.Fprintf(stderr, "testenv: cannot start the test cluster: %v\n", err)
		return 1
	}
	*c = cl
	code := run()
	if err := cl.Stop(); err != nil {
		fmt.Fprintf(stderr, "testenv: stopping the test cluster: %v\n", err)
		if code == 0 {
			code = 1
		}
	}
	return code
}
