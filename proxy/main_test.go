package proxy_test

import (
	"flag"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/hotcount/hotcount/internal/testenv"
)

// cluster is the Redis Cluster (3 primaries with a replica each) shared by
// the package's tests. It is not started for a fuzzing run (go test -fuzz
// and its worker processes): FuzzCommands starts a small one of its own.
var cluster *testenv.Cluster

// leakOptions ignore rueidis's delayed cluster refresh, and its delayed
// close of a connection a MOVED replaced (5 s after a slot moved), which
// end on their own shortly after a client is closed.
var leakOptions = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient)._refresh.func2"),
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1"),
	goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*clusterClient).redirectOrNew.func1"),
}

// TestMain starts the shared cluster and fails the package if tests leave
// goroutines behind.
func TestMain(m *testing.M) {
	flag.Parse()
	var code int
	if fuzzing() {
		code = m.Run()
	} else {
		code = testenv.Main(m, testenv.ClusterOptions{Primaries: 3, Replicas: 1}, &cluster)
	}
	if code == 0 {
		if err := goleak.Find(leakOptions...); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// fuzzing reports whether this process runs a fuzz target (-test.fuzz) or
// is one of its workers.
func fuzzing() bool {
	f, w := flag.Lookup("test.fuzz"), flag.Lookup("test.fuzzworker")
	return (f != nil && f.Value.String() != "") || (w != nil && w.Value.String() == "true")
}
