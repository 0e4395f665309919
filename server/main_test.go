package server

import (
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package if tests or benchmarks leave goroutines
// behind (after the shared benchmark server is shut down).
func TestMain(m *testing.M) {
	code := m.Run()
	benchTeardown()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
