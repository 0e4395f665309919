package server

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if tests or benchmarks leave goroutines
// behind (after the shared benchmark server is shut down). A Redis
// client's delayed topology refresh, which rueidis schedules after a
// failed connect (e.g. to an unreachable peer region), sleeps up to about
// a second and ends by itself: it is not a leak.
func TestMain(m *testing.M) {
	code := m.Run()
	benchTeardown()
	if code == 0 {
		if err := goleak.Find(goleak.IgnoreAnyFunction("github.com/redis/rueidis.(*call).DelayDo.func1")); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
