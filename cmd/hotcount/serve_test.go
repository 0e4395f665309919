package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// clearServeEnv keeps the caller's HOTCOUNT_* variables out of the tests.
func clearServeEnv(t *testing.T) {
	for _, s := range settings {
		t.Setenv(s.env(), "")
	}
}

func TestServeUsage(t *testing.T) {
	clearServeEnv(t)
	dir := t.TempDir()
	badYAML := filepath.Join(dir, "bad.yaml")
	os.WriteFile(badYAML, []byte("listen: 127.0.0.1:0\nlisten_port: 1\n"), 0o644)
	cases := []struct {
		name string
		args []string
		env  map[string]string
		want string
	}{
		{"bad mode", []string{"--mode", "safe"}, nil, "mode (from flag --mode)"},
		{"bad listen", []string{"--listen", "nowhere"}, nil, "listen"},
		{"postgres and data", []string{"--postgres", "postgres://u@127.0.0.1:5432/x", "--data", dir}, nil, "exclude each other"},
		{"bad postgres", []string{"--postgres", "localhost"}, nil, "postgres"},
		{"unknown flag", []string{"--port", "1"}, nil, "port"},
		{"stray argument", []string{"now"}, nil, "unexpected argument"},
		{"unknown YAML field", []string{"--config", badYAML}, nil, "listen_port"},
		{"bad env mode", nil, map[string]string{"HOTCOUNT_MODE": "slow"}, "env HOTCOUNT_MODE"},
		{"bad env config", nil, map[string]string{"HOTCOUNT_CONFIG": filepath.Join(dir, "missing.yaml")}, "missing.yaml"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, _, stderr := runCLI(append([]string{"serve"}, tc.args...)...)
			if code != exitUsage || !strings.Contains(stderr, tc.want) || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d, stderr %q; want exit 2 and one line mentioning %q", code, stderr, tc.want)
			}
		})
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader goroutine.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }

// readAddr reads the "listening on http://ADDR" line from r.
func readAddr(t *testing.T, r io.Reader) string {
	t.Helper()
	line, err := bufio.NewReader(r).ReadString('\n')
	if err != nil {
		t.Fatalf("reading the listen line: %v (got %q)", err, line)
	}
	addr, ok := strings.CutPrefix(strings.TrimSpace(line), "listening on ")
	if !ok || !strings.HasPrefix(addr, "http://127.0.0.1:") || strings.HasSuffix(addr, ":0") {
		t.Fatalf("bad listen line %q", line)
	}
	return addr
}

// request sends one JSON request and decodes the JSON answer.
func request(t *testing.T, method, url, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	return resp.StatusCode, m
}

// TestServeInProcess runs `serve` in-process on a free port with a token,
// uses the API, then cancels the context (what SIGTERM does in main) and
// expects a clean stop.
func TestServeInProcess(t *testing.T) {
	clearServeEnv(t)
	data := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runServe(ctx, []string{"--listen", "127.0.0.1:0", "--data", data, "--token", "t0k"}, pw, &stderr)
		pw.Close()
	}()
	base := readAddr(t, pr)
	go io.Copy(io.Discard, pr)

	if code, m := request(t, "POST", base+"/v1/counters/a/incr", `{"by":2}`); code != 401 || m["error"] == nil {
		t.Fatalf("without token: %d %v", code, m)
	}
	if code, m := request(t, "POST", base+"/v1/counters/a/incr", `{"by":2}`, "Authorization", "Bearer t0k"); code != 200 || m["accepted"] != true {
		t.Fatalf("incr: %d %v", code, m)
	}
	if code, m := request(t, "GET", base+"/v1/counters/a", "", "Authorization", "Bearer t0k"); code != 200 || m["value"] != float64(2) {
		t.Fatalf("get: %d %v", code, m)
	}
	if code, _ := request(t, "GET", base+"/readyz", ""); code != 200 {
		t.Fatalf("readyz: %d", code)
	}
	if st, err := os.Stat(data); err != nil || !st.IsDir() {
		t.Fatalf("data folder not created: %v", err)
	}
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("exit %d, stderr %q", code, stderr.String())
	}
	if !strings.Contains(stderr.String(), "stopped cleanly") {
		t.Fatalf("stderr %q", stderr.String())
	}
}

