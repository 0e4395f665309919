package main

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/hotcount/hotcount/internal/testenv"
)

// runBinary runs the binary to its end (bounded) and returns its exit
// status and stderr.
func runBinary(t *testing.T, bin string, args ...string) (int, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), "HOTCOUNT_CONFIG=", "HOTCOUNT_LISTEN=", "HOTCOUNT_TOKEN=", "HOTCOUNT_REDIS=", "HOTCOUNT_DATA=")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), stderr.String()
	case err != nil:
		t.Fatal(err)
	}
	return 0, stderr.String()
}

// TestOneProcessPerDataFolder: while `serve` runs on the embedded store in
// a data folder, a second serve, a proxy and a rebuild on that folder exit
// 1 naming the folder and the holder's PID; after the holder is killed
// (SIGKILL: no clean-up) a new serve starts there at once. A SQLite store
// behind a real Redis stays shareable between processes.
func TestOneProcessPerDataFolder(t *testing.T) {
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	first, _, _ := startBinary(t, bin, "--data", data)
	pid := "process " + strconv.Itoa(first.Process.Pid)
	abs, _ := filepath.Abs(data)
	for _, args := range [][]string{
		{"serve", "--listen", "127.0.0.1:0", "--data", data},
		{"proxy", "--redis", "127.0.0.1:1", "--data", data, "--resp-listen", "127.0.0.1:0", "--admin-listen", "off"},
		{"rebuild", "--redis", "127.0.0.1:1", "--data", data},
	} {
		code, stderr := runBinary(t, bin, args...)
		if code != exitFailure || !strings.Contains(stderr, abs) || !strings.Contains(stderr, pid) {
			t.Errorf("%s beside a running serve: exit %d, stderr %q; want exit 1 naming %s and %s", args[0], code, stderr, abs, pid)
		}
	}
	first.Process.Kill()
	first.Wait()
	second, base, stderr := startBinary(t, bin, "--data", data)
	if code, _ := request(t, "POST", base+"/v1/counters/lock:k/incr", `{"by":1}`); code != 200 {
		t.Fatalf("serve after the holder was killed: incr %d, stderr %s", code, stderr.String())
	}
	stopBinary(t, second, stderr)

	// Behind a real Redis the SQLite store is shared: two serves at once.
	n, err := testenv.StartNode(t.Context(), testenv.NodeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Stop() })
	shared := filepath.Join(t.TempDir(), "shared")
	a, baseA, errA := startBinary(t, bin, "--data", shared, "--redis", n.Addr)
	b, baseB, errB := startBinary(t, bin, "--data", shared, "--redis", n.Addr)
	for _, base := range []string{baseA, baseB} {
		if code, _ := request(t, "POST", base+"/v1/counters/lock:shared/incr", `{"by":1}`); code != 200 {
			t.Fatalf("incr on %s: %d", base, code)
		}
	}
	stopBinary(t, a, errA)
	stopBinary(t, b, errB)
}
