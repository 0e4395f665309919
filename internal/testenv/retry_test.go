package testenv

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

// retryChildEnv makes the test binary run TestRetryChild for real
// (and TestMain start no cluster).
const retryChildEnv = "HOTCOUNT_RETRY_CHILD"

func TestRetryStopsAtTheFirstProof(t *testing.T) {
	t.Parallel()
	tries := 0
	var inner *testing.T
	t.Run("inner", func(t *testing.T) {
		inner = t
		Retry(t, Tries, func(t *testing.T) error {
			if tries++; tries < 2 {
				return errors.New("missed")
			}
			return nil
		})
	})
	if tries != 2 || inner.Skipped() || inner.Failed() {
		t.Errorf("fault on try 2: %d tries, skipped %v, failed %v; want 2 tries, neither", tries, inner.Skipped(), inner.Failed())
	}
}

func TestRetrySkipsWhenNoTryProved(t *testing.T) {
	t.Parallel()
	tries := 0
	var inner *testing.T
	t.Run("inner", func(t *testing.T) {
		inner = t
		Retry(t, Tries, func(t *testing.T) error {
			tries++
			return errors.New("missed")
		})
	})
	if tries != Tries || !inner.Skipped() || inner.Failed() {
		t.Errorf("no fault: %d tries, skipped %v, failed %v; want %d tries, skipped", tries, inner.Skipped(), inner.Failed(), Tries)
	}
}

// TestRetryFailsOnWrongData runs TestRetryChild in a child
// process: a try that finds wrong data fails the test at once, even though
// its fault did not happen, and is not retried.
func TestRetryFailsOnWrongData(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRetryChild$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), retryChildEnv+"=1")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) {
		t.Fatalf("child passed (%v), want a failure:\n%s", err, out)
	}
	for _, want := range []string{"--- FAIL: TestRetryChild/try1", "wrong data", "try 1 of 3 failed"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("child output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(string(out), "try2") {
		t.Errorf("a failed try was retried:\n%s", out)
	}
}

func TestRetryChild(t *testing.T) {
	if os.Getenv(retryChildEnv) == "" {
		t.Skip("runs only as the child process of TestRetryFailsOnWrongData")
	}
	Retry(t, Tries, func(t *testing.T) error {
		t.Error("wrong data")
		return errors.New("missed")
	})
}

func TestMain(m *testing.M) {
	if os.Getenv(retryChildEnv) != "" { // a child of TestRetryFailsOnWrongData
		os.Exit(m.Run())
	}
	code := m.Run()
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goroutine leak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