// buildBinary builds the hotcount command into a temp folder.
func buildBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "hotcount")
	out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

// startBinary runs `hotcount serve` on a free port and returns its base URL.
func startBinary(t *testing.T, bin string, args ...string) (*exec.Cmd, string, *syncBuffer) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	cmd.Env = append(os.Environ(), "HOTCOUNT_CONFIG=", "HOTCOUNT_LISTEN=", "HOTCOUNT_TOKEN=")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	stderr := &syncBuffer{}
	cmd.Stderr = stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	base := readAddr(t, stdout)
	go io.Copy(io.Discard, stdout)
	return cmd, base, stderr
}

// stopBinary sends SIGTERM and expects exit status 0.
func stopBinary(t *testing.T, cmd *exec.Cmd, stderr *syncBuffer) {
	t.Helper()
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	errc := make(chan error, 1)
	go func() { errc <- cmd.Wait() }()
	select {
	case err := <-errc:
		if err != nil {
			t.Fatalf("after SIGTERM: %v, stderr:\n%s", err, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no exit within 30 s of SIGTERM; stderr:\n%s", stderr.String())
	}
}

// expectAfterRestart checks a fast-mode counter's cached value after a
// clean stop and a restart on the same data folder: the stop takes a last
// checkpoint, and the new process finds the embedded cache empty (its
// sentinels are gone) and restores the counter from it.
func expectAfterRestart(t *testing.T, before, after int64) {
	t.Helper()
	if after != before {
		t.Fatalf("after restart the value is %d, before the stop it was %d", after, before)
	}
	t.Logf("fast mode: value before stop %d, after restart %d", before, after)
}

// TestServeBinary builds the binary, serves on a free port, increments,
// stops with SIGTERM (exit 0), restarts on the same data folder and reads
// the counter again.
func TestServeBinary(t *testing.T) {
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	cmd, base, stderr := startBinary(t, bin, "--data", data)
	for i := 0; i < 5; i++ {
		if code, m := request(t, "POST", base+"/v1/counters/likes:post:1/incr", `{"by":3}`); code != 200 {
			t.Fatalf("incr: %d %v", code, m)
		}
	}
	code, m := request(t, "GET", base+"/v1/counters/likes:post:1", "")
	if code != 200 || m["value"] != float64(15) {
		t.Fatalf("get: %d %v", code, m)
	}
	stopBinary(t, cmd, stderr)
	if !strings.Contains(stderr.String(), "stopped cleanly") {
		t.Fatalf("stderr %q", stderr.String())
	}

	cmd, base, stderr = startBinary(t, bin, "--data", data)
	code, m = request(t, "GET", base+"/v1/counters/likes:post:1", "")
	if code != 200 {
		t.Fatalf("get after restart: %d %v", code, m)
	}
	expectAfterRestart(t, 15, int64(m["value"].(float64)))
	stopBinary(t, cmd, stderr)
}

// TestServeBinaryDurable: in durable mode every acknowledged increment is
// in the SQLite log, so after SIGTERM and a restart the exact read has all
// of them, and resent ids still count once. A restart in fast mode is
// refused (exit 2).
func TestServeBinaryDurable(t *testing.T) {
	bin := buildBinary(t)
	data := filepath.Join(t.TempDir(), "data")
	cmd, base, stderr := startBinary(t, bin, "--data", data, "--mode", "durable")
	for i := 0; i < 6; i++ {
		body := fmt.Sprintf(`{"by":2,"id":"order-%d"}`, i%3) // ids 0,1,2 twice
		if code, m := request(t, "POST", base+"/v1/counters/orders:7/incr", body); code != 200 {
			t.Fatalf("incr: %d %v", code, m)
		}
	}
	if code, m := request(t, "POST", base+"/v1/counters/orders:7/incr", `{"by":5}`); code != 200 {
		t.Fatalf("incr without id: %d %v", code, m)
	}
	want := float64(3*2 + 5)
	if code, m := request(t, "GET", base+"/v1/counters/orders:7?consistency=exact", ""); code != 200 || m["value"] != want {
		t.Fatalf("exact before stop: %d %v", code, m)
	}
	stopBinary(t, cmd, stderr)

	cmd, base, stderr = startBinary(t, bin, "--data", data, "--mode", "durable")
	if code, m := request(t, "GET", base+"/v1/counters/orders:7?consistency=exact", ""); code != 200 || m["value"] != want || m["mode"] != "durable" {
		t.Fatalf("exact after restart: %d %v (want %v)", code, m, want)
	}
	if code, m := request(t, "POST", base+"/v1/counters/orders:7/incr", `{"by":2,"id":"order-1"}`); code != 200 {
		t.Fatalf("resent id after restart: %d %v", code, m)
	}
	if code, m := request(t, "GET", base+"/v1/counters/orders:7?consistency=exact", ""); code != 200 || m["value"] != want {
		t.Fatalf("a resent id counted twice across a restart: %d %v", code, m)
	}
	stopBinary(t, cmd, stderr)

	// The same data in fast mode would leave orders:7 with no checkpoint
	// and its log behind: refused at start, naming the setting and the
	// counter, and the counter is kept.
	code, out := runBinary(t, bin, "serve", "--listen", "127.0.0.1:0", "--data", data, "--mode", "fast")
	if code != exitUsage || !strings.Contains(out, "mode (keys no namespace names) is fast") || !strings.Contains(out, "orders:7") {
		t.Errorf("serve --mode fast on durable counters: exit %d, stderr %q; want exit 2 naming the mode and orders:7", code, out)
	}
	cmd, base, stderr = startBinary(t, bin, "--data", data, "--mode", "durable")
	if code, m := request(t, "GET", base+"/v1/counters/orders:7?consistency=exact", ""); code != 200 || m["value"] != want {
		t.Errorf("exact after the refused start: %d %v (want %v)", code, m, want)
	}
	stopBinary(t, cmd, stderr)
}

// TestServeEmbeddedNodesChanged: serve on a data folder whose embedded
// store was written with another embedded_nodes is a configuration
// error: exit 2, one line naming the setting, the value given and the
// value the data was written with.
func TestServeEmbeddedNodesChanged(t *testing.T) {
	clearServeEnv(t)
	data := filepath.Join(t.TempDir(), "data")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	pr, pw := io.Pipe()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- runServe(ctx, []string{"--listen", "127.0.0.1:0", "--data", data, "--embedded-nodes", "3"}, pw, &stderr)
		pw.Close()
	}()
	readAddr(t, pr)
	go io.Copy(io.Discard, pr)
	cancel()
	if code := <-done; code != exitOK {
		t.Fatalf("first start: exit %d, stderr %q", code, stderr.String())
	}
	for _, tc := range []struct {
		args []string
		env  string
		want []string
	}{
		{[]string{"--embedded-nodes", "5"}, "", []string{"embedded_nodes (from flag --embedded-nodes)", "is 5", "written with 3"}},
		{nil, "4", []string{"embedded_nodes (from env HOTCOUNT_EMBEDDED_NODES)", "is 4", "written with 3"}},
	} {
		t.Setenv("HOTCOUNT_EMBEDDED_NODES", tc.env)
		code, _, stderr := runCLI(append([]string{"serve", "--listen", "127.0.0.1:0", "--data", data}, tc.args...)...)
		if code != exitUsage || strings.Count(stderr, "\n") != 1 {
			t.Fatalf("%q: exit %d, stderr %q; want exit 2 and one line", tc.args, code, stderr)
		}
		for _, w := range tc.want {
			if !strings.Contains(stderr, w) {
				t.Errorf("%q: stderr %q does not say %q", tc.args, stderr, w)
			}
		}
	}
}
